"""Table builders for the second half of the book's notebooks (§4.3, §5.1, Appendices C, G-K,
and the what-if chapter).

Like :mod:`probeguard_core.analysis`, every function here only arranges calls to the core
(``baselines``, ``probe``, ``rse``, ``claims``, ``scoring``, ``metrics``, ``certify``) into the
long tables the notebooks display and write; nothing is computed that the core already
defines.  The paper reference is on each function.  Long tables use the key columns of
``data/paper/reported.csv`` (``backbone, dataset, quantity, signal, arm, ...``) so that
:func:`probeguard_core.paper.beside_paper` can put the paper's value beside ours.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core import SEED
from probeguard_core import certify as C
from probeguard_core import metrics as M
from probeguard_core.analysis import certification_inputs, empty_table, figure1_cases, layer_discrimination
from probeguard_core.baselines import signal_table
from probeguard_core.claims import CUES, MAX_CLAIMS, TAIL, extract_claims, split_sentences, strip_answer_tags
from probeguard_core.features import feature_table, is_correct, stratum
from probeguard_core.paper import beside_paper
from probeguard_core.probe import probe_table
from probeguard_core.rse import hard_se_score, hard_semantic_entropy, rationale_semantic_entropy
from probeguard_core.scoring import drop_family_ablation, process_score, unanimous_layer_score, zscore

__all__ = [
    "CONTROL_ARMS",
    "LAYER_TABLE_SIGNALS",
    "ablation_table",
    "beside_sources",
    "case_details",
    "claim_examples",
    "claim_rule_summary",
    "cost_table",
    "explain_claims",
    "flip_rates",
    "hard_soft_scores",
    "hard_soft_table",
    "layer_scores",
    "probe_arm_table",
    "specialty_breakdown",
    "release_layer_certificate",
    "unanimous_layer_table",
    "whatif_coverage",
]

#: Signals reported inside the unanimous layer in §4.3, in the paper's order of mention.
LAYER_TABLE_SIGNALS: tuple[str, ...] = (
    "rse", "keep_rate", "rse_keep", "sequence_logprob", "p_true", "verbalized_confidence", "rse_keep_logprob",
)
#: The control arms of Table 6 (Appendix G), in the table's row order.
CONTROL_ARMS: tuple[str, ...] = ("instruction_only", "irrelevant_docs", "neutral_instruction")


# --------------------------------------------------------------------------- beside the paper
def beside_sources(ours: pd.DataFrame, on: Sequence[str], sources: Sequence[Mapping[str, Any]],
                   value_col: str = "value") -> pd.DataFrame:
    """:func:`paper.beside_paper` over several filter sets, first match wins.

    The paper prints some numbers in one place only (e.g. Qwen3-8B's MedQA flip rates in
    Table 6, HuatuoGPT-o1-8B's in §4.3).  Each element of ``sources`` is a filter mapping for
    ``beside_paper``; a row of ``ours`` takes the paper value of the first filter set that
    matches it.  Adds ``paper``, ``diff``, ``unit`` and ``paper_source`` (the matching
    ``source``; '' when none matches).
    """
    out = ours.copy()
    paper = pd.Series(np.nan, index=ours.index)
    where = pd.Series("", index=ours.index, dtype=object)
    unit = pd.Series("", index=ours.index, dtype=object)
    for filters in sources:
        b = beside_paper(ours, on=on, value_col=value_col, **dict(filters))
        hit = paper.isna() & b["paper"].notna()
        paper[hit] = b.loc[hit, "paper"]
        where[hit] = str(filters.get("source", ""))
        unit[unit == ""] = b.loc[unit == "", "unit"]
    out["paper"] = paper.astype(float)
    out["diff"] = out[value_col].astype(float) - out["paper"]
    if "unit" not in ours.columns:
        out["unit"] = unit
    out["paper_source"] = where
    return out


# --------------------------------------------------------------------------- §4.3 unanimous layer
def layer_scores(cell: Any) -> pd.DataFrame:
    """Per-question signals of one cell with the §4.3 combinations (one row per question).

    :func:`baselines.signal_table` plus ``rse_keep`` = z(kappa) + z(RSE) (§3.2,
    :func:`scoring.unanimous_layer_score`) and ``rse_keep_logprob`` = that + z(sequence
    log-prob) (§4.3, "adding it to the keep-and-entropy pair"), both standardized over the
    cell's unanimous layer S1 (label-free) and NaN outside it.
    """
    sig = signal_table(cell)
    s1 = (sig["stratum"] == "S1").to_numpy()
    rk = np.full(len(sig), np.nan)
    rkl = np.full(len(sig), np.nan)
    if s1.any():
        part = sig.loc[s1]
        rk[s1] = unanimous_layer_score(part["keep_rate"].to_numpy(), part["rse"].to_numpy())
        rkl[s1] = rk[s1] + zscore(part["sequence_logprob"].to_numpy())
    sig["rse_keep"] = rk
    sig["rse_keep_logprob"] = rkl
    return sig


def unanimous_layer_table(cells: Iterable[Any], signals: Sequence[str] = LAYER_TABLE_SIGNALS) -> pd.DataFrame:
    """§4.3 per cell: the layer's share and error rate and the AUROC of each signal inside it.

    Long format with ``backbone, dataset, quantity, signal, stratum (S1), value, n,
    n_defined``: ``unanimous_share`` (S1 / all questions), ``unanimous_error`` (wrong share of
    S1), ``n_unanimous`` and ``auroc`` per signal (:func:`analysis.layer_discrimination`: a
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


def flip_rates(cells: Iterable[Any], arm: str = "counter_evidence", level: float = 0.95) -> pd.DataFrame:
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
        correct = {log.qid: is_correct(log) for log in cell.logs if stratum(log) == "S1"}
        pt = pt[pt.index.isin(list(correct))]
        ok = np.array([correct[q] for q in pt.index], dtype=bool)
        keep_auc = M.auroc(pt["kappa"].to_numpy(), ok) if len(pt) else math.nan
        for quantity, mask in (("flip_wrong", ~ok), ("flip_right", ok)):
            k, n = int(pt["flipped"].to_numpy()[mask].sum()), int(mask.sum())
            lo, hi = M.wilson_interval(k, n, level)
            rows.append({"backbone": cell.backbone, "dataset": cell.dataset, "arm": arm, "stratum": "S1",
                         "quantity": quantity, "k": k, "n": n, "value": k / n if n else math.nan,
                         "ci_low": lo, "ci_high": hi, "keep_auroc": keep_auc})
    cols = ["backbone", "dataset", "arm", "stratum", "quantity", "k", "n", "value", "ci_low", "ci_high", "keep_auroc"]
    return pd.DataFrame(rows, columns=cols) if rows else empty_table(cols, numeric=cols[5:])


# --------------------------------------------------------------------------- Table 6 (Appendix G)
def _asymmetry_diff(flip_probe: np.ndarray, flip_ctrl: np.ndarray, wrong: np.ndarray) -> np.ndarray:
    """(flip_wrong - flip_right) of the probe minus that of the control (vectorized, last axis)."""
    wrong = wrong.astype(bool)

    def gap(f: np.ndarray) -> np.ndarray:
        f = f.astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (f * wrong).sum(-1) / wrong.sum(-1) - (f * ~wrong).sum(-1) / (~wrong).sum(-1)

    return gap(flip_probe) - gap(flip_ctrl)


def probe_arm_table(cell: Any, probe_arm: str = "counter_evidence", controls: Sequence[str] = CONTROL_ARMS,
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
    correct = {log.qid: is_correct(log) for log in cell.logs if stratum(log) == "S1"}
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
        for quantity, mask in (("flip_wrong", ~ok), ("flip_right", ok)):
            k, n = int(t["flipped"].to_numpy()[mask].sum()), int(mask.sum())
            lo, hi = M.wilson_interval(k, n, level)
            rows.append({**base, "arm": arm, "quantity": quantity, "value": k / n if n else math.nan,
                         "k": k, "n": n, "ci_low": lo, "ci_high": hi, "n_boot_omitted": np.nan})
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


# --------------------------------------------------------------------------- Table 7 (Appendix H)
def ablation_table(cell: Any, n_folds: int = 5, seed: int = SEED, gbt: bool = True) -> pd.DataFrame:
    """Table 7: AUROC of the out-of-fold process score with each feature family dropped, and
    the GBT swap (Appendix H; :func:`scoring.drop_family_ablation`, :func:`scoring.process_score`).

    Long format: ``backbone, dataset, signal (process_score), quantity (auroc), variant (``full``,
    ``without <family>``, ``gbt``), arm ('' for the
    l2 logistic regression, ``gbt_classifier`` for the swap), dropped_family ('' = full score),
    n_features, value``.
    """
    from threadpoolctl import threadpool_limits

    logs = cell.logs
    X = feature_table(logs, nli=cell.nli)
    y = np.array([is_correct(log) for log in logs], dtype=bool)
    # Many small fits: BLAS / OpenMP thread pools only add contention here (one thread is
    # ~20x faster on a shared 2-core machine); results do not depend on the thread count.
    with threadpool_limits(limits=1):
        ab = drop_family_ablation(X, y, n_splits=n_folds, seed=seed)
        p = process_score(X, y, model="gbt", n_splits=n_folds, seed=seed) if gbt else None
    base = {"backbone": cell.backbone, "dataset": cell.dataset, "signal": "process_score", "quantity": "auroc"}
    rows = [{**base, "variant": "full" if fam == "none" else f"without {fam}", "arm": "",
             "dropped_family": "" if fam == "none" else fam,
             "n_features": int(r.n_features), "value": float(r.auroc)} for fam, r in ab.iterrows()]
    if p is not None:
        rows.append({**base, "variant": "gbt", "arm": "gbt_classifier", "dropped_family": "", "n_features": X.shape[1],
                     "value": M.auroc(p.to_numpy(), y)})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- §5.1 hard vs soft
def hard_soft_scores(cell: Any, threshold: float = 0.5) -> pd.DataFrame:
    """Per unanimous-layer question with a round-1 NLI record (§5.1): ``rse`` (Eq. 3,
    :func:`rse.rationale_semantic_entropy`), ``hard_se`` (:func:`rse.hard_se_score`, the negated
    hard-clustering entropy, higher = more confident), ``hard_entropy`` (the entropy itself),
    ``n_claims`` (matrix size), ``saturated`` (hard entropy = ln n: every claim its own
    cluster) and ``correct``; index ``qid`` (sorted)."""
    if not cell.nli:
        raise ValueError(f"{cell.label}: the release has no NLI records (needed for RSE)")
    s1 = {log.qid: is_correct(log) for log in cell.logs if stratum(log) == "S1"}
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


def hard_soft_table(cell: Any, threshold: float = 0.5) -> pd.DataFrame:
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


# --------------------------------------------------------------------------- Table 8 (Appendix I)
def specialty_breakdown(cell: Any, alpha: float = 0.15, n_splits: int = 50, seed: int = SEED,
                        min_unanimous: int = 25, delta: float = 0.05) -> pd.DataFrame:
    """Table 8: how the layer-level certified rule distributes over specialties (Appendix I).

    Scores and strata are :func:`analysis.certification_inputs` (S1: z(kappa) + z(RSE), S2:
    a-bar).  Split ``j`` is the documented split of :func:`certify.repeated_splits`
    (``default_rng(seed + j).permutation(n)``, first ``n // 2`` = calibration); the rule is
    :func:`certify.stratified_certify` on the calibration half, deployed on the test half
    (:meth:`certify.Certificate.decide`).  Per specialty among the test half's S1 questions:
    coverage = answered / present, realized risk = errors / answered (a split answering none of
    a specialty has no realized risk); mean over splits.  Rows: one per specialty with
    ``n_unanimous >= min_unanimous`` (others omitted, as in the paper), then ``specialty =
    "(omitted)"`` pooling the omitted ones and ``"(whole layer)"``.  Columns ``specialty,
    n_unanimous, unanimous_error, certified_coverage, coverage_sd, realized_risk, n_risk_splits,
    violations`` (splits whose realized risk in that specialty exceeds alpha), ``shown``.
    """
    df = certification_inputs([cell])
    spec = pd.Series({log.qid: log.specialty for log in cell.logs})
    df["specialty"] = spec.reindex(df.index).to_numpy()
    s, e, st = df["score"].to_numpy(float), df["error"].to_numpy(bool), df["stratum"].to_numpy(str)
    layer = df["stratum"].to_numpy() == "S1"
    lab = df["specialty"].where(df["specialty"].notna(), None).to_numpy(dtype=object)
    counts = pd.Series([x for x, m in zip(lab, layer) if m and x is not None]).value_counts()
    shown = sorted((k for k, c in counts.items() if c >= min_unanimous), key=lambda k: (-counts[k], k))
    omitted = sorted(k for k, c in counts.items() if c < min_unanimous)
    groups: dict[str, np.ndarray] = {k: layer & (lab == k) for k in shown}
    if omitted:
        groups["(omitted)"] = layer & np.isin(lab, omitted)
    groups["(whole layer)"] = layer
    n = len(df)
    cov = {g: [] for g in groups}
    risk = {g: [] for g in groups}
    for j in range(n_splits):
        perm = np.random.default_rng(seed + j).permutation(n)
        cal = np.zeros(n, dtype=bool)
        cal[perm[: n // 2]] = True
        cert = C.stratified_certify(s[cal], e[cal], st[cal], alpha, delta=delta)
        test = ~cal
        ans = np.zeros(n, dtype=bool)
        ans[test] = cert.decide(s[test], st[test])
        for g, m in groups.items():
            present = m & test
            k = int(present.sum())
            a = int((ans & present).sum())
            cov[g].append(a / k if k else math.nan)
            risk[g].append(int((ans & present & e).sum()) / a if a else math.nan)
    rows = []
    for g, m in groups.items():
        c, r = np.array(cov[g], dtype=float), np.array(risk[g], dtype=float)
        rows.append({
            "specialty": g, "n_unanimous": int(m.sum()),
            "unanimous_error": float(e[m].mean()) if m.any() else math.nan,
            "certified_coverage": float(np.nanmean(c)) if (~np.isnan(c)).any() else math.nan,
            "coverage_sd": float(np.nanstd(c, ddof=1)) if (~np.isnan(c)).sum() > 1 else math.nan,
            "realized_risk": float(np.nanmean(r)) if (~np.isnan(r)).any() else math.nan,
            "n_risk_splits": int((~np.isnan(r)).sum()),
            "violations": int((r > alpha).sum()),
            "shown": g in shown or g == "(whole layer)",
        })
    out = pd.DataFrame(rows)
    out.insert(0, "backbone", cell.backbone)
    out.insert(1, "dataset", cell.dataset)
    out.insert(2, "alpha", float(alpha))
    out.attrs["omitted"] = omitted
    return out


# --------------------------------------------------------------------------- Appendix J
def cost_table(cells: Iterable[Any], arm: str = "counter_evidence") -> pd.DataFrame:
    """Appendix J: median cost per question of the substrate and of the probe, per cell.

    From the release's ``cost`` fields (DESIGN 2.1 / 2.2): medians of ``wall_s`` and
    ``completion_tokens`` over the substrate logs, and over the ``arm`` probe records (the
    probe fires on S1 only).  ``probe_share_wall`` = total probe wall time / (probe + substrate
    wall time) over the probed questions (the probe's share of a unanimous question's cost);
    ``probe_to_substrate_ratio`` = ratio of the two medians.  Long format ``backbone, dataset,
    quantity, stratum, value, n`` (``n`` = records with a cost; records without one are counted
    in ``n_missing``, never imputed).
    """
    rows: list[dict[str, Any]] = []
    for cell in cells:
        logs = cell.logs
        sub = {log.qid: log.cost for log in logs}
        sub_ok = [c for c in sub.values() if c is not None]
        recs = cell.probe_by_arm(arm)
        pr = {r.qid: r.cost for r in recs}
        pr_ok = [c for c in pr.values() if c is not None]
        base = {"backbone": cell.backbone, "dataset": cell.dataset}

        def add(quantity: str, value: float, n: int, n_missing: int, stratum_: str = "") -> None:
            unit = ("seconds" if "wall_s" in quantity else "tokens" if "tokens" in quantity
                    else "ratio" if quantity.endswith("ratio") else "fraction")
            rows.append({**base, "quantity": quantity, "stratum": stratum_, "value": value, "n": n,
                         "n_missing": n_missing, "unit": unit})

        med = lambda xs: float(np.median(xs)) if len(xs) else math.nan  # noqa: E731
        add("substrate_wall_s", med([c.wall_s for c in sub_ok]), len(sub_ok), len(sub) - len(sub_ok))
        add("substrate_completion_tokens_median", med([c.completion_tokens for c in sub_ok]), len(sub_ok),
            len(sub) - len(sub_ok))
        add("probe_wall_s_median", med([c.wall_s for c in pr_ok]), len(pr_ok), len(pr) - len(pr_ok), "S1")
        add("probe_completion_tokens_median", med([c.completion_tokens for c in pr_ok]), len(pr_ok),
            len(pr) - len(pr_ok), "S1")
        both = [q for q in sorted(pr) if pr[q] is not None and sub.get(q) is not None]
        pw = sum(pr[q].wall_s for q in both)
        sw = sum(sub[q].wall_s for q in both)
        add("probe_share_wall", pw / (pw + sw) if (pw + sw) > 0 else math.nan, len(both), len(pr) - len(both), "S1")
        add("probe_to_substrate_ratio", med([c.wall_s for c in pr_ok]) / med([c.wall_s for c in sub_ok])
            if sub_ok and pr_ok else math.nan, len(pr_ok), 0, "S1")
        n1 = sum(stratum(log) == "S1" for log in logs)
        add("unanimous_share", n1 / len(logs) if logs else math.nan, len(logs), 0, "S1")
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- Appendix K
def case_details(cell: Any, arm: str = "counter_evidence") -> dict[str, pd.DataFrame]:
    """Appendix K: the two cases of Figure 1 (:func:`analysis.figure1_cases`) with everything
    logged about them.

    Returns ``{"cases", "options", "panel", "probe", "queries"}``: the case summary; the options
    (gold and consensus marked); the 8 first-round candidates (answer, each rationale's
    extracted claims, :func:`claims.extract_claims`); the re-answers under ``arm`` (answer,
    kept); the counter-queries and retrieved document ids.
    """
    cases = figure1_cases(cell, arm=arm)
    logs = {log.qid: log for log in cell.logs}
    probe = {r.qid: r for r in cell.probe_by_arm(arm)}
    opts, panel, pr, qs = [], [], [], []
    for c in cases.itertuples(index=False):
        log, rec = logs[c.qid], probe[c.qid]
        for key in sorted(log.options):
            opts.append({"case": c.case, "qid": c.qid, "option": key, "text": log.options[key],
                         "gold": key == log.gold, "consensus": key == rec.consensus})
        for i, cand in enumerate(log.rounds[0].candidates):
            panel.append({"case": c.case, "qid": c.qid, "candidate": i + 1, "answer": cand.answer,
                          "claims": " | ".join(extract_claims(cand.rationale))})
        for i, ra in enumerate(rec.reanswers):
            pr.append({"case": c.case, "qid": c.qid, "reanswer": i + 1, "answer": ra.answer,
                       "kept": ra.answer == rec.consensus, "claims": " | ".join(extract_claims(ra.rationale))})
        for i, q in enumerate(rec.queries):
            qs.append({"case": c.case, "qid": c.qid, "kind": "counter-query", "index": i + 1, "text": q})
        for i, d in enumerate(rec.doc_ids):
            qs.append({"case": c.case, "qid": c.qid, "kind": "document", "index": i + 1, "text": d})
    cases = cases.assign(options=[len(logs[q].options) for q in cases["qid"]],
                         n_queries=[len(probe[q].queries) for q in cases["qid"]],
                         n_docs=[len(probe[q].doc_ids) for q in cases["qid"]],
                         reanswer_plurality_is_gold=[_plurality(probe[q]) == logs[q].gold for q in cases["qid"]])
    return {"cases": cases, "options": pd.DataFrame(opts), "panel": pd.DataFrame(panel),
            "probe": pd.DataFrame(pr), "queries": pd.DataFrame(qs, columns=["case", "qid", "kind", "index", "text"])}


def _plurality(rec: Any) -> str | None:
    counts = pd.Series([r.answer for r in rec.reanswers if r.answer is not None]).value_counts()
    if counts.empty or (len(counts) > 1 and counts.iloc[0] == counts.iloc[1]):
        return None
    return str(counts.index[0])


# --------------------------------------------------------------------------- Appendix C
def explain_claims(rationale: str) -> pd.DataFrame:
    """Appendix C walked through on one rationale, for display.

    One row per sentence after :func:`claims.strip_answer_tags` and :func:`claims.split_sentences`:
    ``position`` (1-based), ``sentence``, ``in_tail`` (among the last :data:`claims.TAIL`),
    ``cues`` (the :data:`claims.CUES` it contains, case-insensitive substrings) and ``kept``
    (it is one of :func:`claims.extract_claims`'s claims; the rule itself is only ever applied
    by ``extract_claims``).  Empty frame for an empty rationale.
    """
    sentences = split_sentences(strip_answer_tags(rationale))
    kept = extract_claims(rationale)
    n = len(sentences)
    # place the claims on the sentences: a suffix-first subsequence match within the tail
    marks = [False] * n
    j = len(kept) - 1
    for i in range(n - 1, max(n - TAIL, 0) - 1, -1):
        if j >= 0 and sentences[i] == kept[j]:
            marks[i] = True
            j -= 1
    if j >= 0:
        raise ValueError(f"explain_claims: extract_claims returned {kept!r}, not found among the last {TAIL} sentences")
    rows = [{"position": i + 1, "sentence": s, "in_tail": i >= n - TAIL,
             "cues": ", ".join(c for c in CUES if c in s.lower()), "kept": marks[i]} for i, s in enumerate(sentences)]
    out = pd.DataFrame(rows, columns=["position", "sentence", "in_tail", "cues", "kept"])
    return out


def _case_of(rationale: str) -> str:
    """Which branch of the Appendix C rule a rationale takes (display only; the claims
    themselves always come from :func:`claims.extract_claims`)."""
    sentences = split_sentences(strip_answer_tags(rationale))
    if not sentences:
        return "empty rationale"
    n_cued = sum(any(c in t.lower() for c in CUES) for t in sentences[-TAIL:])
    if n_cued == 0:
        return "no cue: last sentence"
    if n_cued > MAX_CLAIMS:
        return "more than three cued: last three"
    return "one to three cued"


def claim_examples(cell: Any, per_case: int = 1) -> pd.DataFrame:
    """Real rationales of the release that exercise each branch of the Appendix C rule.

    Round-1 rationales of the cell in (qid, candidate) order; for each branch (``one to three
    cued``, ``more than three cued: last three``, ``no cue: last sentence``, ``empty
    rationale``) the first ``per_case`` rationales that take it, plus the first one whose
    ``<answer>`` tag was stripped.  Columns ``case, qid, candidate, rationale, claims``.
    """
    want = ("one to three cued", "more than three cued: last three", "no cue: last sentence", "empty rationale")
    found: dict[str, list[dict[str, Any]]] = {w: [] for w in want}
    for log in sorted(cell.logs, key=lambda lg: lg.qid):
        for i, cand in enumerate(log.rounds[0].candidates):
            case = _case_of(cand.rationale)
            if len(found[case]) < per_case:
                found[case].append({"case": case, "qid": log.qid, "candidate": i + 1, "rationale": cand.rationale,
                                    "claims": " | ".join(extract_claims(cand.rationale))})
        if all(len(v) >= per_case for v in found.values()):
            break
    return pd.DataFrame([r for w in want for r in found[w]], columns=["case", "qid", "candidate", "rationale", "claims"])


def claim_rule_summary(cell: Any) -> pd.DataFrame:
    """How the Appendix C rule behaves over all round-1 rationales of a cell, and whether the
    release's NLI cache used it (DESIGN 2.4: each claim string = the candidate's extracted
    claims joined by a space).  Rows ``quantity, value, n``."""
    branch: list[str] = []
    n_claims: list[int] = []
    for log in cell.logs:
        for cand in log.rounds[0].candidates:
            branch.append(_case_of(cand.rationale))
            n_claims.append(len(extract_claims(cand.rationale)))
    b = pd.Series(branch)
    rows = [{"quantity": "rationales", "value": float(len(b)), "n": len(b)}]
    for w in ("one to three cued", "more than three cued: last three", "no cue: last sentence", "empty rationale"):
        rows.append({"quantity": f"share: {w}", "value": float((b == w).mean()) if len(b) else math.nan, "n": len(b)})
    nc = pd.Series(n_claims)
    for k in range(4):
        rows.append({"quantity": f"share with {k} claims", "value": float((nc == k).mean()) if len(nc) else math.nan,
                     "n": len(nc)})
    if cell.nli:
        logs = {log.qid: log for log in cell.logs}
        match = total = 0
        for r in cell.nli:
            if r.round != 1 or r.qid not in logs:
                continue
            cands = logs[r.qid].rounds[0].candidates
            for idx, claim in zip(r.candidates, r.claims):
                total += 1
                match += claim == " ".join(extract_claims(cands[idx].rationale))
        rows.append({"quantity": "NLI cache claims reproduced by extract_claims",
                     "value": match / total if total else math.nan, "n": total})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- beyond the paper: what-if
def whatif_coverage(error_rates: Sequence[float], cal_sizes: Sequence[int], alpha: float = 0.15,
                    n_population: int = 800, n_draws: int = 50, seed: int = SEED,
                    backbone: str = "Qwen/Qwen3-8B", delta: float = 0.05) -> pd.DataFrame:
    """Certified coverage of one stratum against its calibration size and base error rate
    (beyond the paper; §3.3, §5.3 "a stratum above alpha receives no certified region").

    For each target error rate, :func:`probeguard_core.simulate.whatif.unanimous_layer_table`
    draws a MedQA-like unanimous layer of ``n_population`` questions from the release's
    generative model; its score is ``z(kappa) + z(RSE)`` (:func:`scoring.unanimous_layer_score`).
    That layer is the population: each of ``n_draws`` calibration sets of size ``n_cal`` is
    drawn from it with replacement (``default_rng(seed)``), :func:`certify.ltt_threshold` picks
    the threshold (m = 2 certified strata, as in the paper), and coverage and risk are those of
    the whole population above it.  Columns ``error_rate`` (target), ``base_error`` (realized in
    the population), ``n_cal``, ``certified_share`` (draws with a certificate),
    ``coverage_mean``, ``coverage_sd`` (0 for uncertified draws), ``risk_mean`` (over draws that
    answer something), ``violations`` (draws whose population risk exceeds alpha).
    """
    from probeguard_core.simulate.whatif import unanimous_layer_table as simulate_layer

    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if any(int(n) != n or n < 1 for n in cal_sizes):
        raise ValueError(f"cal_sizes must be positive integers, got {list(cal_sizes)!r}")
    rows = []
    for rate in error_rates:
        tab = simulate_layer(int(n_population), float(rate), seed=seed, backbone=backbone)
        if tab["rse"].isna().any():
            raise ValueError(f"simulated layer at error rate {rate}: {int(tab['rse'].isna().sum())} question(s) without RSE")
        s = np.asarray(unanimous_layer_score(tab["kappa"].to_numpy(), tab["rse"].to_numpy()), dtype=float)
        e = ~tab["correct"].to_numpy(dtype=bool)
        rng = np.random.default_rng(seed)
        for n_cal in cal_sizes:
            idx = rng.integers(0, len(s), size=(int(n_draws), int(n_cal)))
            cov, risk = np.zeros(int(n_draws)), np.full(int(n_draws), np.nan)
            cert = np.zeros(int(n_draws), dtype=bool)
            for d in range(int(n_draws)):
                lam = C.ltt_threshold(s[idx[d]], e[idx[d]], alpha, delta, n_strata=2)
                if lam is None:
                    continue
                cert[d] = True
                ans = s > lam
                cov[d] = ans.mean()
                risk[d] = e[ans].mean() if ans.any() else np.nan
            rows.append({"error_rate": float(rate), "base_error": float(e.mean()), "n_cal": int(n_cal),
                         "alpha": float(alpha), "n_population": int(len(s)), "n_draws": int(n_draws),
                         "certified_share": float(cert.mean()), "coverage_mean": float(cov.mean()),
                         "coverage_sd": float(cov.std(ddof=1)) if n_draws > 1 else math.nan,
                         "risk_mean": float(np.nanmean(risk)) if (~np.isnan(risk)).any() else math.nan,
                         "violations": int((risk > alpha).sum())})
    return pd.DataFrame(rows)


def release_layer_certificate(cell: Any, alpha: float = 0.15, n_splits: int = 50, seed: int = SEED) -> dict[str, float]:
    """The release's own unanimous layer certified as in §4.4 (for comparison with the what-if):
    ``base_error``, ``n_layer``, ``n_cal`` (the layer's calibration half, mean over splits),
    ``coverage_mean``, ``risk_mean`` of stratum S1 from :func:`certify.repeated_splits`."""
    df = certification_inputs([cell])
    rs = C.repeated_splits(df["score"].to_numpy(float), df["error"].to_numpy(bool), df["stratum"].to_numpy(str),
                           alphas=[alpha], n_splits=n_splits, seed=seed)
    s1 = rs[rs["stratum"] == "S1"]
    summ = C.summarize(rs)
    row = summ[summ["stratum"] == "S1"].iloc[0]
    layer = df["stratum"] == "S1"
    return {"base_error": float(df.loc[layer, "error"].mean()), "n_layer": int(layer.sum()),
            "n_cal": float(s1["n_cal"].mean()), "coverage_mean": float(row["coverage_mean"]),
            "risk_mean": float(row["risk_mean"]), "alpha": float(alpha)}
