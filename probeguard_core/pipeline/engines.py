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
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "Engine",
    "Generation",
    "Messages",
    "TransformersEngine",
    "VLLMEngine",
    "make_engine",
    "top_entropy",
]

Messages = Sequence[Mapping[str, str]]
THINK_START = "<think>"
THINK_END = "</think>"


def load_sequence_classifier(model: str, device: str | None, trust_remote_code: bool = False) -> tuple[Any, Any, str]:
    """Tokenizer and ``AutoModelForSequenceClassification`` in eval mode (safetensors only).

    Shared by the NLI scorer and the cross-encoder reranker; ``device`` None picks CUDA when
    available.  Returns ``(tokenizer, model, device)``.
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
    net = AutoModelForSequenceClassification.from_pretrained(
        model, use_safetensors=True, trust_remote_code=trust_remote_code
    ).to(device).eval()
    return tokenizer, net, device


def top_entropy(top_logprobs: Sequence[float]) -> float:
    """Entropy (nats) of the renormalized top-k distribution given by ``top_logprobs``."""
    lp = np.asarray(top_logprobs, dtype=np.float64)
    if lp.size == 0:
        raise ValueError("top_entropy: no log-probabilities")
    p = np.exp(lp - lp.max())
    p /= p.sum()
    nz = p[p > 0]
    return float(-(nz * np.log(nz)).sum())


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
    """Turns generated token ids (+ per-position log-probs) into a :class:`Generation`."""

    def __init__(self, tokenizer: Any):
        self.tok = tokenizer
        vocab = tokenizer.get_vocab()
        self.think_start = vocab.get(THINK_START)
        self.think_end = vocab.get(THINK_END)

    def build(
        self,
        ids: Sequence[int],
        sampled_lp: Sequence[float] | None,
        tops: Sequence[Sequence[tuple[int, float]]] | None,
    ) -> Generation:
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
        if sampled_lp is not None and tops is not None:
            lps = [float(x) for x in sampled_lp[cut:]]
            ents = [top_entropy([lp for _, lp in t]) for t in tops[cut:]]
            first = [(self.tok.decode([i]), float(lp)) for i, lp in tops[0]] if tops else []
        return Generation(text=text, n_tokens=len(ids), token_logprobs=lps, token_entropies=ents,
                          first_top_logprobs=first, reasoning=reasoning)


# --------------------------------------------------------------------------------------------
# transformers
# --------------------------------------------------------------------------------------------

@dataclass
class TransformersEngine:
    """``transformers`` engine (CPU or GPU).

    Determinism: every prompt is generated on its own with its own seed, inside
    ``torch.random.fork_rng`` (``generate`` draws from the global generator, which we seed only
    inside the fork, so the caller's RNG state is untouched).  Results therefore do not depend
    on batch composition or order, which is what makes kill-and-resume byte-identical.
    """

    model: str
    device: str | None = None
    dtype: str = "auto"
    top_k: int = 0
    top_p: float = 1.0
    trust_remote_code: bool = False
    name: str = field(init=False)

    def __post_init__(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

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

    def generate(self, prompts: Sequence[Messages], *, n: int, temperature: float, max_new_tokens: int,
                 seed: int | Sequence[int], logprobs: int | None = 20, enable_thinking: bool = False) -> list[list[Generation]]:
        import torch
        from transformers import GenerationConfig

        seeds = _check_args(prompts, n, temperature, max_new_tokens, seed, logprobs)
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
        out: list[list[Generation]] = []
        for messages, s in zip(prompts, seeds):
            ids = torch.tensor([render_chat(self.tokenizer, messages, enable_thinking)], device=self.device)
            with torch.random.fork_rng(devices=devices), torch.inference_mode():
                torch.manual_seed(s)
                res = self.lm.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=cfg)
            gen_ids = res.sequences[:, ids.shape[1]:].tolist()
            gens = []
            for i, seq in enumerate(gen_ids):
                stop = next((k + 1 for k, t in enumerate(seq) if t in self._eos), len(seq))
                seq = seq[:stop]
                sampled = tops = None
                if logprobs is not None:
                    sampled, tops = [], []
                    for k, tok in enumerate(seq):
                        lsm = torch.log_softmax(res.logits[k][i].float(), dim=-1)
                        sampled.append(float(lsm[tok]))
                        v, j = torch.topk(lsm, min(logprobs, lsm.shape[-1]))
                        tops.append(list(zip(j.tolist(), v.tolist())))
                gens.append(self._post.build(seq, sampled, tops))
            out.append(gens)
        return out


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
        kwargs = dict(
            model=self.model,
            tensor_parallel_size=self.tensor_parallel_size,
            enable_prefix_caching=self.enable_prefix_caching,
            gpu_memory_utilization=self.gpu_memory_utilization,
            dtype=self.dtype,
            trust_remote_code=self.trust_remote_code,
            max_logprobs=self.max_logprobs,
            seed=SEED,
        )
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
                    sampled, tops = [], []
                    for k, tok in enumerate(ids):
                        pos = comp.logprobs[k]  # {token_id: Logprob(logprob, rank, decoded_token)}: top-k + sampled
                        sampled.append(float(pos[tok].logprob))
                        best = sorted(pos.items(), key=lambda kv: (-kv[1].logprob, kv[0]))[:logprobs]
                        tops.append([(tid, float(lp.logprob)) for tid, lp in best])
                gens.append(self._post.build(ids, sampled, tops))
            out.append(gens)
        return out


def make_engine(kind: str, model: str, **kwargs: Any) -> Engine:
    """``kind`` = ``"transformers"`` or ``"vllm"``; keyword arguments go to the engine."""
    if kind == "transformers":
        return TransformersEngine(model, **kwargs)
    if kind == "vllm":
        return VLLMEngine(model, **kwargs)
    raise ValueError(f"unknown engine {kind!r}; expected 'transformers' or 'vllm'")
