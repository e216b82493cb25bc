"""Certification (§3.3, §4.4, Figure 4) and its specialty breakdown (Table 8, Appendix I).

:func:`certification_inputs` is the per-question table the stratified rule certifies;
:func:`uncertifiable` says why a release cannot run the paper's rule; the arms of §4.4 come
from :func:`certification_arms`, all over the even splits of :func:`certify.even_splits`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core import SEED
from probeguard_core import certify as C
from probeguard_core.features import (
    first_round_agreement,
)
from probeguard_core.paper import beside_paper, reported_value
from probeguard_core.scoring import pooled_layer_scores, stratum_scores
from probeguard_core.tables.beside import check_entry
from probeguard_core.tables.display import empty_table
from probeguard_core.tables.protocols import CellLike, ReleaseLike
from probeguard_core.tables.scores import cell_records, cell_scores, per_cell

__all__ = [
    "Figure4", "PAPER_LTT_ARMS", "SUMMARY_COLUMNS", "TABLE8_COLUMNS", "TABLE8_QUANTITIES", "Table8", "at_alphas",
    "certification_arms", "certification_inputs", "certification_long", "figure4",
    "specialty_breakdown", "specialty_label_counts", "stratified_summary", "table8", "uncertifiable",
    "with_appendix_e",
]


def certification_inputs(cells: Sequence[CellLike]) -> pd.DataFrame:
    """Per-question certification scores of one or more cells (§3.3; :func:`scoring.stratum_scores`
    over the logs, probe and NLI records of all of them together). Adds ``error``, ``a1``
    (first-round agreement, the certification control of §4.1) and ``cell`` (the cell's
    ``role``: main / augment) columns.

    One value per quantity (DESIGN 3, per dataset and per layer): ``score`` standardizes the
    unanimous-layer z-scores within each cell's own layer (its role), so the main layer's
    scores, and every certificate built on them (§4.4's plain arm, Table 8, the what-if page),
    are the same whether or not an augmentation pool is loaded beside it.
    ``score_augmented`` standardizes over the union of the layers of each dataset (main plus
    augmentation pool): the score of §4.4's augmented arm, which may extend the population.
    Through :func:`tables.scores.per_cell` (release cells compute it once per content of their files)."""
    def build() -> pd.DataFrame:
        logs, probe, nli, role = [], [], [], []
        for c in cells:
            c_logs, c_nli = cell_records(c)
            logs += list(c_logs)
            probe += list(c.probe or [])
            nli += list(c_nli or [])
            role += [c.role] * len(c_logs)
        df = stratum_scores(logs, probe_records=probe, nli=nli, layers=role)
        df["score_augmented"] = pooled_layer_scores(df)
        df["error"] = ~df["correct"].to_numpy(dtype=bool)
        df["a1"] = [first_round_agreement(log) for log in logs]
        df["cell"] = role
        return df

    return per_cell(list(cells), "certification_inputs", build, ("logs", "probe", "nli"))


def uncertifiable(table: pd.DataFrame) -> str | None:
    """Why the paper's stratified rule cannot certify a :func:`certification_inputs` table, or None.

    The rule needs a score for every S1 and S2 question (§3.3); an S1 question has none without
    its counter-evidence probe record and round-1 NLI record (:func:`scoring.stratum_scores`).
    Certification never drops such questions silently: the notebooks show this reason instead."""
    need = table["stratum"].isin(["S1", "S2"]).to_numpy()
    bad = need & table["score"].isna().to_numpy()
    if not bad.any():
        return None
    s1 = table["stratum"].to_numpy() == "S1"
    no_k = int((s1 & table["kappa"].isna().to_numpy()).sum()) if "kappa" in table else 0
    no_r = int((s1 & table["rse"].isna().to_numpy()).sum()) if "rse" in table else 0
    return (f"{int(bad.sum())} of {int(need.sum())} S1/S2 questions have no certification score "
            f"({no_k} unanimous questions without a counter-evidence probe record, {no_r} without a round-1 NLI record)")


def certification_arms(table: pd.DataFrame, full_stream_score: pd.Series | None, alphas: Sequence[float],
                       n_splits: int = 50, seed: int = SEED, extra_cal: pd.DataFrame | None = None) -> pd.DataFrame:
    """The certification arms of §4.4 over repeated splits, summarized (mean, sd, violations).

    * ``naive_quantile`` and ``global_ltt``: one threshold on the pooled question stream, scored by
      ``full_stream_score`` (the out-of-fold process score: the one score defined for every
      question); rows for every stratum and ``all``;
    * ``stratified_ltt``: the paper's rule (S1 ``z(kappa)+z(RSE)``, S2 ``a-bar``, S3 abstains);
    * ``stratified_ltt_a1``: the certification control, first-round agreement in S1 and S2 (§4.1);
    * ``stratified_ltt_augmented``: the paper's rule with ``extra_cal`` (the n = 875 in-domain
      augmentation, release cells of role ``augment``) added to every calibration half, scored
      by ``score_augmented`` (z over main layer plus pool) where the tables have it.
    The two paper-rule arms are left out when :func:`uncertifiable` says the release cannot score
    its unanimous layer (no probe or NLI records). Columns: ``arm`` then those of
    :func:`certify.summarize`.
    """
    st = table["stratum"].to_numpy(dtype=str)
    err = table["error"].to_numpy(dtype=bool)
    alphas = [float(a) for a in alphas]
    kw = dict(alphas=alphas, n_splits=n_splits, seed=seed)
    frames = []
    if full_stream_score is not None:
        fs = full_stream_score.loc[table.index].to_numpy(dtype=float)
        for arm, method in (("naive_quantile", "naive"), ("global_ltt", "global")):
            frames.append(C.summarize(C.repeated_splits(fs, err, st, method=method, **kw)).assign(arm=arm))
    paper_rule = uncertifiable(table) is None
    if paper_rule:
        frames.append(C.summarize(C.repeated_splits(table["score"].to_numpy(dtype=float), err, st, **kw))
                      .assign(arm="stratified_ltt"))
    frames.append(C.summarize(C.repeated_splits(table["a1"].to_numpy(dtype=float), err, st, **kw))
                  .assign(arm="stratified_ltt_a1"))
    if paper_rule and extra_cal is not None and len(extra_cal) and uncertifiable(extra_cal) is None:
        col = "score_augmented" if "score_augmented" in table and "score_augmented" in extra_cal else "score"
        x = (extra_cal[col].to_numpy(dtype=float), extra_cal["error"].to_numpy(dtype=bool),
             extra_cal["stratum"].to_numpy(dtype=str))
        frames.append(C.summarize(C.repeated_splits(table[col].to_numpy(dtype=float), err, st, extra_cal=x, **kw))
                      .assign(arm="stratified_ltt_augmented"))
    out = pd.concat(frames, ignore_index=True)
    return out[["arm"] + [c for c in out.columns if c not in ("arm", "method")]]


def certification_long(summary: pd.DataFrame) -> pd.DataFrame:
    """A :func:`certification_arms` summary in the paper's long keys (``data/paper/reported.csv``):
    one row per (arm, stratum, alpha, quantity) with quantity ``certified_coverage``,
    ``certified_coverage_sd``, ``realized_risk`` or ``violation_splits``; the pooled stream
    (``stratum == "all"``) gets an empty stratum, as the paper's full-stream numbers do."""
    rows = []
    for r in summary.itertuples(index=False):
        for q, v in (("certified_coverage", r.coverage_mean), ("certified_coverage_sd", r.coverage_sd),
                     ("realized_risk", r.risk_mean), ("violation_splits", float(r.violations))):
            rows.append({"arm": r.arm, "stratum": None if r.stratum == "all" else r.stratum, "alpha": float(r.alpha),
                         "quantity": q, "value": float(v), "n_splits": int(r.n_splits),
                         "n_certified": int(r.n_certified)})
    return pd.DataFrame(rows)


def specialty_breakdown(cell: CellLike, alpha: float = 0.15, n_splits: int = 50, seed: int = SEED,
                        min_unanimous: int = 25, delta: float = 0.05) -> pd.DataFrame:
    """Table 8: how the layer-level certified rule distributes over specialties (Appendix I).

    Scores and strata are :func:`certification_inputs` (S1: z(kappa) + z(RSE), S2:
    a-bar).  The splits are :func:`certify.even_splits`, those of :func:`certify.repeated_splits`
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
    for cal in C.even_splits(n, n_splits, seed):
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


# --------------------------------------------------------------------------- the §4.4 page
#: Columns of :func:`certify.summarize` (the schema of an empty stand-in table).
SUMMARY_COLUMNS: tuple[str, ...] = ("method", "alpha", "stratum", "n_splits", "n_certified", "coverage_mean",
                                    "coverage_sd", "risk_mean", "risk_sd", "n_risk", "violations")


def at_alphas(df: pd.DataFrame, alphas: Iterable[float], column: str = "alpha") -> pd.DataFrame:
    """The rows of ``df`` whose ``column`` is one of ``alphas`` (compared at two decimals, the
    grid's precision: ``0.1`` matches ``0.10000000000000001``).

    >>> at_alphas(pd.DataFrame({"alpha": [0.05, 0.1, 0.15]}), [0.10, 0.15]).alpha.tolist()
    [0.1, 0.15]
    """
    return df[df[column].round(2).isin([round(a, 2) for a in alphas])]


def _empty_summary(*extra: str) -> pd.DataFrame:
    cols = [*SUMMARY_COLUMNS, *extra]
    return empty_table(cols, numeric=[SUMMARY_COLUMNS[1], *SUMMARY_COLUMNS[3:]])


def stratified_summary(cells: Sequence[CellLike], alphas: Sequence[float], n_splits: int = 50,
                       seed: int = SEED) -> tuple[pd.DataFrame | None, str | None]:
    """The paper's stratified rule over repeated splits (§4.4) on ``cells`` together, summarized
    (:func:`certify.summarize`), or ``(None, reason)`` when :func:`uncertifiable` says it cannot run."""
    t = certification_inputs(cells)
    reason = uncertifiable(t)
    if reason:
        return None, reason
    return C.summarize(C.repeated_splits(t.score, t.error, t.stratum, alphas=alphas, n_splits=n_splits,
                                         seed=seed)), None


@dataclass
class Figure4:
    """Everything the §4.4 / Figure 4 page shows, built from any release (:func:`figure4`).

    ``tables`` maps each CSV name to its table (always written, with its schema when the
    release lacks its inputs); ``notes`` says what the release lacks and what is therefore absent."""

    backbone: str
    dataset: str
    label: str
    main: pd.DataFrame
    aug: pd.DataFrame
    why: str | None
    arms: pd.DataFrame
    per_backbone: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    beside: dict[str, pd.DataFrame]
    notes: list[str]
    alpha: float

    def results(self, n_splits: int) -> dict[str, Any]:
        """The headline numbers of ``results.json`` (with their consistency check)."""
        methods = self.tables["certification_methods"]
        s1 = at_alphas(methods[(methods.arm == "stratified_ltt") & (methods.stratum == "S1")], [self.alpha])
        ltt = methods[methods.arm.str.contains("ltt")]
        first = (lambda c: s1[c].iloc[0] if len(s1) else math.nan)  # noqa: E731
        return dict(
            alpha=self.alpha, n_splits=n_splits, backbone=self.backbone, dataset=self.dataset,
            s1_coverage=first("coverage_mean"), s1_coverage_sd=first("coverage_sd"),
            s1_risk=first("risk_mean"), paper_rule_missing=self.why,
            ltt_violations=int(ltt.violations.sum()), ltt_split_tests=int(ltt.n_splits.sum()),
            n_augment=len(self.aug),
            checks=[check_entry("s1_coverage", "certification_methods.csv",
                                {"arm": "stratified_ltt", "stratum": "S1", "alpha": self.alpha},
                                "coverage_mean")] if len(s1) else [],
        )


#: The Learn-then-Test arms the paper reports (§4.4), whose violation count Appendix E states: "0 of 50".
PAPER_LTT_ARMS: tuple[str, ...] = ("global_ltt", "stratified_ltt", "stratified_ltt_augmented")


def with_appendix_e(long: pd.DataFrame) -> pd.DataFrame:
    """``long`` (a :func:`certification_long` table beside §4.4) with Appendix E's violation count
    as the paper value of every ``violation_splits`` row of an arm the paper reports
    (:data:`PAPER_LTT_ARMS`): "it is 0 of 50 for every Learn-then-Test arm reported" (Appendix E)."""
    rows = (long["quantity"] == "violation_splits") & long["arm"].isin(PAPER_LTT_ARMS) & long["paper"].isna()
    if not rows.any():
        return long
    out = long.copy()
    out.loc[rows, "paper"] = reported_value(source="Appendix E", quantity="violation_splits")
    out.loc[rows, "diff"] = out.loc[rows, "value"] - out.loc[rows, "paper"]
    out.loc[rows, "unit"] = "count"
    return out


def figure4(rel: ReleaseLike, dataset: str | None = None, backbone: str | None = None,
            backbones: Sequence[str] | None = None, pooled_datasets: Sequence[str] | None = None,
            alphas: Sequence[float] = C.DEFAULT_ALPHAS, alpha: float = 0.15, n_splits: int = 50,
            seed: int = SEED) -> Figure4:
    """§4.4 and Figure 4 from any release: every arm (:func:`certification_arms`) over repeated
    even splits, the paper's rule per backbone and on pooled domains, at ``alphas`` (the tables)
    and on the α grid of :mod:`probeguard_core.alpha_explorer` (the figure). What the release
    lacks (the unanimous layer's probe / NLI records, an augment cell, a second backbone or
    benchmark) leaves its table empty with its schema and a note saying why."""
    from probeguard_core import alpha_explorer
    from probeguard_core.tables.picking import pick_backbone, pick_backbones, pick_dataset, pick_datasets

    backbone = pick_backbone(rel, backbone)
    dataset = pick_dataset(rel, dataset, backbone)
    backbones = pick_backbones(rel, backbones)
    pooled_datasets = pick_datasets(rel, pooled_datasets, backbone, design=["medqa", "mmlu_pro_med"])
    cell = rel.cell(dataset, backbone)
    aug_cells = [rel.cell(dataset, backbone, role="augment")] if rel.has_cell(dataset, backbone, role="augment") else []
    inputs = certification_inputs([cell, *aug_cells])
    main, aug = inputs[inputs.cell == "main"], inputs[inputs.cell == "augment"]
    why = uncertifiable(main)
    process = cell_scores(cell, seed=seed)["process_score"]
    grid = sorted(set(alpha_explorer.ALPHAS) | {round(a, 2) for a in alphas})
    arms = certification_arms(main, process, grid, n_splits=n_splits, seed=seed, extra_cal=aug if len(aug) else None)
    notes = []
    if why:
        notes.append(f"{cell.label}: {why}. The paper's stratified rule (§3.3) needs them, so this page shows only "
                     "the pooled-stream arms and the first-round-agreement control for it.")
    if not aug_cells:
        notes.append(f"this release has no augment cell for {cell.label}; the in-domain calibration augmentation "
                     "of §4.4 (the paper's n = 875) needs one, so that arm is absent.")
    # every arm at the table's alphas
    methods = at_alphas(arms, alphas)
    methods = methods[methods.stratum.isin(["S1", "all"])].reset_index(drop=True)
    sweep = methods[methods.arm == "stratified_ltt"].reset_index(drop=True)
    long = with_appendix_e(beside_paper(certification_long(methods), on=["arm", "stratum", "alpha", "quantity"],
                                        source="§4.4", backbone=backbone, dataset=dataset))
    # the paper's rule per backbone
    parts, skipped = [], []
    for b in backbones:
        if rel.has_cell(dataset, b):
            summ, reason = stratified_summary([rel.cell(dataset, b)], grid, n_splits, seed)
            if reason:
                skipped.append(f"{b}: {reason}")
            else:
                parts.append(summ.assign(backbone=b, arm="stratified_ltt"))
    per_bb = pd.concat(parts, ignore_index=True) if parts else _empty_summary("backbone", "arm")
    other = at_alphas(per_bb, alphas)
    other = other[other.stratum == "S1"]
    if len(backbones) < 2:
        notes.append(f"this release has a single backbone ({backbone}); §4.4 compares backbones, so only this one "
                     "is shown.")
    if skipped:
        notes.append("the paper's rule cannot run for " + "; ".join(skipped))
    ob = pd.concat([beside_paper(certification_long(g.drop(columns="backbone")).assign(backbone=b),
                                 on=["arm", "stratum", "alpha", "quantity"], source="§4.4", backbone=b, dataset=dataset)
                    for b, g in other.groupby("backbone", sort=False)]) if len(other) else None
    # pooled domains
    pool = [rel.cell(d, backbone) for d in pooled_datasets]
    pooled, reason = (None, f"this release has a single benchmark for {backbone}; pooled domains (§4.4) need two "
                            "or more") if len(pool) < 2 else stratified_summary(pool, grid, n_splits, seed)
    if pooled is None:
        notes.append(reason)
        pooled = _empty_summary("arm")
    pooled = pooled.assign(arm="stratified_ltt")
    pooled = at_alphas(pooled, alphas)
    pooled = pooled[pooled.stratum == "S1"]
    pl = beside_paper(certification_long(pooled).assign(dataset="pooled"), on=["dataset", "arm", "stratum", "quantity"],
                      source="§4.4", backbone=backbone, dataset="pooled") if len(pooled) else None
    beside = {"methods": long[long.quantity.isin(["certified_coverage", "realized_risk", "violation_splits"])]}
    beside["other_backbones"] = (ob[ob.quantity == "certified_coverage"] if ob is not None
                                 else long.iloc[0:0].assign(backbone=""))
    beside["pooled"] = pl[pl.quantity == "certified_coverage"] if pl is not None else long.iloc[0:0]
    tables = {"certification_methods": methods, "alpha_sweep": sweep, "other_backbones": other, "pooled": pooled}
    return Figure4(backbone, dataset, cell.label, main, aug, why, arms, per_bb, tables, beside, notes, float(alpha))


# --------------------------------------------------------------------------- the Table 8 page
#: Columns of :func:`specialty_breakdown` (the schema of its empty stand-in).
TABLE8_COLUMNS: tuple[str, ...] = ("backbone", "dataset", "alpha", "specialty", "n_unanimous", "unanimous_error",
                                   "certified_coverage", "coverage_sd", "realized_risk", "n_risk_splits",
                                   "violations", "shown")
#: The Table 8 quantities shown beside the paper, with their units.
TABLE8_QUANTITIES: dict[str, str] = {"n_unanimous": "count", "unanimous_error": "fraction",
                                     "certified_coverage": "fraction", "realized_risk": "fraction"}


@dataclass
class Table8:
    """The Table 8 page (:func:`table8`): the breakdown ``t8``, its long form beside the paper
    ``long``, the omitted specialties, and notes on what the release lacks."""

    cell: CellLike
    backbone: str
    dataset: str
    t8: pd.DataFrame
    long: pd.DataFrame
    omitted: list[str]
    n_labelled: int
    why: str | None
    notes: list[str]

    @property
    def omitted_line(self) -> str:
        o = self.omitted
        return (f"{len(o)} specialt{'y' if len(o) == 1 else 'ies'} with fewer unanimous questions than the threshold "
                f"omitted: {', '.join(o) or 'none'}")


def table8(rel: ReleaseLike, dataset: str | None = None, backbone: str | None = None, alpha: float = 0.15,
           min_unanimous: int = 25, n_splits: int = 50, seed: int = SEED) -> Table8:
    """Table 8 (Appendix I) from any release: :func:`specialty_breakdown` beside the paper, or its
    empty schema and a note when the release cannot run the certified rule or has no specialty
    labels."""
    from probeguard_core.tables.picking import pick_backbone, pick_dataset

    backbone = pick_backbone(rel, backbone)
    dataset = pick_dataset(rel, dataset, backbone)
    cell = rel.cell(dataset, backbone)
    n_labelled = sum(g.specialty is not None for g in cell.logs)
    why = uncertifiable(certification_inputs([cell]))
    notes = []
    cols = list(TABLE8_COLUMNS)
    if why:
        t8 = empty_table(cols, numeric=["alpha", *cols[4:11]])
        t8.attrs["omitted"] = []
        notes.append(f"{cell.label}: {why}; Table 8 deploys the certified rule of §4.4, which needs them.")
    else:
        t8 = specialty_breakdown(cell, alpha=alpha, n_splits=n_splits, seed=seed, min_unanimous=min_unanimous)
    if not n_labelled:
        notes.append(f"this release has no specialty labels for {cell.label}; Table 8 needs them (DESIGN 2.1 "
                     "`specialty`), so only the whole layer is shown.")
    long = t8.melt(id_vars=["backbone", "dataset", "alpha", "specialty", "shown"], value_vars=list(TABLE8_QUANTITIES),
                   var_name="quantity", value_name="value")
    long["unit"] = long["quantity"].map(TABLE8_QUANTITIES)
    long = beside_paper(long, on=["backbone", "dataset", "specialty", "quantity"], source="Table 8")
    return Table8(cell, backbone, dataset, t8, long, t8.attrs["omitted"], n_labelled, why, notes)


def specialty_label_counts(cell: CellLike) -> pd.DataFrame:
    """Appendix I's label counts of a cell: questions with a specialty label, and those of them
    in the unanimous layer (quantities ``n_specialty_labelled``, ``n_specialty_unanimous``)."""
    from probeguard_core.features import stratum

    labelled = [g for g in cell.logs if g.specialty is not None]
    return pd.DataFrame({"dataset": cell.dataset, "quantity": ["n_specialty_labelled", "n_specialty_unanimous"],
                         "value": [len(labelled), sum(stratum(g) == "S1" for g in labelled)]})
