"""Per-question scores of one release cell (§3.1-§3.2) and the small pieces the tables share.

:func:`cell_scores` is every signal of a cell, one row per question; :func:`s1_correct`,
:func:`rse_keep_score`, :func:`flip_rows` and :func:`defined_metric` are used by several parts
of the paper (the discrimination tables, the unanimous layer, Table 6).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from probeguard_core import SEED
from probeguard_core import metrics as M
from probeguard_core.baselines import signal_table
from probeguard_core.features import (
    converged,
    feature_table,
    is_correct,
    stratum,
)
from probeguard_core.scoring import (
    process_score,
    unanimous_layer_score,
)
from probeguard_core.tables.protocols import CellLike

__all__ = [
    "cell_scores", "defined_metric", "flip_rows", "rse_keep_score", "s1_correct",
]


def s1_correct(cell: CellLike) -> dict[str, bool]:
    """``{qid: correct}`` over the cell's unanimous layer S1 (Eq. 2 strata, :func:`features.stratum`)."""
    return {log.qid: is_correct(log) for log in cell.logs if stratum(log) == "S1"}


def rse_keep_score(sig: pd.DataFrame) -> NDArray[np.float64]:
    """``z(kappa) + z(RSE)`` standardized over the rows of ``sig`` in S1, NaN elsewhere
    (§3.2, :func:`scoring.unanimous_layer_score`; label-free)."""
    s1 = (sig["stratum"] == "S1").to_numpy()
    rk = np.full(len(sig), np.nan)
    if s1.any():
        rk[s1] = unanimous_layer_score(sig.loc[s1, "keep_rate"].to_numpy(), sig.loc[s1, "rse"].to_numpy())
    return rk


def flip_rows(flipped: NDArray[Any], correct: NDArray[np.bool_], level: float) -> list[dict[str, Any]]:
    """Flip rate of wrong and of correct consensus (Figure 3, Table 6): one record per quantity
    ``flip_wrong`` / ``flip_right`` with ``k`` flipped of ``n``, ``value = k / n`` and the Wilson
    interval ``ci_low, ci_high`` (:func:`metrics.wilson_interval`)."""
    rows = []
    for quantity, mask in (("flip_wrong", ~correct), ("flip_right", correct)):
        k, n = int(flipped[mask].sum()), int(mask.sum())
        lo, hi = M.wilson_interval(k, n, level)
        rows.append({"quantity": quantity, "k": k, "n": n, "value": k / n if n else math.nan, "ci_low": lo, "ci_high": hi})
    return rows


def cell_scores(cell: CellLike, seed: int = SEED, n_folds: int = 5) -> pd.DataFrame:
    """Every signal of one release cell, one row per question (index ``qid``).

    Columns: the snapshot signals of :func:`probeguard_core.baselines.signal_table` (Table 2),
    ``process_score`` (out-of-fold, §3.1 / Appendix L, :func:`scoring.process_score` on
    :func:`features.feature_table`), ``rse_keep`` (``z(kappa) + z(RSE)`` over the cell's
    unanimous layer, §3.2; NaN outside it), ``correct``, ``stratum``, ``t_stop``, ``converged``.
    """
    logs = cell.logs
    sig = signal_table(cell)
    X = feature_table(logs, nli=cell.nli)
    sig["process_score"] = process_score(X.loc[sig.index], sig["correct"].to_numpy(), n_splits=n_folds,
                                         seed=seed).to_numpy()
    sig["rse_keep"] = rse_keep_score(sig)
    sig["t_stop"] = [len(log.rounds) for log in logs]
    sig["converged"] = [converged(log) for log in logs]
    return sig


def defined_metric(fn: Any, scores: pd.Series, correct: pd.Series) -> tuple[float, int]:
    ok = scores.notna().to_numpy()
    n_def = int(ok.sum())
    if n_def < len(scores) or n_def == 0:
        # A signal missing for some questions would be evaluated on another population:
        # report it as not available rather than on a silently smaller set.
        return math.nan, n_def
    return float(fn(scores.to_numpy(), correct.to_numpy())), n_def
