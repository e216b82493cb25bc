"""Generated tokens per second: vLLM engine vs transformers engine, same work, one GPU.

Nothing can be downloaded on the GPU machine, so the model is a RANDOMLY INITIALIZED Qwen3 of
realistic size (``--size 1.7b`` default, or ``8b``) with a byte-level BPE tokenizer trained
here on generated text and filled with added tokens to Qwen3's 151,936 entries (so the
embedding, LM head and top-20 log-prob work are full size), saved locally as safetensors.
Both engines then run the substrate's candidate call on
the same chat prompts: ``n`` samples per prompt, temperature 0.7, top-20 log-probs, the same
``max_new_tokens``, through :mod:`probeguard_core.pipeline.engines`.  Throughput counts the
tokens each engine actually generated (a random model may stop at EOS early).

Sized for < 10 minutes on one H200 with the defaults (1.7B: build ~1 min, transformers ~2-4
min, vLLM start-up ~1-2 min plus seconds of generation).  Without CUDA or vLLM it prints
"SKIPPED: <reason>" on stderr and exits 0 (so ``make bench`` still runs on CPU machines).

    python benchmarks/gpu_vllm_vs_transformers.py [--size 1.7b|8b] [--prompts 8] [--n 8] [--max-new-tokens 256]
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import sys
import tempfile
import time
from pathlib import Path

SIZES = {  # Qwen3 configurations (hidden, layers, heads, kv heads, head dim, MLP)
    "1.7b": dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=6144, tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8,
               head_dim=128, intermediate_size=12288, tie_word_embeddings=False),
    # smoke test of this script on CPU (with --transformers-only); not a benchmark
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=16, intermediate_size=128, tie_word_embeddings=True),
}
QWEN3_VOCAB = 151936
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}"
)
WORDS = ("patient fever cough pain chest heart lung liver kidney blood pressure dose drug therapy insulin "
         "diabetes infection antibiotic virus bacteria answer option choice correct therefore diagnosis "
         "treatment acute chronic syndrome renal cardiac anemia iron vitamin deficiency the of and is with").split()


def _skip(msg: str) -> None:
    """No GPU stack here: say so and exit 0 (a skip, so `make bench` still runs on CPU machines)."""
    print(f"gpu_vllm_vs_transformers: SKIPPED: {msg}", file=sys.stderr)
    sys.exit(0)


def build_model(folder: Path, size: str, device: str = "cuda") -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    rng = random.Random(0)
    text = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 30))) + "." for _ in range(5000)]
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    raw.train_from_iterator(text, trainers.BpeTrainer(vocab_size=8192, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    raw.add_tokens(["<think>", "</think>"])
    if size != "tiny":  # fill the vocabulary to Qwen3's size so embedding and LM head are full size
        raw.add_tokens([f"<|filler_{i}|>" for i in range(QWEN3_VOCAB - raw.get_vocab_size())])
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = CHAT_TEMPLATE
    vocab = len(tok)
    cfg = Qwen3Config(vocab_size=vocab, max_position_embeddings=4096, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, bos_token_id=None, dtype="bfloat16", **SIZES[size])
    t0 = time.perf_counter()
    with torch.device(device):
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    n_params = sum(p.numel() for p in model.parameters())
    del model
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    print(f"built random Qwen3-{size}: {n_params / 1e9:.2f}B parameters, vocab {vocab}, in {time.perf_counter() - t0:.0f}s")
    return folder


def prompts(k: int) -> list[list[dict[str, str]]]:
    from probeguard_core.pipeline.parsing import format_options
    from probeguard_core.pipeline.templates import render

    rng = random.Random(1)
    out = []
    for i in range(k):
        q = "A patient presents with " + " ".join(rng.choice(WORDS) for _ in range(60)) + f" (case {i}). What is the best next step?"
        opts = format_options({c: " ".join(rng.choice(WORDS) for _ in range(4)) for c in "ABCD"})
        out.append([{"role": "system", "content": render("system_answer")},
                    {"role": "user", "content": render("user_round1", question=q, options=opts)}])
    return out


def timed(engine, work, n: int, max_new_tokens: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    gens = engine.generate(work, n=n, temperature=0.7, max_new_tokens=max_new_tokens,
                           seed=list(range(len(work))), logprobs=20)
    wall = time.perf_counter() - t0
    return sum(g.n_tokens for per in gens for g in per), wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(SIZES), default="1.7b")
    ap.add_argument("--prompts", type=int, default=8, help="prompts (questions) in the shared work")
    ap.add_argument("--n", type=int, default=8, help="samples per prompt (N)")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--folder", default=None, help="where to write the random model (default: a temp folder)")
    ap.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    ap.add_argument("--transformers-only", action="store_true",
                    help="smoke test: build the model and time only the transformers engine (CPU allowed)")
    args = ap.parse_args()
    if args.transformers_only:
        import torch

        from probeguard_core.pipeline.engines import TransformersEngine

        device = "cuda" if torch.cuda.is_available() else "cpu"
        folder = Path(args.folder or tempfile.mkdtemp(prefix="pg-bench-"))
        build_model(folder, args.size, device)
        hf = TransformersEngine(str(folder), device=device)
        tokens, wall = timed(hf, prompts(args.prompts), args.n, args.max_new_tokens)
        print(f"transformers ({device}): {tokens} tokens in {wall:.1f}s = {tokens / wall:.1f} tok/s (no vLLM comparison)")
        return 0

    try:
        import torch
    except ImportError:
        _skip("torch is not installed")
    if not torch.cuda.is_available():
        _skip("no CUDA device: this benchmark needs a GPU (vLLM does not run on CPU here)")
    try:
        import vllm  # noqa: F401
    except ImportError:
        _skip("vllm is not installed: pip install 'probeguard_core[gpu]'")
    from probeguard_core.pipeline.engines import TransformersEngine, VLLMEngine

    folder = Path(args.folder or tempfile.mkdtemp(prefix="pg-bench-"))
    build_model(folder, args.size)
    work = prompts(args.prompts)

    hf = TransformersEngine(str(folder), device="cuda", dtype="bfloat16")
    timed(hf, work[:1], 1, 8)  # warm-up
    hf_tokens, hf_wall = timed(hf, work, args.n, args.max_new_tokens)
    del hf
    gc.collect()
    torch.cuda.empty_cache()

    t0 = time.perf_counter()
    vl = VLLMEngine(str(folder), dtype="bfloat16", max_model_len=4096, gpu_memory_utilization=0.85)
    start_s = time.perf_counter() - t0
    timed(vl, work[:1], 1, 8)  # warm-up
    vl_tokens, vl_wall = timed(vl, work, args.n, args.max_new_tokens)

    hf_tps, vl_tps = hf_tokens / hf_wall, vl_tokens / vl_wall
    res = {"size": args.size, "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
           "transformers_tokens": hf_tokens, "transformers_s": round(hf_wall, 2), "transformers_tok_per_s": round(hf_tps, 1),
           "vllm_tokens": vl_tokens, "vllm_s": round(vl_wall, 2), "vllm_tok_per_s": round(vl_tps, 1),
           "vllm_startup_s": round(start_s, 1), "ratio_vllm_over_transformers": round(vl_tps / hf_tps, 2),
           "gpu": torch.cuda.get_device_name(0)}
    print(f"transformers: {hf_tokens} tokens in {hf_wall:.1f}s = {hf_tps:.1f} tok/s")
    print(f"vLLM:         {vl_tokens} tokens in {vl_wall:.1f}s = {vl_tps:.1f} tok/s (start-up {start_s:.0f}s, not counted)")
    print(f"ratio vLLM / transformers: {vl_tps / hf_tps:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
