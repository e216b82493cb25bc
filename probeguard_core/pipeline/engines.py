"""LLM engines behind one small interface (paper §3, Appendix L: consensus generation).

Two implementations share prompt rendering (the tokenizer's chat template) and the
post-processing of sampled tokens, so the same work gives the same record shape:

* :class:`VLLMEngine` - vLLM offline (``LLM.generate``), prefix caching, tensor parallelism,
  batching across questions (one request per prompt, each with its own seed);
* :class:`TransformersEngine` - ``model.generate`` on CPU or GPU (what the tests use).

Sampling is *pure temperature sampling* on both: ``top_k`` disabled (transformers: ``top_k=0``,
so it is not silently top-50; vLLM: ``top_k=-1``, the "disabled" value every vLLM >= 0.8 accepts
- recent releases also take 0, older ones reject it) and ``top_p=1.0``, unless asked otherwise.
Nothing comes from the model's ``generation_config.json`` (Qwen3 ships top-k 20 / top-p 0.95,
Qwen2.5 a repetition penalty of 1.05): vLLM's ``LLM.generate`` uses the ``SamplingParams``
given as they are, and the transformers engine replaces the model's generation config by a
neutral one (transformers 5 fills every unset field of a passed config from it).
Log-probabilities are those of the model's raw distribution (before temperature), as the vLLM V1
engine returns by default (``logprobs_mode="raw_logprobs"``); a token's entropy is the entropy
of its top-``k`` (20) log-probabilities
renormalized to sum to one (the substrate's ``scipy.stats.entropy(exp(top_logprobs))``).
Tokens of a thinking block (up to the last ``</think>``) are excluded from ``text``,
``token_logprobs`` and ``token_entropies`` but counted in ``n_tokens``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .batched import decode_chunks, preallocated_layer, resolve_decode

__all__ = [
    "Engine",
    "Generation",
    "Messages",
    "TransformersEngine",
    "VLLMEngine",
    "make_engine",
    "top_entropies",
    "top_entropy",
]

Messages = Sequence[Mapping[str, str]]
THINK_START = "<think>"
THINK_END = "</think>"


def top_entropies(top_logprobs: Any) -> np.ndarray:
    """Entropies (nats) of the renormalized top-k distributions along the last axis.

    Vectorized over any leading shape (``(positions, k)`` -> ``(positions,)``); the single
    definition of a token's entropy, used by both engines and by :func:`top_entropy`.
    """
    lp = np.asarray(top_logprobs, dtype=np.float64)
    if lp.ndim == 0 or lp.shape[-1] == 0:
        raise ValueError("top_entropy: no log-probabilities")
    p = np.exp(lp - lp.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p > 0, p * np.log(p), 0.0)
    return -terms.sum(axis=-1)


def top_entropy(top_logprobs: Sequence[float]) -> float:
    """Entropy (nats) of the renormalized top-k distribution given by ``top_logprobs``."""
    lp = np.asarray(top_logprobs, dtype=np.float64)
    if lp.ndim != 1 or lp.size == 0:
        raise ValueError("top_entropy: no log-probabilities")
    return float(top_entropies(lp[None, :])[0])


@dataclass(frozen=True)
class Generation:
    """One completion.

    ``token_logprobs``/``token_entropies`` cover the answer part (after any thinking block);
    ``n_tokens`` counts every generated token (thinking included; the cost unit);
    ``first_top_logprobs`` are the (decoded token, log-prob) pairs of the first generated
    token's top-k, used by P(True) (Appendix A); ``None`` when log-probs were not requested.
    """

    text: str
    n_tokens: int
    token_logprobs: list[float] | None = None
    token_entropies: list[float] | None = None
    first_top_logprobs: list[tuple[str, float]] | None = None
    reasoning: str = ""

    @property
    def logprob(self) -> float | None:
        """Sum of the answer tokens' log-probabilities (DESIGN 2.1 ``logprob``); ``None`` without
        answer tokens (e.g. only a thinking block) or without log-probs."""
        if not self.token_logprobs:
            return None
        return float(math.fsum(self.token_logprobs))

    @property
    def mean_token_entropy(self) -> float | None:
        """Mean per-token entropy over the top-k log-probs; ``None`` without tokens or log-probs."""
        if not self.token_entropies:
            return None
        return float(math.fsum(self.token_entropies) / len(self.token_entropies))


@runtime_checkable
class Engine(Protocol):
    """``generate`` returns, for every prompt (a chat), ``n`` generations."""

    name: str

    def generate(
        self,
        prompts: Sequence[Messages],
        *,
        n: int,
        temperature: float,
        max_new_tokens: int,
        seed: int | Sequence[int],
        logprobs: int | None = 20,
        enable_thinking: bool = False,
    ) -> list[list[Generation]]: ...


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------

def _check_args(prompts: Sequence[Messages], n: int, temperature: float, max_new_tokens: int,
                seed: int | Sequence[int], logprobs: int | None) -> list[int]:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if temperature == 0 and n != 1:
        raise ValueError(f"greedy decoding (temperature 0) gives one completion; got n={n}")
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if logprobs is not None and logprobs < 1:
        raise ValueError(f"logprobs must be None or >= 1, got {logprobs}")
    seeds = [int(seed)] * len(prompts) if isinstance(seed, int) else [int(s) for s in seed]
    if len(seeds) != len(prompts):
        raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
    return seeds


def render_chat(tokenizer: Any, messages: Messages, enable_thinking: bool) -> list[int]:
    """Token ids of a chat rendered by the tokenizer's own chat template (generation prompt added).

    ``enable_thinking`` is passed to the template (Qwen3's switch; templates without it ignore it).
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; an instruction-tuned model is required")
    text = tokenizer.apply_chat_template(
        [dict(m) for m in messages], tokenize=False, add_generation_prompt=True, enable_thinking=enable_thinking
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


class _Post:
    """Turns generated token ids (+ per-position log-probs) into a :class:`Generation`.

    Log-prob post-processing is vectorized: the sampled log-probs come as one array, the top-k
    as two ``(positions, k)`` arrays (ids, log-probs), and the entropies of all positions are
    one :func:`top_entropies` call; only the first position's top-k is decoded to strings
    (P(True)), through a per-id cache.
    """

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        vocab = tokenizer.get_vocab()
        self.think_start = vocab.get(THINK_START)
        self.think_end = vocab.get(THINK_END)
        self._piece: dict[int, str] = {}

    def piece(self, token_id: int) -> str:
        """The decoded text of one token id (cached)."""
        s = self._piece.get(token_id)
        if s is None:
            s = self._piece[token_id] = self.tok.decode([token_id])
        return s

    def build(
        self,
        ids: Sequence[int],
        sampled_lp: Sequence[float] | np.ndarray | None,
        top_ids: Sequence[Sequence[int]] | np.ndarray | None,
        top_lps: Sequence[Sequence[float]] | np.ndarray | None = None,
        sampled_mask: Sequence[bool] | np.ndarray | None = None,
    ) -> Generation:
        """``top_ids``/``top_lps``: ``(positions, k)``; for backward compatibility ``top_ids`` may
        also be the old per-position list of ``(id, logprob)`` pairs with ``top_lps`` None.
        ``sampled_mask`` (per position) excludes forced (not sampled) tokens from the log-probs
        and entropies; they still count in ``n_tokens``."""
        ids = list(ids)
        cut = 0
        if self.think_end is not None and self.think_end in ids:
            cut = len(ids) - ids[::-1].index(self.think_end)
        elif self.think_start is not None and ids[:1] == [self.think_start]:
            cut = len(ids)  # thinking never closed: no answer content
        answer_ids = ids[cut:]
        text = self.tok.decode(answer_ids, skip_special_tokens=True).strip()
        reasoning = self.tok.decode(ids[:cut], skip_special_tokens=True).replace(THINK_START, "").replace(THINK_END, "").strip()
        lps = ents = first = None
        if sampled_lp is not None and top_ids is not None:
            if top_lps is None:  # list of [(id, lp), ...] per position
                pairs = [list(t) for t in top_ids]
                top_ids = [[i for i, _ in t] for t in pairs]
                top_lps = [[lp for _, lp in t] for t in pairs]
            t_ids = np.asarray(top_ids, dtype=np.int64)
            t_lps = np.asarray(top_lps, dtype=np.float64)
            keep = np.ones(len(ids), dtype=bool) if sampled_mask is None else np.asarray(sampled_mask, dtype=bool)
            keep[:cut] = False
            lps = np.asarray(sampled_lp, dtype=np.float64)[keep].tolist()
            ents = top_entropies(t_lps[keep]).tolist() if keep.any() else []
            first = ([(self.piece(int(i)), float(lp)) for i, lp in zip(t_ids[0].tolist(), t_lps[0].tolist())]
                     if len(ids) else [])
        return Generation(text=text, n_tokens=len(ids), token_logprobs=lps, token_entropies=ents,
                          first_top_logprobs=first, reasoning=reasoning)


# --------------------------------------------------------------------------------------------
# transformers
# --------------------------------------------------------------------------------------------

@dataclass
class TransformersEngine:
    """``transformers`` engine (CPU or GPU).

    Two decoding paths give the same records shape:

    * ``fast=True`` (default): each prompt is **prefilled once** (batch 1) and its KV cache is
      shared by its ``n`` continuations; the decode steps of several prompts run as **one
      batch** (left-padded caches, explicit position ids, at most ``max_batch_rows`` rows =
      prompts x n; a prompt leaves the batch when its n rows have finished).  Sampling is the
      one of ``generate`` (raw logits / temperature, softmax, ``torch.multinomial``) drawn from
      a per-prompt ``torch.Generator`` seeded with the prompt's seed, so the random stream of a
      prompt does not depend on the other prompts.  Log-prob post-processing is vectorized (one
      ``log_softmax``/``topk`` per step for the whole batch, one host transfer per prompt).
    * ``fast=False``: the straightforward loop, one ``model.generate`` per prompt with
      ``num_return_sequences=n`` inside ``torch.random.fork_rng`` (the reference the benchmark
      and the tests compare with).

    Same seed, same sampled tokens: the per-prompt generator seeded with ``s`` gives the same
    stream as the global generator seeded with ``s``, and both draw one multinomial over the
    prompt's n rows per step (finished rows keep drawing, as in ``generate``).  What can differ
    is floating point: a prefill at batch 1 instead of n, and decode matmuls/attention over a
    batch with other prompts' (masked) padding, are not guaranteed bit-identical, so a
    log-prob can move in its last bits and, rarely, a near-tie sample can flip.
    ``benchmarks/engine_vs_generate.py`` times the paths; for byte-identical
    re-runs the same engine settings (``fast``, ``max_batch_rows``) and the same prompt
    chunking are what is needed, and then results do not depend on order or resumption.

    ``batch_invariant=True`` (default) decodes each prompt's n rows as their own batch, so the
    records of a stage are byte-identical however its questions are chunked or sharded (the
    pipeline's batched and per-question runs, and sharded workers, give the same files);
    ``batch_invariant=False`` also batches decode steps across prompts (faster on a large
    batch, at the cost of last-bit differences that depend on batch composition).

    Across machines, the same settings give the same records only on the same CPU kernels:
    torch and MKL pick their matmul and reduction code by the CPU's instruction set, so a
    log-prob moves in its last bits on another CPU (about 1e-5 relative over 32 tokens, measured
    between two x86 machines) and a near-tie sample can flip.  :func:`cpu_fingerprint` names
    those kernels; a release records it, so a regeneration knows whether to expect bytes.

    ``num_threads`` sets ``torch.set_num_threads`` for the process (1 is usually fastest per
    core for a small model on a shared CPU; ``None`` leaves torch's default).
    """

    model: str
    device: str | None = None
    dtype: str = "auto"
    top_k: int = 0
    top_p: float = 1.0
    trust_remote_code: bool = False
    fast: bool = True
    max_batch_rows: int = 32
    num_threads: int | None = None
    batch_invariant: bool = True
    #: the batched engine (:mod:`.batched`): prompts decoded in fixed chunks of this many, one
    #: batched sampling step; records reproducible for the same chunking.  None: the paths above
    batch_prompts: int | None = None
    #: the batched engine's decode over transformers' ``StaticCache`` (:mod:`.batched`; off by default)
    static_cache: bool = False
    #: as ``static_cache``, each decode step ``torch.compile``'d (implies ``static_cache``)
    compile_decode: bool = False
    name: str = field(init=False)
    #: the batched decode mode that runs (``batched.DECODE_MODES``), resolved from the two
    #: options above and what the model and torch build support (``batched.resolve_decode``)
    decode: str = field(init=False)

    def __post_init__(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        if self.batch_prompts is not None and self.batch_prompts < 1:
            raise ValueError(f"batch_prompts must be None or >= 1, got {self.batch_prompts}")
        if (self.static_cache or self.compile_decode) and self.batch_prompts is None:
            raise ValueError("static_cache / compile_decode are options of the batched engine: set batch_prompts")
        if self.max_batch_rows < 1:
            raise ValueError(f"max_batch_rows must be >= 1, got {self.max_batch_rows}")
        if self.num_threads is not None:
            if self.num_threads < 1:
                raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
            torch.set_num_threads(self.num_threads)
        self.name = str(self.model)
        if self.device is None:
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.tokenizer = AutoTokenizer.from_pretrained(self.model, trust_remote_code=self.trust_remote_code)
        self.lm = AutoModelForCausalLM.from_pretrained(
            self.model, dtype=self.dtype, use_safetensors=True, trust_remote_code=self.trust_remote_code
        ).to(self.device).eval()
        self._post = _Post(self.tokenizer)
        eos = self.lm.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in eos:
            eos.append(self.tokenizer.eos_token_id)
        if not eos:
            raise ValueError(f"{self.model}: no eos token id in the generation config or tokenizer")
        self._eos = eos
        pad = self.tokenizer.pad_token_id
        self._pad = eos[0] if pad is None else pad
        # transformers 5 `_prepare_generation_config` fills every field left None in the config
        # passed to `generate` from `model.generation_config` (i.e. generation_config.json:
        # repetition_penalty, min_p, top_k, ...).  A neutral one keeps the sampling exactly the
        # one asked for (same as vLLM with explicit SamplingParams).
        self.lm.generation_config = GenerationConfig(eos_token_id=self._eos, pad_token_id=self._pad)
        import inspect

        # transformers >= 5.2x names the cache argument `cache` (`past_key_values` deprecated)
        self._cache_kw = "cache" if "cache" in inspect.signature(self.lm.forward).parameters else "past_key_values"
        self.decode = resolve_decode(self, self.static_cache, self.compile_decode)
        self.prompt_tokens = 0  # prompt tokens prefilled so far (cost accounting)
        self.forced_rows = 0  # rows whose answer tag was forced (generate(force_tag=...))
        self.tagged_rows = 0  # rows that wrote the closing tag themselves

    # -- shared ---------------------------------------------------------------------------------
    def _rows_to_generations(self, seqs: list[list[int]], lps: Any, top_v: Any, top_i: Any,
                             forced: list[list[bool]] | None = None) -> list[Generation]:
        """Rows of one prompt -> generations; ``lps`` (n, steps), ``top_*`` (n, steps, k) arrays
        or None.  Each row is cut after its first eos (the eos token is kept, as ``generate``);
        ``forced`` marks teacher-forced positions (answer-tag forcing)."""
        gens = []
        for r, seq in enumerate(seqs):
            stop = next((k + 1 for k, t in enumerate(seq) if t in self._eos), len(seq))
            seq = seq[:stop]
            mask = None if forced is None else [not f for f in forced[r][:stop]]
            if lps is None:
                gens.append(self._post.build(seq, None, None))
            else:
                gens.append(self._post.build(seq, lps[r, :stop], top_i[r, :stop], top_v[r, :stop], mask))
        return gens

    def generate(self, prompts: Sequence[Messages], *, n: int, temperature: float, max_new_tokens: int,
                 seed: int | Sequence[int], logprobs: int | None = 20, enable_thinking: bool = False,
                 force_tag: tuple[str, str] | None = None, response_prefix: str = "") -> list[list[Generation]]:
        """``force_tag=(opener, closer)`` (fast path only; e.g. ``("\\n<answer>", "</answer>")``):
        a row that ends (eos, or its rationale budget ``max_new_tokens - len(opener) - 1 -
        len(closer)``) without ``closer`` in its text is continued with the teacher-forced
        ``opener``, ONE sampled token, then the forced ``closer`` and eos.  Forced tokens are not
        sampled: they are left out of the log-probs and entropies but count in ``n_tokens``.
        ``self.forced_rows`` / ``self.tagged_rows`` count forced vs natively tagged rows.

        ``response_prefix`` (both paths): text the assistant turn is forced to start with (e.g.
        ``"[Query 1]"``); it is appended to the rendered prompt, prepended to each ``text``, and
        not counted in ``n_tokens`` (not generated)."""
        seeds = _check_args(prompts, n, temperature, max_new_tokens, seed, logprobs)
        ids = [render_chat(self.tokenizer, m, enable_thinking) for m in prompts]
        if response_prefix:
            pre = self.tokenizer(response_prefix, add_special_tokens=False)["input_ids"]
            ids = [x + pre for x in ids]
            out = self.generate_ids(ids, seeds, n, temperature, max_new_tokens, logprobs, force_tag)
            return [[replace(g, text=(response_prefix + g.text) if not g.reasoning else g.text) for g in gs] for gs in out]
        return self.generate_ids(ids, seeds, n, temperature, max_new_tokens, logprobs, force_tag)

    def generate_ids(self, ids: list[list[int]], seeds: list[int], n: int, temperature: float, max_new_tokens: int,
                     logprobs: int | None, force_tag: tuple[str, str] | None = None) -> list[list[Generation]]:
        """:meth:`generate` on already rendered prompt token ids."""
        self.prompt_tokens += sum(len(x) for x in ids)
        fast = self.fast and self._cache_ok()
        if force_tag is not None and not fast:
            raise ValueError("force_tag needs the fast path (fast=True and a full-attention model)")
        if not fast:
            return [self._generate_reference(x, s, n, temperature, max_new_tokens, logprobs) for x, s in zip(ids, seeds)]
        if self.batch_prompts is not None:
            if force_tag is not None:
                raise ValueError("force_tag is not supported by the batched engine (batch_prompts); leave it None")
            return decode_chunks(self, ids, seeds, n, temperature, max_new_tokens, logprobs)
        script = None
        if force_tag is not None:
            opener = self.tokenizer(force_tag[0], add_special_tokens=False)["input_ids"]
            closer = self.tokenizer(force_tag[1], add_special_tokens=False)["input_ids"]
            script = ([*opener, None, *closer, self._eos[0]], max_new_tokens - len(opener) - 1 - len(closer), force_tag[1])
            if script[1] < 1:
                raise ValueError(f"max_new_tokens={max_new_tokens} leaves no room before the forced answer tag")
        # batch-invariant (default): each prompt decodes alone (its n rows), so a record does not
        # depend on which other prompts shared the call (batched = per-question, sharded = single run)
        per = 1 if self.batch_invariant else max(1, self.max_batch_rows // n)
        out: list[list[Generation]] = []
        for i in range(0, len(ids), per):
            out.extend(self._generate_fast(ids[i:i + per], seeds[i:i + per], n, temperature, max_new_tokens,
                                           logprobs, script))
        return out

    # -- reference: one `generate` per prompt -----------------------------------------------------
    def _generate_reference(self, prompt_ids: list[int], s: int, n: int, temperature: float, max_new_tokens: int,
                            logprobs: int | None) -> list[Generation]:
        import torch
        from transformers import GenerationConfig

        sample = temperature > 0
        # a fresh config over the neutral model config set in __post_init__: nothing is
        # inherited from the model's generation_config.json
        cfg = GenerationConfig(
            do_sample=sample,
            temperature=temperature if sample else None,
            top_k=self.top_k if sample else None,
            top_p=self.top_p if sample else None,
            max_new_tokens=max_new_tokens,
            num_return_sequences=n,
            eos_token_id=self._eos,
            pad_token_id=self._pad,
            output_logits=logprobs is not None,
            return_dict_in_generate=True,
        )
        devices = [torch.device(self.device).index or 0] if str(self.device).startswith("cuda") else []
        x = torch.tensor([prompt_ids], device=self.device)
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            torch.manual_seed(s)
            res = self.lm.generate(input_ids=x, attention_mask=torch.ones_like(x), generation_config=cfg)
        seqs = res.sequences[:, x.shape[1]:].tolist()
        lps = top_v = top_i = None
        if logprobs is not None:
            with torch.inference_mode():
                lsm = torch.log_softmax(torch.stack(list(res.logits), dim=1).float(), dim=-1)  # (n, steps, V)
                sampled = res.sequences[:, x.shape[1]:]
                lps = lsm.gather(-1, sampled[..., None])[..., 0].double().cpu().numpy()
                v, j = torch.topk(lsm, min(logprobs, lsm.shape[-1]), dim=-1)
                top_v, top_i = v.double().cpu().numpy(), j.cpu().numpy()
        return self._rows_to_generations(seqs, lps, top_v, top_i)

    # -- fast: prefill once, n continuations from the shared cache, prompts batched -----------------
    def _cache_ok(self) -> bool:
        """The fast path handles models whose cache is all full-attention ``DynamicLayer``s."""
        cfg = self.lm.config.get_text_config(decoder=True)
        types = getattr(cfg, "layer_types", None)
        return (self.top_k == 0 and self.top_p == 1.0 and not getattr(cfg, "sliding_window", None)
                and (types is None or all(t == "full_attention" for t in types)))

    def _generate_fast(self, prompt_ids: list[list[int]], seeds: list[int], n: int, temperature: float,
                       max_new_tokens: int, logprobs: int | None,
                       script: tuple[list[int | None], int, str] | None = None) -> list[list[Generation]]:
        import torch
        from transformers import DynamicCache

        dev = self.device
        q = len(prompt_ids)
        sample = temperature > 0
        gens_rng = [torch.Generator(device=dev).manual_seed(s) for s in seeds]
        lens = [len(x) for x in prompt_ids]
        lmax = max(lens)
        with torch.inference_mode():
            # 1. prefill each prompt once (batch 1, no padding)
            kv: list[list[tuple[Any, Any]]] = []
            first_logits = []
            for x in prompt_ids:
                t = torch.tensor([x], device=dev)
                o = self.lm(input_ids=t, attention_mask=torch.ones_like(t), use_cache=True, logits_to_keep=1)
                first_logits.append(o.logits[:, -1].float())
                pkv = o.cache if self._cache_kw == "cache" else o.past_key_values
                kv.append([(layer.keys, layer.values) for layer in pkv.layers])
                del o
            n_layers = len(kv[0])

            # 2. one batch: prompt p's rows are p*n .. p*n+n-1; caches left-padded to lmax
            def padded(t: Any, L: int) -> Any:
                t = t.expand(n, *t.shape[1:])
                return torch.nn.functional.pad(t, (0, 0, lmax - L, 0)) if L < lmax else t

            # preallocated to lmax + max_new_tokens: a decode step writes one slot in place
            # instead of re-concatenating the whole cache (DynamicLayer's O(length) copy per step)
            cache = DynamicCache(ddp_cache_data=[
                (torch.cat([padded(kv[p][li][0], lens[p]) for p in range(q)]),
                 torch.cat([padded(kv[p][li][1], lens[p]) for p in range(q)]))
                for li in range(n_layers)])
            cache.layers = [preallocated_layer(layer.keys, layer.values, max_new_tokens) for layer in cache.layers]
            del kv
            mask = torch.zeros((q * n, lmax), dtype=torch.long, device=dev)
            for p, L in enumerate(lens):
                mask[p * n:(p + 1) * n, lmax - L:] = 1
            pos = torch.tensor([L for L in lens for _ in range(n)], device=dev)[:, None]
            eos = torch.tensor(self._eos, device=dev)

            active = list(range(q))  # prompts still in the batch, in row-block order
            unfinished = [torch.ones(n, dtype=torch.bool, device=dev) for _ in range(q)]
            toks: list[list[Any]] = [[] for _ in range(q)]
            step_lp: list[list[Any]] = [[] for _ in range(q)]
            step_tv: list[list[Any]] = [[] for _ in range(q)]
            step_ti: list[list[Any]] = [[] for _ in range(q)]
            state = [[-1] * n for _ in range(q)]  # answer-tag forcing: -1 free, -2 tagged itself, else script index
            forced = [[[] for _ in range(n)] for _ in range(q)]
            logits = torch.cat([fl.expand(n, -1) for fl in first_logits])  # (rows, V), raw
            k = None if logprobs is None else min(logprobs, logits.shape[-1])
            for step in range(max_new_tokens):
                lsm = v = j = None
                if logprobs is not None:  # vectorized over the whole batch
                    lsm = torch.log_softmax(logits, dim=-1)
                    v, j = torch.topk(lsm, k, dim=-1)
                nxt_rows = []
                for b, p in enumerate(active):
                    lg = logits[b * n:(b + 1) * n]
                    if sample:
                        probs = torch.softmax(lg / temperature, dim=-1)
                        nt = torch.multinomial(probs, 1, generator=gens_rng[p])[:, 0]
                    else:
                        nt = torch.argmax(lg, dim=-1)
                    nt = torch.where(unfinished[p], nt, torch.full_like(nt, self._pad))
                    if script is not None:
                        nt = self._force_step(nt, lg, gens_rng[p], temperature, step, unfinished[p], state[p],
                                              forced[p], toks[p], script)
                    toks[p].append(nt)
                    if lsm is not None:
                        step_lp[p].append(lsm[b * n:(b + 1) * n].gather(-1, nt[:, None])[:, 0])
                        step_tv[p].append(v[b * n:(b + 1) * n])
                        step_ti[p].append(j[b * n:(b + 1) * n])
                    unfinished[p] = unfinished[p] & ~torch.isin(nt, eos)
                    nxt_rows.append(nt)
                if step == max_new_tokens - 1:
                    break
                keep = [b for b, p in enumerate(active) if bool(unfinished[p].any())]
                if not keep:
                    break
                nxt = torch.cat(nxt_rows)
                if len(keep) < len(active):  # drop prompts whose n rows have all finished
                    rows = torch.cat([torch.arange(b * n, (b + 1) * n, device=dev) for b in keep])
                    for layer in cache.layers:
                        layer.select_rows(rows)
                    mask, pos, nxt = mask[rows], pos[rows], nxt[rows]
                    active = [active[b] for b in keep]
                mask = torch.cat([mask, torch.ones((mask.shape[0], 1), dtype=mask.dtype, device=dev)], dim=1)
                o = self.lm(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, use_cache=True,
                            **{self._cache_kw: cache})
                pos = pos + 1
                logits = o.logits[:, -1].float()
                del o

            out = []
            for p in range(q):
                seqs = torch.stack(toks[p], dim=1).tolist()
                if logprobs is None:
                    out.append(self._rows_to_generations(seqs, None, None, None))
                else:
                    lps = torch.stack(step_lp[p], dim=1).double().cpu().numpy()
                    tv = torch.stack(step_tv[p], dim=1).double().cpu().numpy()
                    ti = torch.stack(step_ti[p], dim=1).cpu().numpy()
                    out.append(self._rows_to_generations(seqs, lps, tv, ti, forced[p] if script is not None else None))
        return out

    def _white_space_ids(self) -> Any:
        """Boolean mask over the vocabulary: tokens that decode to white space only (cached)."""
        import torch

        if getattr(self, "_ws", None) is None:
            n = self.lm.get_output_embeddings().weight.shape[0]
            self._ws = torch.tensor([not self._post.piece(i).strip() for i in range(n)], device=self.device)
        return self._ws

    def _force_step(self, nt: Any, lg: Any, gen: Any, temperature: float, step: int, unfinished: Any,
                    state: list[int], forced: list[list[bool]], history: list[Any],
                    script: tuple[list[int | None], int, str]) -> Any:
        """Answer-tag forcing for one prompt's rows at one step (see ``generate(force_tag=...)``).

        ``state[r]``: -1 free, -2 wrote its own closing tag (free to the end), ``i >= 0`` the
        next script position; ``None`` in the script is the option token, sampled (same
        temperature, the prompt's generator) from the model's distribution without the
        white-space-only tokens and eos, so the tag holds one visible token (which the strict
        parser may still reject).
        """
        import torch

        seq, budget, closer = script
        toks = nt.tolist()
        live = unfinished.tolist()
        for r in range(len(toks)):
            if not live[r] or state[r] == -2:
                forced[r].append(False)
                continue
            if state[r] == -1:
                if toks[r] not in self._eos and step < budget:
                    forced[r].append(False)
                    continue
                text = self.tokenizer.decode([int(h[r]) for h in history], skip_special_tokens=True)
                if closer in text:
                    self.tagged_rows += 1
                    state[r] = -2
                    forced[r].append(False)
                    continue
                self.forced_rows += 1
                state[r] = 0
            want = seq[state[r]]
            if want is None:
                forced[r].append(False)
                row = lg[r].clone()
                row[self._white_space_ids()] = -float("inf")
                row[self._eos] = -float("inf")
                if temperature > 0:
                    toks[r] = int(torch.multinomial(torch.softmax(row / temperature, dim=-1), 1, generator=gen))
                else:
                    toks[r] = int(torch.argmax(row))
                state[r] += 1
                continue
            forced[r].append(True)
            toks[r] = want
            state[r] += 1
        return torch.tensor(toks, dtype=nt.dtype, device=nt.device)


# --------------------------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------------------------


@dataclass
class VLLMEngine:
    """vLLM offline engine: ``LLM.generate`` over all prompts at once (batching across
    questions), prefix caching on, optional tensor parallelism, one seed per request.

    Prompts go in as token ids (``{"prompt_token_ids": ...}``, vLLM's ``TokensPrompt``) rendered
    by the same chat template as the transformers engine, with one ``SamplingParams`` per prompt;
    vLLM gives the ``n`` samples of a seeded request the seeds ``seed + i``.  ``max_logprobs``
    (vLLM's engine limit, default 20) must be >= the ``logprobs`` asked for.

    Reproducibility: per-request seeds fix the sampling noise, but vLLM's numerics depend on
    batch composition; identical outputs need ``VLLM_BATCH_INVARIANT=1`` (batch-invariant
    kernels) or, offline, ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (deterministic scheduling; then
    vLLM's ``seed`` also seeds this process's global RNGs), same hardware and vLLM version.
    """

    model: str
    tensor_parallel_size: int = 1
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    dtype: str = "auto"
    top_k: int = 0
    top_p: float = 1.0
    trust_remote_code: bool = False
    max_logprobs: int = 20
    #: one seed per request (default; records independent of batching, at the cost of vLLM's
    #: slower per-request-generator sampler) or, False, the engine's seed only (fast sampler;
    #: results then depend on batch composition).  See docs/pipeline.md.
    per_request_seeds: bool = True
    engine_kwargs: dict[str, Any] = field(default_factory=dict)
    name: str = field(init=False)

    def __post_init__(self) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:  # pragma: no cover - depends on the GPU extra
            raise ValueError("the vLLM engine needs the 'gpu' extra: pip install 'probeguard_core[gpu]'") from exc
        from probeguard_core import SEED

        self.name = str(self.model)
        kwargs = {
            "model": self.model,
            "tensor_parallel_size": self.tensor_parallel_size,
            "enable_prefix_caching": self.enable_prefix_caching,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "dtype": self.dtype,
            "trust_remote_code": self.trust_remote_code,
            "max_logprobs": self.max_logprobs,
            "seed": SEED,
        }
        if self.max_model_len is not None:
            kwargs["max_model_len"] = self.max_model_len
        kwargs.update(self.engine_kwargs)
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self._post = _Post(self.tokenizer)

    def generate(self, prompts: Sequence[Messages], *, n: int, temperature: float, max_new_tokens: int,
                 seed: int | Sequence[int], logprobs: int | None = 20, enable_thinking: bool = False) -> list[list[Generation]]:
        from vllm import SamplingParams

        seeds = _check_args(prompts, n, temperature, max_new_tokens, seed, logprobs)
        if logprobs is not None and logprobs > self.max_logprobs:
            raise ValueError(f"logprobs={logprobs} exceeds max_logprobs={self.max_logprobs}; raise VLLMEngine(max_logprobs=...)")
        params = [
            SamplingParams(
                n=n, temperature=temperature, top_k=(self.top_k if self.top_k > 0 else -1), top_p=self.top_p,
                max_tokens=max_new_tokens, logprobs=logprobs, seed=s if self.per_request_seeds else None,
            )
            for s in seeds
        ]
        requests = [{"prompt_token_ids": render_chat(self.tokenizer, m, enable_thinking)} for m in prompts]
        results = self.llm.generate(requests, params, use_tqdm=False)
        out: list[list[Generation]] = []
        if len(results) != len(requests):
            raise RuntimeError(f"vLLM returned {len(results)} outputs for {len(requests)} prompts")
        for res in results:
            gens = []
            # LLM.generate returns finished requests (FINAL_ONLY); order the n samples by index
            for comp in sorted(res.outputs, key=lambda c: c.index):
                ids = list(comp.token_ids)
                sampled = tops = None
                if logprobs is not None:
                    if comp.logprobs is None or len(comp.logprobs) != len(ids):
                        got = None if comp.logprobs is None else len(comp.logprobs)
                        raise RuntimeError(f"vLLM returned {got} per-token log-prob entries for {len(ids)} tokens")
                    sampled, tops = _vllm_logprob_arrays(ids, comp.logprobs, logprobs)
                    gens.append(self._post.build(ids, sampled, *tops))
                    continue
                gens.append(self._post.build(ids, None, None))
            out.append(gens)
        return out


def _vllm_logprob_arrays(ids: Sequence[int], per_pos: Sequence[Mapping[int, Any]], k: int) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """vLLM's per-position ``{token_id: Logprob}`` dicts (top-k plus the sampled token) -> the
    sampled log-probs ``(positions,)`` and the top-k ids / log-probs ``(positions, k)``, best
    first, ties by token id."""
    sampled = np.fromiter((pos[t].logprob for t, pos in zip(ids, per_pos)), dtype=np.float64, count=len(ids))
    top_i = np.zeros((len(ids), k), dtype=np.int64)
    top_v = np.full((len(ids), k), -np.inf)
    for r, pos in enumerate(per_pos):
        tid = np.fromiter(pos.keys(), dtype=np.int64, count=len(pos))
        lp = np.fromiter((x.logprob for x in pos.values()), dtype=np.float64, count=len(pos))
        order = np.lexsort((tid, -lp))[:k]
        top_i[r, :order.size], top_v[r, :order.size] = tid[order], lp[order]
    return sampled, (top_i, top_v)


def make_engine(kind: str, model: str, **kwargs: Any) -> Engine:
    """``kind`` = ``"transformers"`` or ``"vllm"``; keyword arguments go to the engine."""
    if kind == "transformers":
        return TransformersEngine(model, **kwargs)
    if kind == "vllm":
        return VLLMEngine(model, **kwargs)
    raise ValueError(f"unknown engine {kind!r}; expected 'transformers' or 'vllm'")
