"""Probe and self-report stages, batched across questions vs one question per engine call.

Issue 15: "Probe stage, batched vs per-question, on tiny models: the ratio and identical
records."  Both modes run in this one process on the same logs, engine and retriever; the
ratio is per-question time / batched time, and the records are compared byte for byte.

    PYTHONPATH=. python benchmarks/gpu_probe_batching.py [--engine transformers|vllm] [--questions 20]

With ``--engine transformers`` (CPU, tiny random Qwen3 built on the fly; what runs here) the
engine still generates prompt by prompt inside one call, so the ratio mostly measures call
overhead; with ``--engine vllm --model <name>`` (a GPU) one call schedules every request of a
pass together, which is where batching pays.  Logs come from the scripted substrate
(tests/tiny_models.py), so first-round-unanimous questions exist.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engine", choices=["transformers", "vllm"], default="transformers")
    ap.add_argument("--model", default=None, help="vLLM: model name or folder (default: the tiny random Qwen3)")
    ap.add_argument("--questions", type=int, default=20)
    ap.add_argument("--n", type=int, default=4, help="re-answers per arm (the scripted logs' N)")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import tiny_models as tm

    from probeguard_core.cli import main as cli
    from probeguard_core.logs import read_logs
    from probeguard_core.pipeline.batching_check import run_both
    from probeguard_core.pipeline.engines import make_engine
    from probeguard_core.pipeline.probe_run import ProbeConfig, probe_eligible
    from probeguard_core.pipeline.retrieval import BM25Index, Retriever
    from probeguard_core.pipeline.substrate import SubstrateConfig, run_substrate
    from probeguard_core.questions import load_questions

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = args.model or str(tm.build_tiny_qwen3(root / "qwen"))
        questions = load_questions(tm.write_questions(root / "q.json", args.questions), dataset="medqa")
        corpus = tm.write_corpus(root / "corpus.jsonl", 50)
        assert cli(["index", "build", "--corpus", str(corpus), "--out", str(root / "index")]) == 0
        retriever = Retriever(BM25Index.load(root / "index"), None)
        logs_path = root / "logs.jsonl"
        run_substrate(questions, tm.ScriptedEngine(), retriever, logs_path,
                      SubstrateConfig(dataset="medqa", backbone="scripted", n_candidates=args.n, max_rounds=3),
                      progress=False)
        logs = read_logs(logs_path)
        engine = make_engine(args.engine, model)
        cfg = ProbeConfig(max_new_tokens=args.max_new_tokens, query_max_new_tokens=args.max_new_tokens)
        res = run_both(logs, engine, retriever, root / "runs", cfg, batch_size=len(logs))
    per, bat = res["per_question"], res["batched"]
    print(f"engine {args.engine}; {len(logs)} questions, {len(probe_eligible(logs))} probed x 4 arms, N = {args.n}, "
          f"{args.max_new_tokens} new tokens")
    for stage in ("probe", "self_report"):
        ratio = per[f"{stage}_s"] / bat[f"{stage}_s"]
        same = per[stage] == bat[stage]
        print(f"{stage:12s} per-question {per[f'{stage}_s']:7.2f} s   batched {bat[f'{stage}_s']:7.2f} s   "
              f"ratio {ratio:5.2f}x   records identical: {same}")
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
