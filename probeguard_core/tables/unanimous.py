"""The unanimous layer (§4.3, Figure 3), its probe controls (Table 6, Appendix G) and hard vs
soft semantic entropy inside it (§5.1).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core import SEED
from probeguard_core import metrics as M
from probeguard_core.baselines import signal_table
from probeguard_core.probe import probe_table
from probeguard_core.rse import hard_se_score, hard_semantic_entropy, rationale_semantic_entropy
from probeguard_core.scoring import (
    zscore,
)
from probeguard_core.tables.discrimination import layer_discrimination
from probeguard_core.tables.display import empty_table
from probeguard_core.tables.protocols import CellLike
from probeguard_core.tables.scores import flip_rows, rse_keep_score, s1_correct

__all__ = [
    "CONTROL_ARMS", "LAYER_TABLE_SIGNALS", "flip_rates", "hard_soft_scores", "hard_soft_table",
    "layer_scores", "probe_arm_table", "unanimous_layer_table",
]


#: Signals reported inside the unanimous layer in §4.3, in the paper's order of mention.
LAYER_TABLE_SIGNALS: tuple[str, ...] = (
    "rse", "keep_rate", "rse_keep", "sequence_logprob", "p_true", "verbalized_confidence", "rse_keep_logprob",
)


#: The control arms of Table 6 (Appendix G), in the table's row order.
CONTROL_ARMS: tuple[str, ...] = ("instruction_only", "irrelevant_docs", "neutral_instruction")


def layer_scores(cell: CellLike) -> pd.DataFrame:
    """Per-question signals of one cell with the §4.3 combinations (one row per question).

    :func:`baselines.signal_table` plus ``rse_keep`` = z(kappa) + z(RSE) (§3.2,
    :func:`scoring.unanimous_layer_score`) and ``rse_keep_logprob`` = that + z(sequence
    log-prob) (§4.3, "adding it to the keep-and-entropy pair"), both standardized over the
    cell's unanimous layer S1 (label-free) and NaN outside it.
    """
    sig = signal_table(cell)
    s1 = (sig["stratum"] == "S1").to_numpy()
    rk = rse_keep_score(sig)
    rkl = np.full(len(sig), np.nan)
    if s1.any():
        rkl[s1] = rk[s1] + zscore(sig.loc[s1, "sequence_logprob"].to_numpy())
    sig["rse_keep"] = rk
    sig["rse_keep_logprob"] = rkl
    return sig


def unanimous_layer_table(cells: Iterable[CellLike], signals: Sequence[str] = LAYER_TABLE_SIGNALS) -> pd.DataFrame:
    """§4.3 per cell: the layer's share and error rate and the AUROC of each signal inside it.

    Long format with ``backbone, dataset, quantity, signal, stratum (S1), value, n,
    n_defined``: ``unanimous_share`` (S1 / all questions), ``unanimous_error`` (wrong share of
    S1), ``n_unanimous`` and ``auroc`` per signal (:func:`layer_discrimination`: a
    signal missing for part of the layer is NaN, the paper's dash, with ``n_defined``).
    """
    rows: list[dict[str, Any]] = []
    for cell in cells:
        sig = layer_scores(cell)
        s1 = sig[sig["stratum"] == "S1"]
        n, n1 = len(sig), len(s1)
        base = {"backbone": cell.backbone, "dataset": cell.dataset, "stratum": "S1"}
        rows.append({**base, "quantity": "unanimous_share", "signal": "", "value": n1 / n if n else math.nan,
                     "n": n, "n_defined": n, "unit": "fraction"})
        rows.append({**base, "quantity": "unanimous_error", "signal": "",
                     "value": float((~s1["correct"]).mean()) if n1 else math.nan, "n": n1, "n_defined": n1,
                     "unit": "fraction"})
        rows.append({**base, "quantity": "n_unanimous", "signal": "", "value": float(n1), "n": n1, "n_defined": n1,
                     "unit": "count"})
        ld = layer_discrimination(sig, signals=signals)
        for r in ld.itertuples(index=False):
            rows.append({**base, "quantity": "auroc", "signal": r.signal, "value": r.value, "n": r.n,
                         "n_defined": r.n_defined, "unit": "auroc"})
    cols = ["backbone", "dataset", "stratum", "quantity", "signal", "value", "n", "n_defined", "unit"]
    return pd.DataFrame(rows, columns=cols) if rows else empty_table(cols, numeric=["value", "n", "n_defined"])


def flip_rates(cells: Iterable[CellLike], arm: str = "counter_evidence", level: float = 0.95) -> pd.DataFrame:
    """Figure 3: flip rate of wrong and of correct unanimous consensus per cell, Wilson intervals.

    A consensus is flipped when the re-answers' unique plurality is not m* (Eq. 4 context,
    :func:`probe.is_flipped`).  One row per (cell, quantity in ``flip_wrong``, ``flip_right``):
    ``k`` flipped of ``n`` probed S1 questions, ``value = k / n``, ``ci_low``, ``ci_high``
    (:func:`metrics.wilson_interval`), plus the cell's keep-rate AUROC inside the layer
    (``keep_auroc``, Figure 3 caption).  Cells without probe records for ``arm`` are skipped.
    """
    rows: list[dict[str, Any]] = []
    for cell in cells:
        recs = cell.probe_by_arm(arm)
        if not recs:
            continue
        pt = probe_table(recs).xs(arm, level="arm")
        correct = s1_correct(cell)
        pt = pt[pt.index.isin(list(correct))]
        ok = np.array([correct[q] for q in pt.index], dtype=bool)
        keep_auc = M.auroc(pt["kappa"].to_numpy(), ok) if len(pt) else math.nan
        for r in flip_rows(pt["flipped"].to_numpy(), ok, level):
            rows.append({"backbone": cell.backbone, "dataset": cell.dataset, "arm": arm, "stratum": "S1", **r,
                         "keep_auroc": keep_auc})
    cols = ["backbone", "dataset", "arm", "stratum", "quantity", "k", "n", "value", "ci_low", "ci_high", "keep_auroc"]
    return pd.DataFrame(rows, columns=cols) if rows else empty_table(cols, numeric=cols[5:])


def _asymmetry_diff(flip_probe: np.ndarray, flip_ctrl: np.ndarray, wrong: np.ndarray) -> np.ndarray:
    """(flip_wrong - flip_right) of the probe minus that of the control (vectorized, last axis)."""
    wrong = wrong.astype(bool)

    def gap(f: np.ndarray) -> np.ndarray:
        f = f.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (f * wrong).sum(-1) / wrong.sum(-1) - (f * ~wrong).sum(-1) / (~wrong).sum(-1)

    return gap(flip_probe) - gap(flip_ctrl)


def probe_arm_table(cell: CellLike, probe_arm: str = "counter_evidence", controls: Sequence[str] = CONTROL_ARMS,
                    n_boot: int = 2000, seed: int = SEED, level: float = 0.95) -> pd.DataFrame:
    """Table 6 / Appendix G: flip rates per probe arm and the paired bootstrap of the asymmetry.

    For every arm present: ``flip_wrong`` and ``flip_right`` over the S1 questions it probed
    (with Wilson intervals).  For each control arm: the difference in asymmetry
    ``(flip_wrong - flip_right)[probe] - (flip_wrong - flip_right)[control]`` over the questions
    probed by both arms, with a paired percentile bootstrap interval
    (:func:`metrics.paired_bootstrap`, resampling questions, ``n_boot`` replicates, ``seed``):
    quantities ``asymmetry_diff``, ``asymmetry_diff_ci_low``, ``asymmetry_diff_ci_high``
    (row ``arm`` = the control arm).  Replicates with no wrong or no correct question are
    omitted (counted in ``n_boot_omitted``).
    """
    if not cell.probe:
        raise ValueError(f"{cell.label}: the release has no probe records for Table 6")
    pt = probe_table(cell.probe)
    correct = s1_correct(cell)
    arms = [a for a in (probe_arm, *controls) if a in set(pt.index.get_level_values("arm"))]
    if probe_arm not in arms:
        raise ValueError(f"{cell.label}: no probe records for arm {probe_arm!r}")
    base = {"backbone": cell.backbone, "dataset": cell.dataset, "stratum": "S1"}
    rows: list[dict[str, Any]] = []
    flips: dict[str, pd.Series] = {}
    for arm in arms:
        t = pt.xs(arm, level="arm")
        t = t[t.index.isin(list(correct))]
        flips[arm] = t["flipped"]
        ok = np.array([correct[q] for q in t.index], dtype=bool)
        for r in flip_rows(t["flipped"].to_numpy(), ok, level):
            rows.append({**base, "arm": arm, "quantity": r["quantity"], "value": r["value"], "k": r["k"], "n": r["n"],
                         "ci_low": r["ci_low"], "ci_high": r["ci_high"], "n_boot_omitted": np.nan})
    for arm in arms[1:]:
        common = sorted(set(flips[probe_arm].index) & set(flips[arm].index))
        fp = flips[probe_arm].loc[common].to_numpy(dtype=float)
        fc = flips[arm].loc[common].to_numpy(dtype=float)
        wrong = ~np.array([correct[q] for q in common], dtype=bool)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est, lo, hi = M.paired_bootstrap(_asymmetry_diff, fp, fc, wrong, n_boot=n_boot, seed=seed,
                                             level=level, vectorized=True, nan_policy="omit")
        omitted = sum(int(str(w.message).split(" of ")[0]) for w in caught
                      if issubclass(w.category, RuntimeWarning) and "bootstrap replicates" in str(w.message))
        for quantity, v in (("asymmetry_diff", est), ("asymmetry_diff_ci_low", lo), ("asymmetry_diff_ci_high", hi)):
            rows.append({**base, "arm": arm, "quantity": quantity, "value": v, "k": np.nan, "n": len(common),
                         "ci_low": np.nan, "ci_high": np.nan, "n_boot_omitted": omitted})
    return pd.DataFrame(rows)


def hard_soft_scores(cell: CellLike, threshold: float = 0.5) -> pd.DataFrame:
    """Per unanimous-layer question with a round-1 NLI record (§5.1): ``rse`` (Eq. 3,
    :func:`rse.rationale_semantic_entropy`), ``hard_se`` (:func:`rse.hard_se_score`, the negated
    hard-clustering entropy, higher = more confident), ``hard_entropy`` (the entropy itself),
    ``n_claims`` (matrix size), ``saturated`` (hard entropy = ln n: every claim its own
    cluster) and ``correct``; index ``qid`` (sorted)."""
    if not cell.nli:
        raise ValueError(f"{cell.label}: the release has no NLI records (needed for RSE)")
    s1 = s1_correct(cell)
    recs = sorted((r for r in cell.nli if r.round == 1 and r.qid in s1), key=lambda r: r.qid)
    hse = np.array([hard_semantic_entropy(r.entailment, threshold) for r in recs], dtype=float)
    sizes = np.array([len(r.entailment) for r in recs], dtype=int)
    with np.errstate(invalid="ignore", divide="ignore"):
        sat = np.isclose(hse, np.log(np.maximum(sizes, 1)))
    df = pd.DataFrame({
        "rse": [rationale_semantic_entropy(r.entailment) for r in recs],
        "hard_se": [hard_se_score(r.entailment, threshold) for r in recs],
        "hard_entropy": hse, "n_claims": sizes, "saturated": sat,
        "correct": [s1[r.qid] for r in recs],
    }, index=pd.Index([r.qid for r in recs], name="qid", dtype=object))
    df.attrs["n_layer"] = len(s1)
    return df


def hard_soft_table(cell: CellLike, threshold: float = 0.5) -> pd.DataFrame:
    """§5.1: hard-clustering semantic entropy vs continuous RSE (Eq. 3) inside the unanimous layer.

    From :func:`hard_soft_scores`: AUROC of each score (NaN when a score is undefined for part
    of the layer), the number of distinct values each takes (hard clustering ties), and the
    share of the layer at which hard SE saturates at ln n.  Long format ``backbone, dataset,
    stratum, n, n_layer, signal (hard_se | rse), quantity (auroc | n_distinct |
    saturated_share), value``.
    """
    sc = hard_soft_scores(cell, threshold)
    ok = sc["correct"].to_numpy(bool)
    base = {"backbone": cell.backbone, "dataset": cell.dataset, "stratum": "S1", "n": len(sc),
            "n_layer": sc.attrs["n_layer"]}
    rows = []
    for signal in ("hard_se", "rse"):
        x = sc[signal].to_numpy(float)
        defined = ~np.isnan(x)
        auc = M.auroc(x, ok) if len(x) and defined.all() else math.nan
        rows.append({**base, "signal": signal, "quantity": "auroc", "value": auc, "unit": "auroc"})
        rows.append({**base, "signal": signal, "quantity": "n_distinct", "value": float(len(np.unique(x[defined]))),
                     "unit": "count"})
    rows.append({**base, "signal": "hard_se", "quantity": "saturated_share",
                 "value": float(sc["saturated"].mean()) if len(sc) else math.nan, "unit": "fraction"})
    return pd.DataFrame(rows)
