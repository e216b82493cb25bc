"""The unanimous layer (§4.3, Figure 3), its probe controls (Table 6, Appendix G) and hard vs
soft semantic entropy inside it (§5.1).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core import SEED
from probeguard_core import metrics as M
from probeguard_core.rse import hard_se_score, hard_semantic_entropy, rationale_semantic_entropy
from probeguard_core.scoring import (
    zscore,
)
from probeguard_core.tables.display import empty_table
from probeguard_core.tables.protocols import CellLike, ReleaseLike
from probeguard_core.tables.scores import cell_probe_table, cell_signals, flip_rows, rse_keep_score, s1_correct
from probeguard_core.tables.signals import layer_discrimination

__all__ = [
    "CONTROL_ARMS", "HARD_SOFT_COLUMNS", "LAYER_TABLE_SIGNALS", "PageTables", "TABLE6_COLUMNS",
    "figure3_ranges", "flip_rates", "hard_soft_page", "hard_soft_scores", "hard_soft_table",
    "layer_scores", "probe_arm_table", "table6_page", "unanimous_layer_page",
    "unanimous_layer_table",
]


#: Signals reported inside the unanimous layer in §4.3, in the paper's order of mention.
LAYER_TABLE_SIGNALS: tuple[str, ...] = (
    "rse", "keep_rate", "rse_keep", "sequence_logprob", "p_true", "verbalized_confidence", "rse_keep_logprob",
)


#: The control arms of Table 6 (Appendix G), in the table's row order.
CONTROL_ARMS: tuple[str, ...] = ("instruction_only", "irrelevant_docs", "neutral_instruction")


def layer_scores(cell: CellLike) -> pd.DataFrame:
    """Per-question signals of one cell with the §4.3 combinations (one row per question).

    :func:`baselines.signal_table` (:func:`tables.scores.cell_signals`) plus ``rse_keep`` = z(kappa) + z(RSE) (§3.2,
    :func:`scoring.unanimous_layer_score`) and ``rse_keep_logprob`` = that + z(sequence
    log-prob) (§4.3, "adding it to the keep-and-entropy pair"), both standardized over the
    cell's unanimous layer S1 (label-free) and NaN outside it.
    """
    sig = cell_signals(cell)
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
        pt = cell_probe_table(cell)
        if arm not in set(pt.index.get_level_values("arm")):
            continue
        pt = pt.xs(arm, level="arm")
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
    pt = cell_probe_table(cell)
    if pt.empty:
        raise ValueError(f"{cell.label}: the release has no probe records for Table 6")
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


# --------------------------------------------------------------------------- page builders
#: Columns of :func:`probe_arm_table` (its empty stand-in) and of :func:`hard_soft_table`.
TABLE6_COLUMNS: tuple[str, ...] = ("backbone", "dataset", "stratum", "arm", "quantity", "value", "k", "n", "ci_low",
                                   "ci_high", "n_boot_omitted")
HARD_SOFT_COLUMNS: tuple[str, ...] = ("backbone", "dataset", "stratum", "n", "n_layer", "signal", "quantity", "value",
                                      "unit")


@dataclass
class PageTables:
    """What one page shows: its tables (CSV name -> table, each with its schema even when the
    release lacks its inputs), the choices it made, and notes on what the release lacks."""

    backbone: str
    datasets: list[str]
    cells: list[CellLike]
    tables: dict[str, pd.DataFrame]
    notes: list[str]
    missing: str | None = None


def _picked(rel: ReleaseLike, backbone: str | None, datasets: Sequence[str] | None,
            design: Sequence[str]) -> tuple[str, list[str]]:
    from probeguard_core.tables.picking import pick_backbone, pick_datasets

    backbone = pick_backbone(rel, backbone)
    return backbone, list(pick_datasets(rel, datasets, backbone, design=list(design)))


def unanimous_layer_page(rel: ReleaseLike, datasets: Sequence[str] | None = None,
                         backbone: str | None = None) -> PageTables:
    """§4.3 from any release: :func:`unanimous_layer_table` of the primary backbone's benchmarks
    beside the paper (``tables["unanimous_layer"]``; §4.3's numbers, and §1's "746" for the layer's
    size on MedQA), with a note on the artifacts it lacks.  With ``datasets`` None the table adds
    MedXpertQA when the release has it (§4.3's hard frontier); ``datasets`` stays Figure 3's design."""
    from probeguard_core.tables.beside import beside_sources
    from probeguard_core.tables.display import absent_text

    chosen = datasets
    backbone, datasets = _picked(rel, backbone, datasets, ["medqa", "mmlu_pro_med", "medmcqa"])
    cells = [rel.cell(d, backbone) for d in datasets]
    # MedXpertQA, §4.3's hard frontier ("79.0% of those unanimous votes are wrong"), joins the
    # layer table but stays outside Figure 3's design (the returned ``datasets``)
    if chosen is None and "medxpertqa" not in datasets and rel.has_cell("medxpertqa", backbone):
        cells.append(rel.cell("medxpertqa", backbone))
    why = absent_text(cells, {"probe": "the keep rate κ and z(κ)+z(RSE)", "nli": "RSE and z(κ)+z(RSE)",
                              "self_report": "P(True) and verbalized confidence"})
    # the layer's size on MedQA is printed in §1 ("100 of 746 such votes"), the rest in §4.3
    layer = beside_sources(unanimous_layer_table(cells), on=["backbone", "dataset", "quantity", "signal"],
                           sources=[{"source": "§4.3"}, {"source": "§1"}])
    return PageTables(backbone, datasets, cells, {"unanimous_layer": layer}, [why] if why else [])


def figure3_ranges(flips: pd.DataFrame, datasets: Sequence[str], backbone: str) -> pd.DataFrame:
    """§4.3's ranges over Figure 3's design: min / max flip rates of the primary backbone's cells
    and min / max keep-rate AUROC over all cells, beside the paper."""
    from probeguard_core.paper import beside_paper

    fig3 = flips[flips["dataset"].isin(datasets)]
    prim = fig3[fig3["backbone"] == backbone]
    rows = []
    for q in ("flip_wrong", "flip_right"):
        v = prim.loc[prim["quantity"] == q, "value"]
        rows += [{"backbone": backbone, "quantity": f"{q}_min", "value": v.min()},
                 {"backbone": backbone, "quantity": f"{q}_max", "value": v.max()}]
    ranges = beside_paper(pd.DataFrame(rows), on=["backbone", "quantity"], source="§4.3", arm="counter_evidence",
                          dataset=None)
    auc = fig3.drop_duplicates(["backbone", "dataset"])["keep_auroc"]
    auc_rng = beside_paper(pd.DataFrame({"quantity": ["auroc_min", "auroc_max"], "value": [auc.min(), auc.max()]}),
                           on=["quantity"], source="Figure 3", signal="keep_rate")
    return pd.concat([ranges, auc_rng.assign(backbone="")], ignore_index=True)


def table6_page(rel: ReleaseLike, dataset: str | None = None, backbone: str | None = None, n_boot: int = 2000,
                seed: int = SEED) -> PageTables:
    """Table 6 (Appendix G) from any release: flip rates per arm (``tables["table6"]``) and the
    paired bootstrap of the asymmetry (``tables["table6_asymmetry"]``), beside the paper; empty
    with their schema and a note without counter-evidence (or control-arm) probe records."""
    from probeguard_core.paper import beside_paper
    from probeguard_core.tables.display import empty_table
    from probeguard_core.tables.picking import pick_backbone, pick_dataset

    backbone = pick_backbone(rel, backbone)
    dataset = pick_dataset(rel, dataset, backbone)
    cell = rel.cell(dataset, backbone)
    notes = []
    cols = list(TABLE6_COLUMNS)
    if cell.probe_by_arm("counter_evidence"):
        t6, missing = probe_arm_table(cell, n_boot=n_boot, seed=seed), None
    else:
        t6 = empty_table(cols, numeric=cols[5:])
        missing = f"this release has no counter-evidence probe records for {cell.label}; Table 6 needs them (DESIGN 2.2)"
        notes.append(missing)
    arms_present = sorted({r.arm for r in (cell.probe or [])})
    if not missing and not set(CONTROL_ARMS) & set(arms_present):
        notes.append(f"this release has no control-arm probe records for {cell.label} (only {', '.join(arms_present)}); "
                     "Table 6's control rows and the paired bootstrap need them.")
    key = ["backbone", "dataset", "arm", "quantity"]
    flips = beside_paper(t6[t6["quantity"].str.startswith("flip")].reset_index(drop=True), on=key, source="Table 6")
    asym = beside_paper(t6[t6["quantity"].str.startswith("asymmetry")].reset_index(drop=True), on=key,
                        source="Appendix G")
    return PageTables(backbone, [dataset], [cell], {"table6": flips, "table6_asymmetry": asym}, notes, missing)


def hard_soft_page(rel: ReleaseLike, datasets: Sequence[str] | None = None, backbone: str | None = None,
                   threshold: float = 0.5) -> PageTables:
    """§5.1 from any release: :func:`hard_soft_table` of each primary benchmark with NLI records,
    beside the paper (``tables["hard_vs_soft"]``); a note for those without."""
    from probeguard_core.paper import beside_paper
    from probeguard_core.tables.display import absent_text, empty_table

    backbone, datasets = _picked(rel, backbone, datasets, ["medqa", "mmlu_pro_med"])
    why = absent_text([rel.cell(d, backbone) for d in datasets], {"nli": "§5.1, whose two scores both come from "
                                                                         "the NLI cache"})
    cells = [rel.cell(d, backbone) for d in datasets if rel.cell(d, backbone).has("nli")]
    cols = list(HARD_SOFT_COLUMNS)
    hs = (pd.concat([hard_soft_table(c, threshold) for c in cells], ignore_index=True) if cells
          else empty_table(cols, numeric=["n", "n_layer", "value"]))
    hs = beside_paper(hs, on=["backbone", "dataset", "quantity", "signal"], source="§5.1", stratum="S1")
    return PageTables(backbone, datasets, cells, {"hard_vs_soft": hs}, [why] if why else [])
