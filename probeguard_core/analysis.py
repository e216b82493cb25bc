"""Table builders shared by the book's notebooks (keeps each notebook to a screen of logic).

Every function here only arranges calls to the core (features, scoring, baselines, metrics,
certify, probe) into the long tables the notebooks display and write; nothing is computed
that the core already defines. Paper references are on each function.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from probeguard_core import SEED
from probeguard_core import certify as C
from probeguard_core import metrics as M
from probeguard_core.baselines import signal_table
from probeguard_core.features import (
    converged,
    feature_table,
    first_round_agreement,
    is_correct,
    round_agreements,
)
from probeguard_core.scoring import process_score, stratum_scores, unanimous_layer_score

ArrayLikeF = Sequence[float] | NDArray[Any] | pd.Series

__all__ = [
    "ARTIFACT_NAMES",
    "FIGURE1_COLUMNS",
    "TABLE2_SIGNALS",
    "ALWAYS_AVAILABLE",
    "LAYER_SIGNALS",
    "absent_note",
    "agreement_by_round",
    "cell_scores",
    "certification_arms",
    "certification_inputs",
    "certification_long",
    "check_entry",
    "concluding_round_table",
    "discrimination",
    "empty_table",
    "figure1_cases",
    "layer_discrimination",
    "note",
    "pick_backbone",
    "pick_backbones",
    "pick_dataset",
    "pick_datasets",
    "placeholder_figure",
    "risk_coverage_curves",
    "theorem1_resampled",
    "theorem1_synthetic",
    "uncertifiable",
    "violation_upper_bound",
    "wide_beside",
]

#: The signals of Table 2 / Table 5, in the paper's row order.
TABLE2_SIGNALS: tuple[str, ...] = (
    "terminal_agreement", "first_round_agreement", "sequence_logprob", "answer_entropy",
    "verbalized_confidence", "p_true", "process_score",
)
#: Signals defined for every question (Figure 5).
ALWAYS_AVAILABLE: tuple[str, ...] = (
    "terminal_agreement", "first_round_agreement", "sequence_logprob", "answer_entropy", "process_score",
)
#: Signals evaluated inside the unanimous layer (Figure 2 right, §4.3).
LAYER_SIGNALS: tuple[str, ...] = (
    "terminal_agreement", "first_round_agreement", "answer_entropy", "sequence_logprob",
    "verbalized_confidence", "p_true", "rse", "keep_rate", "rse_keep",
)


def check_entry(key: str, csv: str, row: Mapping[str, Any], column: str) -> dict[str, Any]:
    """A consistency record for ``results.json['checks']`` (notebooks/README.md): the headline
    number ``results[key]`` must equal ``<csv>[column]`` on the row matching ``row``."""
    return {"key": key, "csv": csv, "row": dict(row), "column": column}


# --------------------------------------------------------------------------- per-cell scores
def cell_scores(cell: Any, seed: int = SEED, n_folds: int = 5) -> pd.DataFrame:
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
    s1 = (sig["stratum"] == "S1").to_numpy()
    rk = np.full(len(sig), np.nan)
    if s1.any():
        rk[s1] = unanimous_layer_score(sig.loc[s1, "keep_rate"].to_numpy(), sig.loc[s1, "rse"].to_numpy())
    sig["rse_keep"] = rk
    sig["t_stop"] = [len(log.rounds) for log in logs]
    sig["converged"] = [converged(log) for log in logs]
    return sig


def _metric(fn: Any, scores: pd.Series, correct: pd.Series) -> tuple[float, int]:
    ok = scores.notna().to_numpy()
    n_def = int(ok.sum())
    if n_def < len(scores) or n_def == 0:
        # A signal missing for some questions would be evaluated on another population:
        # report it as not available rather than on a silently smaller set.
        return math.nan, n_def
    return float(fn(scores.to_numpy(), correct.to_numpy())), n_def


def discrimination(scores: Mapping[tuple[str, str], pd.DataFrame], signals: Sequence[str] = TABLE2_SIGNALS,
                   subset: str | None = None) -> pd.DataFrame:
    """AUROC and AURC of each signal per (backbone, dataset) cell (Tables 2, 3, 5; §4.1).

    ``scores`` maps ``(backbone, dataset)`` to :func:`cell_scores`. ``subset="S1"`` restricts
    to the unanimous layer. A signal not defined for every question of the cell gets NaN
    (the paper's dash), with ``n_defined`` saying for how many it is. Long format: columns
    ``backbone, dataset, signal, quantity (auroc|aurc), value, n, n_defined``.
    """
    rows = []
    for (backbone, dataset), df in scores.items():
        part = df if subset is None else df[df["stratum"] == subset]
        for sig in signals:
            for quantity, fn in (("auroc", M.auroc), ("aurc", M.aurc)):
                v, n_def = _metric(fn, part[sig], part["correct"]) if len(part) else (math.nan, 0)
                rows.append({"backbone": backbone, "dataset": dataset, "signal": sig, "quantity": quantity,
                             "value": v, "n": int(len(part)), "n_defined": n_def})
    return pd.DataFrame(rows)


def layer_discrimination(scores: pd.DataFrame, signals: Sequence[str] = LAYER_SIGNALS) -> pd.DataFrame:
    """AUROC of each signal inside the unanimous layer S1 (Figure 2 right, §4.3): columns
    ``signal, value, n, n_defined, constant`` (a constant signal has AUROC 0.5 by definition)."""
    part = scores[scores["stratum"] == "S1"]
    rows = []
    for sig in signals:
        v, n_def = _metric(M.auroc, part[sig], part["correct"]) if len(part) else (math.nan, 0)
        const = bool(part[sig].dropna().nunique() <= 1)
        rows.append({"signal": sig, "value": v, "n": int(len(part)), "n_defined": n_def, "constant": const})
    return pd.DataFrame(rows)


def risk_coverage_curves(scores: pd.DataFrame, signals: Sequence[str] = ALWAYS_AVAILABLE,
                         min_coverage: float = 0.05) -> pd.DataFrame:
    """Tie-aware risk-coverage curves (Figure 5; :func:`metrics.risk_coverage`), coverage below
    ``min_coverage`` omitted: columns ``signal, coverage, risk, threshold, n_answered``."""
    frames = []
    for sig in signals:
        if scores[sig].isna().any():
            continue
        rc = M.risk_coverage(scores[sig].to_numpy(), scores["correct"].to_numpy())
        rc = rc[rc["coverage"] >= min_coverage]
        frames.append(rc.assign(signal=sig)[["signal", "coverage", "risk", "threshold", "n_answered"]])
    return pd.concat(frames, ignore_index=True)


# --------------------------------------------------------------------------- Figure 2
def agreement_by_round(logs: Sequence[Any], max_rounds: int | None = None) -> pd.DataFrame:
    """Mean agreement ``s_t(m_t)`` per round for correct vs wrong final answers, with standard
    errors (Figure 2 left). A question that stopped before round ``t`` keeps its last round's
    agreement (the consensus it concluded with), so every question counts in every round.
    Columns ``group (correct|wrong), round, mean, se, n``."""
    T = max_rounds or max(log.max_rounds for log in logs)
    A = np.full((len(logs), T), np.nan)
    for i, log in enumerate(logs):
        ag = round_agreements(log)
        A[i, : len(ag)] = ag
        A[i, len(ag):] = ag[-1]
    ok = np.asarray([is_correct(log) for log in logs])
    rows = []
    for group, mask in (("correct", ok), ("wrong", ~ok)):
        sub = A[mask]
        n = sub.shape[0]
        for t in range(T):
            m = float(sub[:, t].mean()) if n else math.nan
            se = float(sub[:, t].std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
            rows.append({"group": group, "round": t + 1, "mean": m, "se": se, "n": n})
    return pd.DataFrame(rows)


def concluding_round_table(logs: Sequence[Any]) -> pd.DataFrame:
    """Questions and error rate by the round at which consensus concludes (Figure 2 middle).

    Rows ``round = 1..T`` over converged questions (``T_stop`` = number of logged rounds), plus
    a row ``round = 0`` labelled ``no consensus`` for questions that never converged (S3).
    Columns ``round, label, n, n_errors, error_rate``."""
    T = max(log.max_rounds for log in logs)
    conv = np.asarray([converged(log) for log in logs])
    t_stop = np.asarray([len(log.rounds) for log in logs])
    err = ~np.asarray([is_correct(log) for log in logs])
    rows = []
    for t in range(1, T + 1):
        m = conv & (t_stop == t)
        rows.append({"round": t, "label": str(t), "n": int(m.sum()), "n_errors": int(err[m].sum())})
    rows.append({"round": 0, "label": "no consensus", "n": int((~conv).sum()), "n_errors": int(err[~conv].sum())})
    df = pd.DataFrame(rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        df["error_rate"] = np.where(df["n"] > 0, df["n_errors"] / df["n"].clip(lower=1), np.nan)
    return df


# --------------------------------------------------------------------------- Figure 1
#: Columns of :func:`figure1_cases` (its empty table when the release cannot give the cases).
FIGURE1_COLUMNS: tuple[str, ...] = ("case", "qid", "question", "gold", "consensus", "correct", "kappa", "n_kept",
                                     "rse", "reanswers", "claim")


def figure1_cases(cell: Any, arm: str = "counter_evidence") -> pd.DataFrame:
    """The two unanimous cases of Figure 1, chosen deterministically from the probe records.

    *kept*: a correct unanimous consensus with the largest keep rate (kappa = 1 when any),
    ties broken by the highest RSE, then qid; *collapsed*: a wrong unanimous consensus with
    the smallest keep rate (kappa = 0 when any), ties by the lowest RSE, then qid. The keep rate
    shown is the case's actual kappa (Eq. 4). Columns: ``case, qid, question, gold, consensus,
    correct, kappa, n_kept, rse, reanswers, claim``. Raises ``ValueError`` when the release has no
    probed correct or wrong unanimous question.
    """
    from probeguard_core.claims import extract_claims

    sig = signal_table(cell)
    s1 = sig[(sig["stratum"] == "S1") & sig["keep_rate"].notna()].copy()
    s1["rse_f"] = s1["rse"].fillna(-np.inf)
    s1["qid_"] = s1.index.astype(str)
    probe = {r.qid: r for r in cell.probe_by_arm(arm)}
    logs = {log.qid: log for log in cell.logs}
    rows = []
    for case, want_correct, order in (("kept", True, [False, False, True]), ("collapsed", False, [True, True, True])):
        pool = s1[s1["correct"] == want_correct]
        if pool.empty:
            raise ValueError(f"{cell.label}: no probed {'correct' if want_correct else 'wrong'} unanimous question "
                             f"for the '{case}' case of Figure 1")
        pick = pool.sort_values(["keep_rate", "rse_f", "qid_"], ascending=order, kind="stable").index[0]
        rec, log = probe[pick], logs[pick]
        answers = [c.answer for c in rec.reanswers]
        claims = extract_claims(log.rounds[0].candidates[0].rationale)
        rows.append({
            "case": case, "qid": pick, "question": log.question, "gold": log.gold, "consensus": rec.consensus,
            "correct": bool(want_correct), "kappa": float(s1.at[pick, "keep_rate"]),
            "n_kept": int(sum(a == rec.consensus for a in answers)), "rse": float(s1.at[pick, "rse"]),
            "reanswers": "".join(a if a is not None else "-" for a in answers),
            "claim": " ".join(claims),
        })
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- certification
def certification_inputs(cells: Sequence[Any]) -> pd.DataFrame:
    """Per-question certification scores of one or more cells (§3.3; :func:`scoring.stratum_scores`
    over the logs, probe and NLI records of all of them together, so the unanimous-layer z-scores
    standardize over the union within each dataset). Adds ``error``, ``a1`` (first-round
    agreement, the certification control of §4.1) and ``cell`` (the cell's
    ``role``: main / augment) columns."""
    logs, probe, nli, role = [], [], [], []
    for c in cells:
        logs += list(c.logs)
        probe += list(c.probe or [])
        nli += list(c.nli or [])
        role += [c.role] * len(c.logs)
    df = stratum_scores(logs, probe_records=probe, nli=nli)
    df["error"] = ~df["correct"].to_numpy(dtype=bool)
    df["a1"] = [first_round_agreement(log) for log in logs]
    df["cell"] = role
    return df


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


# --------------------------------------------------------------------------- Theorem 1 audit
def violation_upper_bound(k: int, n: int, level: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on a violation probability from ``k`` of ``n`` draws
    (``scipy.stats.beta``); 1.0 when ``k = n``."""
    from scipy.stats import beta

    if n <= 0:
        return math.nan
    return 1.0 if k >= n else float(beta.ppf(level, k + 1, n - k))


def _audit_rows(lams: NDArray[np.float64], risk_of: Any, alpha: float, source: str) -> dict[str, Any]:
    cert = ~np.isnan(lams)
    risks = np.array([risk_of(l) if c else np.nan for l, c in zip(lams, cert)])
    viol = cert & (risks > alpha + 1e-12)
    k, n = int(viol.sum()), int(lams.size)
    return {"source": source, "alpha": float(alpha), "n_draws": n, "n_certified": int(cert.sum()),
            "violations": k, "violation_fraction": k / n, "upper_95": violation_upper_bound(k, n),
            "mean_true_risk_certified": float(np.nanmean(risks)) if cert.any() else math.nan}


def theorem1_synthetic(alphas: Iterable[float], n_draws: int = 2000, n_cal: int = 400, base_error: float = 0.05,
                       slope: float = 0.40, delta: float = 0.05, seed: int = SEED) -> pd.DataFrame:
    """Empirical audit of Theorem 1 with a known risk function (beyond the paper).

    Scores ``s ~ U(0, 1)``, ``P(error | s) = base_error + slope * (1 - s)``, so the true selective
    risk of ``answer iff s > lambda`` is ``base_error + slope * (1 - lambda) / 2`` exactly. Each
    draw: ``n_cal`` calibration questions, :func:`certify.ltt_threshold` (m = 2 strata, as in the
    paper's Bonferroni split); a violation is a certified threshold whose true risk exceeds alpha.
    One row per alpha: ``violations`` of ``n_draws``, their fraction and its one-sided 95 %
    Clopper-Pearson upper bound, to compare with ``delta``."""
    rng = np.random.default_rng(seed)
    S = rng.random((n_draws, n_cal))
    E = rng.random((n_draws, n_cal)) < (base_error + slope * (1 - S))

    def risk_of(lam: float) -> float:
        lam = min(max(lam, 0.0), 1.0)
        return base_error + slope * (1.0 - lam) / 2.0 if lam < 1 else math.nan

    rows = []
    for a in alphas:
        lams = np.array([np.nan if (t := C.ltt_threshold(S[d], E[d], a, delta)) is None else t
                         for d in range(n_draws)])
        rows.append(_audit_rows(lams, risk_of, a, "synthetic"))
    return pd.DataFrame(rows)


def theorem1_resampled(scores: ArrayLikeF, errors: ArrayLikeF, alphas: Iterable[float], n_draws: int = 2000,
                       n_cal: int | None = None, delta: float = 0.05, seed: int = SEED) -> pd.DataFrame:
    """Theorem 1 audit by resampling a release's stratum (beyond the paper): the stratum's
    questions are the population, each draw takes ``n_cal`` of them with replacement (default half
    the stratum, as one calibration split), and the true risk of a threshold is its selective risk
    over the whole stratum."""
    s = np.asarray(scores, dtype=float)
    e = np.asarray(errors, dtype=bool)
    if s.size == 0 or np.isnan(s).any():
        raise ValueError("theorem1_resampled: scores must be non-empty and free of NaN")
    n_cal = n_cal or s.size // 2
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, s.size, size=(n_draws, n_cal))

    def risk_of(lam: float) -> float:
        ans = s > lam
        return float(e[ans].mean()) if ans.any() else math.nan

    rows = []
    for a in alphas:
        lams = np.array([np.nan if (t := C.ltt_threshold(s[idx[d]], e[idx[d]], a, delta)) is None else t
                         for d in range(n_draws)])
        rows.append(_audit_rows(lams, risk_of, a, "resampled"))
    return pd.DataFrame(rows)



def wide_beside(df: pd.DataFrame, index: Sequence[str], columns: Sequence[str], decimals: int = 3) -> pd.DataFrame:
    """Display pivot of a :func:`paper.beside_paper` frame: one cell per (index, columns) reading
    ``ours (paper; diff)``, ``–`` where a value is missing. For display only; CSVs stay long."""
    def cell(r: Any) -> str:
        f = (lambda x, s="": "–" if pd.isna(x) else f"{x:{s}.{decimals}f}")
        if pd.isna(r["paper"]):
            return f"{f(r['value'])} (paper –)"
        return f"{f(r['value'])} (paper {f(r['paper'])}; {f(r['diff'], '+')})"

    shown = df.assign(_cell=df.apply(cell, axis=1))
    wide = shown.pivot_table(index=list(index), columns=list(columns), values="_cell", aggfunc="first", sort=False)
    wide.columns.names = [None] * wide.columns.nlevels
    return wide


# --------------------------------------------------------------------------- §4.4 arms
def certification_arms(table: pd.DataFrame, full_stream_score: pd.Series | None, alphas: Sequence[float],
                       n_splits: int = 50, seed: int = SEED, extra_cal: pd.DataFrame | None = None) -> pd.DataFrame:
    """The certification arms of §4.4 over repeated splits, summarized (mean, sd, violations).

    * ``naive_quantile`` and ``global_ltt``: one threshold on the pooled question stream, scored by
      ``full_stream_score`` (the out-of-fold process score: the one score defined for every
      question); rows for every stratum and ``all``;
    * ``stratified_ltt``: the paper's rule (S1 ``z(kappa)+z(RSE)``, S2 ``a-bar``, S3 abstains);
    * ``stratified_ltt_a1``: the certification control, first-round agreement in S1 and S2 (§4.1);
    * ``stratified_ltt_augmented``: the paper's rule with ``extra_cal`` (the n = 875 in-domain
      augmentation, release cells of role ``augment``) added to every calibration half.
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
        x = (extra_cal["score"].to_numpy(dtype=float), extra_cal["error"].to_numpy(dtype=bool),
             extra_cal["stratum"].to_numpy(dtype=str))
        frames.append(C.summarize(C.repeated_splits(table["score"].to_numpy(dtype=float), err, st, extra_cal=x, **kw))
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


# --------------------------------------------------------------------------- any release
# The book renders from any release written to DESIGN 2.7 (notebooks/README.md): parameters
# left at None select from what the release has, and a table whose inputs the release lacks
# is replaced by a visible note while its files are still written (empty, with its columns).
def _paper_order(values: Iterable[str], order: Sequence[str]) -> list[str]:
    vals = list(dict.fromkeys(values))
    known = [v for v in order if v in vals]
    return known + [v for v in vals if v not in order]


def pick_backbone(rel: Any, backbone: str | None = None) -> str:
    """The backbone a notebook shows: ``backbone`` when given (it must be in the release), else
    the paper's primary backbone when the release has it, else the release's first backbone."""
    from probeguard_core.paper import BACKBONES

    have = list(rel.backbones)
    if backbone is not None:
        if backbone not in have:
            raise ValueError(f"backbone={backbone!r}: release {rel.name!r} has no main cell for it; it has {have}")
        return backbone
    if not have:
        raise ValueError(f"release {rel.name!r} has no main cell")
    return _paper_order(have, BACKBONES)[0]


def pick_backbones(rel: Any, backbones: Sequence[str] | None = None) -> list[str]:
    """``backbones`` that the release has (in the given order), or with None every backbone of
    the release (the paper's order first, then the release's)."""
    from probeguard_core.paper import BACKBONES

    if backbones is None:
        return _paper_order(rel.backbones, BACKBONES)
    return [b for b in dict.fromkeys(backbones) if b in rel.backbones]


def _datasets_of(rel: Any, backbone: str | None) -> list[str]:
    return list(dict.fromkeys(c.dataset for c in rel.main_cells() if backbone in (None, c.backbone)))


def pick_dataset(rel: Any, dataset: str | None = None, backbone: str | None = None) -> str:
    """The benchmark a single-cell notebook shows: ``dataset`` when given (the release must have
    it for ``backbone``), else the first of the paper's benchmarks (MedQA first) that the release
    has for ``backbone``, else the release's first benchmark for it."""
    from probeguard_core.paper import DATASETS

    have = _datasets_of(rel, backbone)
    if dataset is not None:
        if dataset not in have:
            raise ValueError(f"dataset={dataset!r}: release {rel.name!r} has no main cell for it with backbone "
                             f"{backbone!r}; it has {have}")
        return dataset
    if not have:
        raise ValueError(f"release {rel.name!r} has no main cell for backbone {backbone!r}")
    return _paper_order(have, DATASETS)[0]


def pick_datasets(rel: Any, datasets: Sequence[str] | None = None, backbone: str | None = None,
                  design: Sequence[str] | None = None) -> list[str]:
    """The benchmarks a multi-cell notebook shows for ``backbone`` (None: every backbone).

    ``datasets`` given: those the release has, in the given order. None: the paper's benchmarks
    of this table (``design``) that the release has, then every benchmark of the release that the
    paper does not use at all (a release's own benchmark is never dropped); when that leaves none,
    every benchmark the release has. Without ``design``: every benchmark, the paper's order first.
    """
    from probeguard_core.paper import DATASETS

    have = _datasets_of(rel, backbone)
    if datasets is not None:
        return [d for d in dict.fromkeys(datasets) if d in have]
    if design is None:
        return _paper_order(have, DATASETS)
    chosen = [d for d in design if d in have] + [d for d in have if d not in DATASETS]
    return chosen or _paper_order(have, DATASETS)


def note(text: str, title: str = "Not in this release") -> Any:
    """A visible note (an admonition in the book) that replaces a table or figure whose inputs
    the release does not have, e.g. ``note("this release has no probe records for X; Table 6
    needs them")``."""
    import html

    from IPython.display import HTML

    text = text[:1].upper() + text[1:]
    return HTML(f'<div class="admonition note probeguard-missing"><p class="admonition-title">{html.escape(title)}</p>'
                f"<p>{html.escape(text)}</p></div>")


def placeholder_figure(text: str, figsize: tuple[float, float] = (6.0, 2.2)) -> Any:
    """A matplotlib figure that only says why the real one is absent (so its PNG/SVG exist)."""
    import textwrap

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    ax.axis("off")
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(text, 70)), ha="center", va="center", fontsize=10,
            transform=ax.transAxes, color="dimgray")
    return fig


def empty_table(columns: Sequence[str], numeric: Sequence[str] = ("value",)) -> pd.DataFrame:
    """An empty table with the given columns (``numeric`` ones float, the rest object), written in
    place of a table whose inputs the release lacks."""
    return pd.DataFrame({c: pd.Series(dtype=float if c in numeric else object) for c in columns})


#: How the notes name each artifact of a cell (DESIGN 2.1-2.4).
ARTIFACT_NAMES: dict[str, str] = {"logs": "execution logs", "probe": "probe records", "nli": "NLI records",
                                  "self_report": "self-reports"}


def absent_note(cells: Sequence[Any], needs: Mapping[str, str]) -> Any:
    """One visible :func:`note` listing, for each artifact kind of ``needs`` (``{"probe": "Table 6"}``),
    the cells of the release without it and what it is needed for; ``None`` when nothing is absent."""
    lines = []
    for kind, what in needs.items():
        lack = [c.label for c in cells if not c.has(kind)]
        if lack:
            lines.append(f"this release has no {ARTIFACT_NAMES.get(kind, kind)} for {', '.join(lack)} (needed for {what})")
    return note(". ".join(s[0].upper() + s[1:] for s in lines) + ".") if lines else None
