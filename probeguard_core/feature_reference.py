"""The feature table computed the slow, obvious way: a plain per-question loop over the per-log
functions of :mod:`probeguard_core.features` (DESIGN 4; paper Eqs. 2 and 7-11, Appendix B).

It exists as an independent cross-check of the vectorized :func:`probeguard_core.features.feature_table`
(the tests compare the two value for value) and as the baseline of
``benchmarks/feature_table_throughput.py``; nothing in the release pipeline or the book calls it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from probeguard_core.features import (
    FeatureSpec,
    _check_unique,
    _h_frac_nonincreasing,
    _nli_for,
    _retrieval_totals,
    answer_entropies,
    converged,
    doc_repeat_rates,
    js_divergences,
    load_registry,
    majority_flips,
    minority_persistence,
    minority_shares,
    n_minority_options,
    round_agreements,
)
from probeguard_core.logs import NLIRecord, QuestionLog

__all__ = ["feature_table_reference"]



def _ref_agg(values: Sequence[float], how: str) -> float:
    pts = [(t, v) for t, v in enumerate(values, start=1) if not math.isnan(v)]
    if not pts:
        return math.nan
    if how == "first":
        return pts[0][1]
    if how == "last":
        return pts[-1][1]
    if how == "mean":
        return sum(v for _, v in pts) / len(pts)
    if how == "max":
        return max(v for _, v in pts)
    if how == "slope":
        if len(pts) < 2:
            return math.nan
        tb = sum(t for t, _ in pts) / len(pts)
        yb = sum(v for _, v in pts) / len(pts)
        return sum((t - tb) * (v - yb) for t, v in pts) / sum((t - tb) ** 2 for t, _ in pts)
    raise ValueError(f"unknown aggregation {how!r}")


def _ref_row(log: QuestionLog, nli_rounds: Mapping[int, tuple[float, float]], specs: Sequence[FeatureSpec]) -> list[float]:
    T = len(log.rounds)
    docs_total, queries_total = _retrieval_totals(log)
    series_fns = {
        "agreement": lambda: round_agreements(log),
        "entropy": lambda: answer_entropies(log),
        "js": lambda: js_divergences(log),
        "minority_share": lambda: minority_shares(log),
        "rse": lambda: [nli_rounds.get(t, (math.nan, math.nan))[0] for t in range(1, T + 1)],
        "hard_se": lambda: [nli_rounds.get(t, (math.nan, math.nan))[1] for t in range(1, T + 1)],
        "doc_repeat": lambda: doc_repeat_rates(log),
        "docs": lambda: [math.nan if r.retrieval is None else float(len(set(r.retrieval.doc_ids))) for r in log.rounds],
        "queries": lambda: [math.nan if r.retrieval is None else float(len(r.retrieval.queries)) for r in log.rounds],
    }
    special = {
        "n_flip": lambda: float(majority_flips(log)),
        "t_stop": lambda: float(T),
        "converged": lambda: float(converged(log)),
        "H_frac_nonincreasing": lambda: _h_frac_nonincreasing(answer_entropies(log)),
        "minority_persistence": lambda: minority_persistence(log),
        "n_minority_options": lambda: float(n_minority_options(log)),
        "docs_total": lambda: docs_total,
        "queries_total": lambda: queries_total,
    }
    cache: dict[str, list[float]] = {}
    row = []
    for spec in specs:
        if spec.aggregation == "special":
            row.append(special[spec.name]())
        else:
            if spec.base not in cache:
                cache[spec.base] = series_fns[spec.base]()
            row.append(_ref_agg(cache[spec.base], spec.aggregation))
    return row


def feature_table_reference(
    logs: Sequence[QuestionLog],
    nli: Iterable[NLIRecord] | Mapping[tuple[str, int], NLIRecord] | None = None,
    registry: str | Path | Sequence[FeatureSpec] | None = None,
) -> pd.DataFrame:
    """:func:`feature_table` computed by a plain per-question loop over the per-log functions.

    Slower; exists as an independent cross-check (tests) and the benchmark's baseline.
    """
    specs = registry if isinstance(registry, (tuple, list)) else load_registry(registry)
    logs = list(logs)
    _check_unique(logs)
    nli_map = _nli_for(logs, nli)
    rows = [_ref_row(log, nli_map.get(log.qid, {}), specs) for log in logs]
    names = [s.name for s in specs]
    return pd.DataFrame(
        np.asarray(rows, dtype=float).reshape(len(rows), len(names)),
        index=pd.Index([log.qid for log in logs], name="qid", dtype=object),
        columns=names,
    )
