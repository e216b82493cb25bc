"""Per-question scores of one release cell (§3.1-§3.2) and the small pieces the tables share.

:func:`cell_scores` is every signal of a cell, one row per question; :func:`s1_correct`,
:func:`rse_keep_score`, :func:`flip_rows` and :func:`defined_metric` are used by several parts
of the paper (the discrimination tables, the unanimous layer, Table 6).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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
)
from probeguard_core.probe import probe_table
from probeguard_core.scoring import (
    process_score,
    unanimous_layer_score,
)
from probeguard_core.tables.protocols import CellLike

__all__ = [
    "DERIVED_CODE", "cell_correct", "cell_features", "cell_probe_table", "cell_scores", "cell_signals",
    "defined_metric", "flip_rows", "per_cell", "rse_keep_score", "s1_correct",
]

#: The modules whose source defines the per-question tables (part of their cache key: editing any
#: of them invalidates every stored table).
DERIVED_CODE: tuple[str, ...] = (
    "probeguard_core.jsonl", "probeguard_core.structs", "probeguard_core.logs", "probeguard_core.features", "probeguard_core.rse",
    "probeguard_core.claims", "probeguard_core.baselines", "probeguard_core.probe", "probeguard_core.scoring",
    "probeguard_core.metrics", "probeguard_core.tables.scores", "probeguard_core.tables.appendices",
    "probeguard_core.tables.certification",
)


def per_cell(cell: CellLike | Sequence[CellLike], name: str, build: Any, kinds: tuple[str, ...], *,
             params: dict[str, Any] | None = None, registry: bool = False) -> pd.DataFrame:
    """``build()`` for ``cell`` (or for several cells together): once per content of their
    ``kinds`` files when each is a release cell (:mod:`probeguard_core.cache`, keyed by those
    files' sha256, each cell's role, ``params`` and :data:`DERIVED_CODE`), else (any other cell
    object, e.g. a subset of a cell's questions) computed directly.  The frame is the same either way."""
    from probeguard_core import cache

    cells = list(cell) if isinstance(cell, (list, tuple)) else [cell]
    if not cells or not all(_is_release_cell(c) for c in cells):
        return build()
    sources = {f"{i}:{k}": v for i, c in enumerate(cells) for k, v in c.sources(kinds, registry=registry).items()}
    return cache.cached_frame(name, sources, build, params={**(params or {}), "roles": [c.role for c in cells]},
                              code=DERIVED_CODE)


def _is_release_cell(cell: CellLike) -> bool:
    """Exactly a :class:`release.Cell`, whose tables are those of its files: not a wrapper that
    delegates attributes to one (a subset of its questions would be served the whole cell's table)."""
    from probeguard_core.release import Cell

    return type(cell) is Cell


#: The files behind :func:`cell_signals` (Table 2's snapshot signals, RSE and the keep rate).
SIGNAL_KINDS: tuple[str, ...] = ("logs", "self_report", "nli", "probe")


def cell_records(cell: CellLike) -> tuple[list[Any], list[Any] | None]:
    """``(logs, nli)`` of a cell to compute from (a release cell's are the strict readers'
    records: the derived structs of :mod:`probeguard_core.logs` when the fast read accepted the
    files, same values)."""
    return cell.logs, getattr(cell, "nli", None)


def cell_signals(cell: CellLike) -> pd.DataFrame:
    """:func:`baselines.signal_table` of a cell (one row per question: the snapshot signals,
    ``rse``, ``keep_rate``, ``correct``, ``stratum``), through :func:`per_cell`."""
    def build() -> pd.DataFrame:
        logs, nli = cell_records(cell)
        return signal_table(logs, getattr(cell, "self_report", None), nli, getattr(cell, "probe", None))

    return per_cell(cell, "signal_table", build, SIGNAL_KINDS)


def cell_features(cell: CellLike) -> pd.DataFrame:
    """The cell's feature table (Appendix B, :func:`features.feature_table` of its logs and NLI
    records): :meth:`release.Cell.features` for a release cell (once per content of its files),
    else computed from the cell's records."""
    return cell.features() if _is_release_cell(cell) else feature_table(cell.logs, nli=cell.nli)  # type: ignore[attr-defined]


def cell_correct(cell: CellLike, qids: Any) -> NDArray[np.bool_]:
    """Whether each question of ``qids`` was answered correctly (:func:`features.is_correct`, the
    ``correct`` column of :func:`cell_signals`), in that order."""
    return cell_signals(cell).loc[list(qids), "correct"].to_numpy(dtype=bool)


def cell_probe_table(cell: CellLike) -> pd.DataFrame:
    """:func:`probe.probe_table` of all the cell's probe records (rows ``(qid, arm)``), through
    :func:`per_cell`; an empty table when the cell has none."""
    return per_cell(cell, "probe_table", lambda: probe_table(cell.probe or []), ("probe",))


def s1_correct(cell: CellLike) -> dict[str, bool]:
    """``{qid: correct}`` over the cell's unanimous layer S1 (Eq. 2 strata, :func:`features.stratum`;
    correctness :func:`features.is_correct`), in log order (the ``stratum`` and ``correct``
    columns of :func:`cell_signals`)."""
    sig = cell_signals(cell)
    s1 = sig[(sig["stratum"] == "S1").to_numpy()]
    return dict(zip(s1.index.tolist(), s1["correct"].tolist()))


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
    Through :func:`per_cell` (a release cell computes it once per content of its files).
    """
    def build() -> pd.DataFrame:
        logs = cell_records(cell)[0]
        sig = cell_signals(cell)
        X = cell_features(cell)
        sig["process_score"] = process_score(X.loc[sig.index], sig["correct"].to_numpy(), n_splits=n_folds,
                                             seed=seed).to_numpy()
        sig["rse_keep"] = rse_keep_score(sig)
        sig["t_stop"] = [len(log.rounds) for log in logs]
        sig["converged"] = [converged(log) for log in logs]
        return sig

    return per_cell(cell, "cell_scores", build, SIGNAL_KINDS, params={"seed": seed, "n_folds": n_folds},
                    registry=True)


def defined_metric(fn: Any, scores: pd.Series, correct: pd.Series) -> tuple[float, int]:
    ok = scores.notna().to_numpy()
    n_def = int(ok.sum())
    if n_def < len(scores) or n_def == 0:
        # A signal missing for some questions would be evaluated on another population:
        # report it as not available rather than on a silently smaller set.
        return math.nan, n_def
    return float(fn(scores.to_numpy(), correct.to_numpy())), n_def
