"""``probeguard convert ma-rag``: MA-RAG's native log tree -> DESIGN 2.1 execution logs."""

from __future__ import annotations

import argparse
from pathlib import Path

from probeguard_core.adapters import convert_ma_rag_tree
from probeguard_core.cli import refuse_overwriting_inputs
from probeguard_core.logs import write_jsonl
from probeguard_core.questions import load_questions


def _ma_rag(args: argparse.Namespace) -> int:
    refuse_overwriting_inputs([args.questions], [args.out], folders=[args.tree])
    questions = load_questions(args.questions, dataset=args.dataset)
    logs = convert_ma_rag_tree(
        Path(args.tree),
        questions,
        dataset=args.dataset,
        backbone=args.backbone,
        n_candidates=args.n_candidates,
        max_rounds=args.max_rounds,
        progress=True,
    )
    out = write_jsonl(args.out, logs)  # atomic: nothing partial on error
    print(f"{out}: {len(logs)} questions converted (retrieval features are missing: MA-RAG logs no document ids)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("convert", help="convert foreign logs into DESIGN 2.1 execution logs")
    kinds = p.add_subparsers(dest="source", required=True, metavar="SOURCE")
    m = kinds.add_parser("ma-rag", help="MA-RAG tree question_<id>/round_<r>.jsonl (DESIGN 2.5)")
    m.add_argument("--tree", required=True, help="MA-RAG run folder (or its evaluations/ folder)")
    m.add_argument("--questions", required=True, help="MA-RAG dataset file or MIRAGE benchmark.json")
    m.add_argument("--dataset", required=True, help="dataset key written into each record, e.g. medqa")
    m.add_argument("--backbone", required=True, help="model id, e.g. Qwen/Qwen3-8B")
    m.add_argument("--n-candidates", type=int, default=8)
    m.add_argument("--max-rounds", type=int, default=8)
    m.add_argument("--out", required=True, help="output logs.jsonl or logs.jsonl.gz")
    m.set_defaults(handler=_ma_rag)
