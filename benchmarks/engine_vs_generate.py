"""The transformers engine against one plain batched ``model.generate`` on the same rows (issue 26).

Same prompts x N samples, same max new tokens, temperature, top-20 log-probs:

* engine: ``TransformersEngine(batch_prompts=<prompts>)`` (pipeline/batched.py): one prefill per
  prompt, N continuations from the shared cache, one batched sampling step, top-20 log-probs
  and entropies per token, records built;
* plain ``generate``: one ``model.generate`` over the left-padded prompts with
  ``num_return_sequences=N``, ``do_sample``, ``top_k=0``, ``output_logits=True``, then the
  top-20 log-softmax of every step afterwards (no records built).

Also times the engine's batch-invariant default (each prompt decodes alone) for the record.
``--compile`` adds two columns: the batched engine over transformers' static cache
(``static_cache=True``) and with its decode step ``torch.compile``'d (``compile_decode=True``),
each timed on a second call after an untimed first one on the same rows (which compiles; its
time is printed apart), with its records compared with the batched engine's (rows with the same
text, the largest log-prob difference).  Tokens/s counts the generated tokens up to and
including each row's eos.  The LAST line is
``engine <tok/s> tok/s, generate <tok/s> tok/s, ratio <engine/generate>``.

    .venv/bin/python benchmarks/engine_vs_generate.py [--prompts 8] [--n 8] [--tokens 64] [--threads 1] [--compile]
    .venv/bin/python benchmarks/engine_vs_generate.py --model FOLDER --device cuda --dtype bfloat16 \\
        --prompts 16 --n 8 --tokens 128    # e.g. the random 1.7B of gpu_vllm_vs_transformers.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _prompts(k: int) -> list[list[dict[str, str]]]:
    from probeguard_core.pipeline.templates import render

    return [[{"role": "system", "content": render("system_answer")},
             {"role": "user", "content": render("user_round1", question=f"Which option is correct in case {i}? " * (1 + i % 3),
                                                options="A. one\nB. two\nC. three\nD. four")}] for i in range(k)]


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _plain_generate(eng, ids: list[list[int]], n: int, tokens: int, temperature: float, k: int, seed: int) -> int:
    """One batched ``model.generate`` + top-k log-softmax afterwards; the generated token count."""
    import torch
    from transformers import GenerationConfig

    L = max(len(x) for x in ids)
    x = torch.tensor([[eng._pad] * (L - len(t)) + t for t in ids], device=eng.device)
    mask = torch.tensor([[0] * (L - len(t)) + [1] * len(t) for t in ids], device=eng.device)
    cfg = GenerationConfig(do_sample=True, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=tokens,
                           num_return_sequences=n, eos_token_id=eng._eos, pad_token_id=eng._pad,
                           output_logits=True, return_dict_in_generate=True)
    with torch.inference_mode():
        torch.manual_seed(seed)
        res = eng.lm.generate(input_ids=x, attention_mask=mask, generation_config=cfg)
        lsm = torch.log_softmax(torch.stack(list(res.logits), dim=1).float(), dim=-1)
        seq = res.sequences[:, L:]
        lp = lsm.gather(-1, seq[..., None])[..., 0]
        v, j = torch.topk(lsm, k, dim=-1)
        lp, v, j = lp.cpu().numpy(), v.cpu().numpy(), j.cpu().numpy()  # on the host, as the engine's
    rows = seq.tolist()
    return sum(next((i + 1 for i, t in enumerate(r) if t in eng._eos), len(r)) for r in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="model folder (default: a tiny random Qwen3 built on the spot)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true",
                    help="also time the static-cache and the compiled decode (pipeline/batched.py)")
    ap.add_argument("--no-invariant", action="store_true",
                    help="skip the batch-invariant default's timing (slow on a GPU: each prompt alone)")
    a = ap.parse_args()
    from probeguard_core.pipeline.engines import TransformersEngine, render_chat

    model, what = a.model, a.model
    if model is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny_models import build_tiny_qwen3

        model = str(build_tiny_qwen3(Path(tempfile.mkdtemp()) / "qwen"))
        what = "tiny random Qwen3 (tests/tiny_models.py)"
    eng = TransformersEngine(model, device=a.device, dtype=a.dtype, num_threads=a.threads if a.device == "cpu" else None,
                             batch_prompts=a.prompts)
    prompts = _prompts(a.prompts)
    ids = [render_chat(eng.tokenizer, m, False) for m in prompts]
    seeds = list(range(1, a.prompts + 1))
    print(f"model: {what}; {a.device} {a.dtype}; {a.prompts} prompts x N={a.n}, {a.tokens} new tokens, "
          f"temperature {a.temperature}, top-20 log-probs")
    kw = {"n": a.n, "temperature": a.temperature, "max_new_tokens": a.tokens, "logprobs": 20}
    eng.generate_ids(ids[:1], [0], 1, a.temperature, 2, 20)  # warm-up, untimed
    _plain_generate(eng, ids[:1], 1, 2, a.temperature, 20, 0)
    _sync(a.device)
    t0 = time.perf_counter()
    gen_tokens = _plain_generate(eng, ids, a.n, a.tokens, a.temperature, 20, 42)
    _sync(a.device)
    t_gen = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = eng.generate_ids(ids, seeds, **kw)
    _sync(a.device)
    t_eng = time.perf_counter() - t0
    eng_tokens = sum(g.n_tokens for gs in out for g in gs)
    extra: list[tuple[str, float, str]] = []
    if a.compile:
        for label, opts in (("static-cache engine   ", {"static_cache": True}),
                            ("compiled engine       ", {"compile_decode": True})):
            e2 = TransformersEngine(model, device=a.device, dtype=a.dtype, batch_prompts=a.prompts,
                                    num_threads=a.threads if a.device == "cpu" else None, **opts)
            t0 = time.perf_counter()
            e2.generate_ids(ids, seeds, **kw)  # first call on these shapes: compiles (untimed in the rate)
            _sync(a.device)
            t_first = time.perf_counter() - t0
            t0 = time.perf_counter()
            got = e2.generate_ids(ids, seeds, **kw)
            _sync(a.device)
            t2 = time.perf_counter() - t0
            tokens = sum(g.n_tokens for gs in got for g in gs)
            pairs = [(x, y) for gx, gy in zip(got, out) for x, y in zip(gx, gy)]
            same = [(x, y) for x, y in pairs if x.text == y.text]
            diff = max((abs(u - v) for x, y in same for u, v in zip(x.token_logprobs, y.token_logprobs)), default=0.0)
            extra.append((label, tokens / t2, f"({tokens} tokens, {t2:.2f} s; first call {t_first:.2f} s; decode "
                                              f"{e2.decode}; {len(same)}/{len(pairs)} rows as the batched engine's, "
                                              f"max |d log-prob| {diff:.1e})"))
            del e2
    if not a.no_invariant:
        eng.batch_prompts = None  # the batch-invariant default, for the record
        t0 = time.perf_counter()
        inv = eng.generate_ids(ids, seeds, **kw)
        _sync(a.device)
        t_inv = time.perf_counter() - t0
        inv_tokens = sum(g.n_tokens for gs in inv for g in gs)
        print(f"batch-invariant engine: {inv_tokens / t_inv:9.1f} tok/s ({inv_tokens} tokens, {t_inv:.2f} s)")
    print(f"batched engine        : {eng_tokens / t_eng:9.1f} tok/s ({eng_tokens} tokens, {t_eng:.2f} s)")
    print(f"plain generate        : {gen_tokens / t_gen:9.1f} tok/s ({gen_tokens} tokens, {t_gen:.2f} s)")
    r_eng, r_gen = eng_tokens / t_eng, gen_tokens / t_gen
    for label, rate, detail in extra:
        print(f"{label}: {rate:9.1f} tok/s {detail}")
        print(f"{label.strip()}: ratio to generate {rate / r_gen:.2f}, to the batched engine {rate / r_eng:.2f}")
    print(f"engine {r_eng:.1f} tok/s, generate {r_gen:.1f} tok/s, ratio {r_eng / r_gen:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
