"""Batched vs per-question GPU stages on the same inputs (issue 15): timing and record identity.

Shared by ``benchmarks/gpu_probe_batching.py`` (prints the ratio) and
``tests/test_pipeline_batching.py`` (checks the records are byte-identical; never the time).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from probeguard_core.logs import QuestionLog

from .engines import Engine
from .probe_run import ProbeConfig, run_probe
from .retrieval import Retriever
from .self_report import run_self_report

__all__ = ["run_both"]


def run_both(logs: Sequence[QuestionLog], engine: Engine, retriever: Retriever, folder: str | Path,
             probe_config: ProbeConfig, *, batch_size: int = 64) -> dict[str, Any]:
    """Run the probe and self-report per question (``batch_size=1``) and batched, side by side.

    Returns wall seconds per mode and stage and the output bytes (``reproducible=True``, so the
    records carry no wall time and must be byte-identical).
    """
    folder = Path(folder)
    out: dict[str, Any] = {}
    for mode, bs in (("per_question", 1), ("batched", batch_size)):
        d = folder / mode
        t0 = time.perf_counter()
        p = run_probe(logs, engine, retriever, d / "probe.jsonl", probe_config, batch_size=bs, reproducible=True,
                      progress=False)
        t1 = time.perf_counter()
        s = run_self_report(logs, engine, d / "self_report.jsonl", max_new_tokens=probe_config.max_new_tokens,
                            batch_size=bs, progress=False)
        t2 = time.perf_counter()
        out[mode] = {"probe_s": t1 - t0, "self_report_s": t2 - t1, "probe": p.read_bytes(), "self_report": s.read_bytes()}
    return out
