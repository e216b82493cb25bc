"""Table builders shared by the book's notebooks: one place per definition.

Every function here only arranges calls to the core (``features``, ``scoring``, ``baselines``,
``metrics``, ``certify``, ``probe``, ``rse``, ``claims``) into the long tables the notebooks
display and write; nothing is computed that the core already defines. Long tables use the key
columns of ``data/paper/reported.csv`` (``backbone, dataset, quantity, signal, arm, ...``) so
that :func:`probeguard_core.paper.beside_paper` can put the paper's value beside ours. The paper
reference (section, table, figure, equation) is on each function.

Sections: per-cell scores (§3.1-§3.2); discrimination (Tables 2, 3, 5; Figure 5); Figure 2 and
Figure 1; certification (§3.3, §4.4) and the Theorem 1 audit; the unanimous layer and Figure 3
(§4.3); Table 6 (Appendix G); Table 7 (Appendix H); hard vs soft RSE (§5.1); Table 8
(Appendix I); Appendix J; Appendix K; Appendix C; the what-if chapter; defaults and notes for
any release; and the display helpers (:func:`wide_beside`, :func:`long_beside`,
:func:`styled`), which format for reading only and never change a number written to a CSV.
"""

from __future__ import annotations

import hashlib
import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from probeguard_core import SEED
from probeguard_core import certify as C
from probeguard_core import metrics as M
from probeguard_core.baselines import signal_table
from probeguard_core.claims import CUES, MAX_CLAIMS, TAIL, extract_claims, split_sentences, strip_answer_tags
from probeguard_core.features import (
    converged,
    feature_table,
    first_round_agreement,
    is_correct,
    round_agreements,
    stratum,
)
from probeguard_core.paper import UNITS, beside_paper, display_label, format_beside
from probeguard_core.probe import probe_table
from probeguard_core.rse import hard_se_score, hard_semantic_entropy, rationale_semantic_entropy
from probeguard_core.scoring import (
    drop_family_ablation,
    process_score,
    stratum_scores,
    unanimous_layer_score,
    zscore,
)

ArrayLikeF = Sequence[float] | NDArray[Any] | pd.Series

__all__ = [
    "ALWAYS_AVAILABLE",
    "ARTIFACT_NAMES",
    "CONTROL_ARMS",
    "FIGURE1_COLUMNS",
    "LAYER_SIGNALS",
    "LAYER_TABLE_SIGNALS",
    "TABLE2_SIGNALS",
    "ablation_table",
    "absent_note",
    "agreement_by_round",
    "beside_sources",
    "case_details",
    "cell_scores",
    "certification_arms",
    "certification_inputs",
    "certification_long",
    "check_entry",
    "claim_examples",
    "claim_rule_summary",
    "concluding_round_table",
    "cost_table",
    "discrimination",
    "empty_table",
    "explain_claims",
    "figure1_cases",
    "flip_rates",
    "hard_soft_scores",
    "hard_soft_table",
    "layer_discrimination",
    "layer_scores",
    "long_beside",
    "note",
    "pick_backbone",
    "pick_backbones",
    "pick_dataset",
    "pick_datasets",
    "placeholder_figure",
    "probe_arm_table",
    "release_layer_certificate",
    "risk_coverage_curves",
    "specialty_breakdown",
    "styled",
    "theorem1_resampled",
    "theorem1_synthetic",
    "uncertifiable",
    "unanimous_layer_table",
    "violation_upper_bound",
    "whatif_coverage",
    "wide_beside",
]

#: Signals reported inside the unanimous layer in §4.3, in the paper's order of mention.
LAYER_TABLE_SIGNALS: tuple[str, ...] = (
    "rse", "keep_rate", "rse_keep", "sequence_logprob", "p_true", "verbalized_confidence", "rse_keep_logprob",
)
#: The control arms of Table 6 (Appendix G), in the table's row order.
CONTROL_ARMS: tuple[str, ...] = ("instruction_only", "irrelevant_docs", "neutral_instruction")


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


# --------------------------------------------------------------------------- shared per-cell pieces
def _s1_correct(cell: Any) -> dict[str, bool]:
    """``{qid: correct}`` over the cell's unanimous layer S1 (Eq. 2 strata, :func:`features.stratum`)."""
    return {log.qid: is_correct(log) for log in cell.logs if stratum(log) == "S1"}


def _rse_keep(sig: pd.DataFrame) -> NDArray[np.float64]:
    """``z(kappa) + z(RSE)`` standardized over the rows of ``sig`` in S1, NaN elsewhere
    (§3.2, :func:`scoring.unanimous_layer_score`; label-free)."""
    s1 = (sig["stratum"] == "S1").to_numpy()
    rk = np.full(len(sig), np.nan)
    if s1.any():
        rk[s1] = unanimous_layer_score(sig.loc[s1, "keep_rate"].to_numpy(), sig.loc[s1, "rse"].to_numpy())
    return rk


def _flip_rows(flipped: NDArray[Any], correct: NDArray[np.bool_], level: float) -> list[dict[str, Any]]:
    """Flip rate of wrong and of correct consensus (Figure 3, Table 6): one record per quantity
    ``flip_wrong`` / ``flip_right`` with ``k`` flipped of ``n``, ``value = k / n`` and the Wilson
    interval ``ci_low, ci_high`` (:func:`metrics.wilson_interval`)."""
    rows = []
    for quantity, mask in (("flip_wrong", ~correct), ("flip_right", correct)):
        k, n = int(flipped[mask].sum()), int(mask.sum())
        lo, hi = M.wilson_interval(k, n, level)
        rows.append({"quantity": quantity, "k": k, "n": n, "value": k / n if n else math.nan, "ci_low": lo, "ci_high": hi})
    return rows


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
    sig["rse_keep"] = _rse_keep(sig)
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
    over the logs, probe and NLI records of all of them together). Adds ``error``, ``a1``
    (first-round agreement, the certification control of §4.1) and ``cell`` (the cell's
    ``role``: main / augment) columns.

    One value per quantity (DESIGN 3, per dataset and per layer): ``score`` standardizes the
    unanimous-layer z-scores within each cell's own layer (its role), so the main layer's
    scores, and every certificate built on them (§4.4's plain arm, Table 8, the what-if page),
    are the same whether or not an augmentation pool is loaded beside it.
    ``score_augmented`` standardizes over the union of the layers of each dataset (main plus
    augmentation pool): the score of §4.4's augmented arm, which may extend the population."""
    logs, probe, nli, role = [], [], [], []
    for c in cells:
        logs += list(c.logs)
        probe += list(c.probe or [])
        nli += list(c.nli or [])
        role += [c.role] * len(c.logs)
    df = stratum_scores(logs, probe_records=probe, nli=nli, layers=role)
    df["score_augmented"] = stratum_scores(logs, probe_records=probe, nli=nli)["score"].to_numpy()
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
    rk = _rse_keep(sig)
    rkl = np.full(len(sig), np.nan)
    if s1.any():
        rkl[s1] = rk[s1] + zscore(sig.loc[s1, "sequence_logprob"].to_numpy())
    sig["rse_keep"] = rk
    sig["rse_keep_logprob"] = rkl
    return sig


def unanimous_layer_table(cells: Iterable[Any], signals: Sequence[str] = LAYER_TABLE_SIGNALS) -> pd.DataFrame:
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
        correct = _s1_correct(cell)
        pt = pt[pt.index.isin(list(correct))]
        ok = np.array([correct[q] for q in pt.index], dtype=bool)
        keep_auc = M.auroc(pt["kappa"].to_numpy(), ok) if len(pt) else math.nan
        for r in _flip_rows(pt["flipped"].to_numpy(), ok, level):
            rows.append({"backbone": cell.backbone, "dataset": cell.dataset, "arm": arm, "stratum": "S1", **r,
                         "keep_auroc": keep_auc})
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
    correct = _s1_correct(cell)
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
        for r in _flip_rows(t["flipped"].to_numpy(), ok, level):
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


# --------------------------------------------------------------------------- Table 7 (Appendix H)
def ablation_table(cell: Any, n_folds: int = 5, seed: int = SEED, gbt: bool = True,
                   scaled: bool = True) -> pd.DataFrame:
    """Table 7: AUROC of the out-of-fold process score with each feature family dropped, and
    the GBT swap (Appendix H; :func:`scoring.drop_family_ablation`, :func:`scoring.process_score`).

    Long format: ``backbone, dataset, signal (process_score), quantity (auroc), variant (``full``,
    ``without <family>``, ``gbt``, ``scaled logistic (ours)``), arm ('' for the paper's default
    l2 logistic regression, ``gbt_classifier`` for the swap, ``scaled_logistic`` for this
    project's earlier StandardScaler + ``max_iter=1000`` variant, not in the paper),
    dropped_family ('' = full score), n_features, value, not_converged_folds`` (folds whose
    lbfgs stopped at ``max_iter``; 0 for GBT).
    """
    from threadpoolctl import threadpool_limits

    logs = cell.logs
    X = feature_table(logs, nli=cell.nli)
    y = np.array([is_correct(log) for log in logs], dtype=bool)
    # Many small fits: BLAS / OpenMP thread pools only add contention here (one thread is
    # ~20x faster on a shared 2-core machine); results do not depend on the thread count.
    with threadpool_limits(limits=1):
        ab = drop_family_ablation(X, y, n_splits=n_folds, seed=seed)
        swaps = [(v, a, process_score(X, y, model=m, n_splits=n_folds, seed=seed))
                 for v, a, m, on in (("scaled logistic (ours)", "scaled_logistic", "logistic_scaled", scaled),
                                     ("gbt", "gbt_classifier", "gbt", gbt)) if on]
    base = {"backbone": cell.backbone, "dataset": cell.dataset, "signal": "process_score", "quantity": "auroc"}
    rows = [{**base, "variant": "full" if fam == "none" else f"without {fam}", "arm": "",
             "dropped_family": "" if fam == "none" else fam,
             "n_features": int(r.n_features), "value": float(r.auroc),
             "not_converged_folds": int(r.not_converged_folds)} for fam, r in ab.iterrows()]
    for variant, arm, p in swaps:
        rows.append({**base, "variant": variant, "arm": arm, "dropped_family": "", "n_features": X.shape[1],
                     "value": M.auroc(p.to_numpy(), y), "not_converged_folds": int(p.attrs["not_converged_folds"])})
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
    s1 = _s1_correct(cell)
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

    Scores and strata are :func:`certification_inputs` (S1: z(kappa) + z(RSE), S2:
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
    """Appendix K: the two cases of Figure 1 (:func:`figure1_cases`) with everything
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
    draws a MedQA-like unanimous layer of ``n_population`` questions from this project's
    simulator (``probeguard_core.simulate``, its MedQA parameters for ``backbone``), whatever
    release the book renders; its score is ``z(kappa) + z(RSE)`` (:func:`scoring.unanimous_layer_score`).
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


# --------------------------------------------------------------------------- display
# Display only: these format a table for reading (strings, labels, CSS classes for
# book/_static/custom.css). They never change what a notebook writes with ``Outputs.table``.

#: CSS class of every table these helpers render; ``probeguard-beside`` marks ours | paper | Δ tables.
TABLE_CLASS = "probeguard-table"
BESIDE_CLASS = "probeguard-beside"
#: The sub-columns of each number beside the paper, and the frame columns they come from.
BESIDE_SUBCOLUMNS: tuple[str, ...] = ("ours", "paper", "Δ")
_SUB_CLASS = {"ours": "pg-ours", "paper": "pg-paper", "Δ": "pg-diff"}


def _quantity_units() -> dict[str, str]:
    from probeguard_core.paper import load_reported

    rep = load_reported()
    return {str(q): str(u) for q, u in rep.groupby("quantity")["unit"].first().items()}


def _display_units(df: pd.DataFrame) -> pd.Series:
    """The unit each row is formatted with: its ``unit`` column, else the paper's unit of its
    ``quantity`` (:func:`paper.unit_of`), else '' (plain decimals)."""
    units = df["unit"].fillna("").astype(str) if "unit" in df.columns else pd.Series("", index=df.index, dtype=object)
    if "quantity" in df.columns:
        known = _quantity_units()
        units = units.where(units != "", df["quantity"].map(lambda q: known.get(str(q), "")))
    return units


def _plain(x: Any, integral: bool, decimals: int) -> str:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (int, np.integer)):
        return f"{int(x)}"
    if isinstance(x, (float, np.floating)):
        return f"{x:.0f}" if integral else f"{x:.{decimals}f}"
    return str(x)


def _format_column(col: pd.Series, unit: str | None, decimals: int, pct_decimals: int) -> list[str]:
    """One column as strings: ``unit`` given: as :func:`paper.format_beside` formats that unit;
    else counts as integers (a float column whose values are all whole numbers), other floats
    with ``decimals``, booleans as yes / no, missing as '–'."""
    if unit in UNITS:
        return format_beside(pd.DataFrame({"value": col}), unit=unit, decimals=decimals,
                             pct_decimals=pct_decimals)["value"].tolist()
    integral = False
    if pd.api.types.is_float_dtype(col) and col.notna().any():
        vals = col.dropna().to_numpy(dtype=float)
        integral = bool(np.all(np.isfinite(vals)) and np.all(np.mod(vals, 1) == 0))
    return [_plain(x, integral, decimals) for x in col]


def _uuid(frame: pd.DataFrame) -> str:
    """A table id derived from its content, so the executed notebook's HTML is reproducible."""
    return "pg" + hashlib.sha1(frame.to_csv().encode("utf-8")).hexdigest()[:10]


def _style(frame: pd.DataFrame, classes: pd.DataFrame | None, extra_class: str = "", hide_index: bool = False) -> Any:
    sty = frame.style
    sty.set_uuid(_uuid(frame))
    sty.set_table_attributes(f'class="{" ".join(filter(None, (TABLE_CLASS, extra_class)))}"')
    if classes is not None:
        sty.set_td_classes(classes)
    if hide_index:
        sty.hide(axis="index")
    else:
        sty.hide(axis="index", names=True)
    return sty


def _nested_order(keys: pd.DataFrame, cols: list[str]) -> list[tuple[Any, ...]]:
    """The distinct key tuples of ``cols``, ordered level by level by first appearance (so that
    equal outer labels sit together and their headers merge)."""
    rank = {c: {v: i for i, v in enumerate(dict.fromkeys(keys[c]))} for c in cols}
    distinct = dict.fromkeys(tuple(r) for r in keys[cols].itertuples(index=False))
    return sorted(distinct, key=lambda t: tuple(rank[c][v] for c, v in zip(cols, t)))


def wide_beside(df: pd.DataFrame, index: Sequence[str], columns: Sequence[str], value_col: str = "value", *,
                decimals: int = 3, pct_decimals: int = 1) -> Any:
    """A :func:`paper.beside_paper` frame as a wide table for reading: rows ``index``, column
    groups ``columns``, and under each group three sub-columns ``ours | paper | Δ``.

    Numbers are formatted by their unit (the ``unit`` column, else the paper's unit of the
    row's ``quantity``): AUROC / AURC with ``decimals`` decimals, fractions as percentages with
    differences in percentage points, counts as integers, missing as '–' (also where the paper
    reports nothing). Key values read as labels (:func:`paper.display_label`). Returns a pandas
    ``Styler`` whose table has the CSS classes ``probeguard-table probeguard-beside`` and whose
    cells are ``pg-ours`` / ``pg-paper`` / ``pg-diff``. For display only: the CSVs stay long.
    Raises ``ValueError`` when two rows share the same ``index`` + ``columns`` keys (a cell
    would silently hide one of them).
    """
    index, columns = list(index), list(columns)
    if not columns:
        raise ValueError("wide_beside: columns must name at least one column")
    for c in (*index, *columns, value_col, "paper", "diff"):
        if c not in df.columns:
            raise ValueError(f"wide_beside: {c!r} is not a column of the table: {list(df.columns)}")
    dup = df.duplicated(index + columns, keep=False)
    if dup.any():
        raise ValueError(f"wide_beside: {int(dup.sum())} rows share their {index + columns} keys, e.g. "
                         f"{df.loc[dup, index + columns].head(2).to_dict('records')}; select them apart first")
    if df.empty:  # a release without these inputs: an empty table with the header, beside its note
        return _style(pd.DataFrame(columns=[*index, *columns, *BESIDE_SUBCOLUMNS]), None, BESIDE_CLASS, hide_index=True)
    shown = format_beside(df.assign(unit=_display_units(df)), value_col, decimals=decimals, pct_decimals=pct_decimals)
    keys = pd.DataFrame({c: [display_label(c, v) for v in df[c]] for c in index + columns}, index=df.index)
    src = {"ours": value_col, "paper": "paper", "Δ": "diff"}
    cells = pd.concat([keys, shown[[value_col, "paper", "diff"]].rename(columns={value_col: "_ours"})], axis=1)
    groups = _nested_order(keys, columns)
    rows = _nested_order(keys, index) if index else [()]
    lookup = {(tuple(r[:len(index)]), tuple(r[len(index):len(index) + len(columns)])): r[len(index) + len(columns):]
              for r in cells.itertuples(index=False)}
    data: dict[tuple[Any, ...], list[str]] = {}
    for g in groups:
        for sub in BESIDE_SUBCOLUMNS:
            pos = ("_ours", "paper", "diff").index(src[sub] if sub != "ours" else "_ours")
            data[(*g, sub)] = [lookup[(r, g)][pos] if (r, g) in lookup else "–" for r in rows]
    row_index = (pd.MultiIndex.from_tuples(rows, names=index) if len(index) > 1
                 else pd.Index([r[0] for r in rows], name=index[0]) if index else pd.RangeIndex(1))
    wide = pd.DataFrame(data, index=row_index)
    wide.columns = pd.MultiIndex.from_tuples(list(data), names=[None] * (len(columns) + 1))
    classes = pd.DataFrame([[_SUB_CLASS[c[-1]] for c in wide.columns]] * len(wide), index=wide.index, columns=wide.columns)
    sty = _style(wide, classes, BESIDE_CLASS, hide_index=not index)
    sty.map_index(lambda v: "" if v == "ours" else "opacity: 0.65; font-weight: normal;", axis="columns",
                  level=len(columns))
    return sty


def long_beside(df: pd.DataFrame, keys: Sequence[str], extra: Sequence[str] = (), value_col: str = "value", *,
                extra_units: Mapping[str, str] | None = None, decimals: int = 3, pct_decimals: int = 1) -> Any:
    """A :func:`paper.beside_paper` frame as a long table for reading: the ``keys`` columns
    (as labels), then ``ours | paper | Δ`` formatted by unit (as :func:`wide_beside`), then the
    ``extra`` columns (``extra_units`` names the unit of any of them, e.g. ``{"ci_low":
    "fraction"}``; otherwise counts as integers, other numbers with ``decimals``). Returns a
    ``Styler`` (classes as :func:`wide_beside`); for display only."""
    keys, extra = list(keys), list(extra)
    for c in (*keys, *extra, value_col, "paper", "diff"):
        if c not in df.columns:
            raise ValueError(f"long_beside: {c!r} is not a column of the table: {list(df.columns)}")
    units = extra_units or {}
    shown = format_beside(df.assign(unit=_display_units(df)), value_col, decimals=decimals, pct_decimals=pct_decimals)
    out = pd.DataFrame({c: [display_label(c, v) for v in df[c]] for c in keys}, index=df.index)
    out["ours"], out["paper"], out["Δ"] = shown[value_col], shown["paper"], shown["diff"]
    for c in extra:
        out[c] = _format_column(df[c], units.get(c), decimals, pct_decimals)
    out = out.reset_index(drop=True)
    cls = {**{c: "pg-key" for c in keys}, **{s: _SUB_CLASS[s] for s in BESIDE_SUBCOLUMNS}, **{c: "pg-extra" for c in extra}}
    classes = pd.DataFrame([[cls[c] for c in out.columns]] * len(out), columns=out.columns)
    sty = _style(out, classes, BESIDE_CLASS, hide_index=True)
    sty.map_index(lambda v: "opacity: 0.65; font-weight: normal;" if v in ("paper", "Δ") else "", axis="columns")
    return sty


def styled(df: pd.DataFrame, *, units: str | Mapping[str, str] | None = None,
           row_units: Sequence[str] | pd.Series | None = None, labels: bool = True, index: bool = True,
           decimals: int = 3, pct_decimals: int = 1) -> Any:
    """Any table of ours for reading, in the book's table style (class ``probeguard-table``).

    ``units`` names the unit of columns to format by unit (a mapping such as
    ``{"coverage_mean": "fraction"}`` shows percentages; a single unit applies to every non-key
    column); ``row_units`` gives one unit per row for the ``value`` column of a long table with
    mixed quantities. Other float columns whose values are all whole numbers show as integers,
    other numbers with ``decimals``; booleans as yes / no; missing as '–'. Key columns and index
    levels (backbone, dataset, signal, arm, quantity, alpha) read as labels when ``labels``.
    Returns a ``Styler``; for display only."""
    if row_units is not None and len(row_units) != len(df):
        raise ValueError(f"styled: row_units has {len(row_units)} entries for {len(df)} rows")
    if row_units is not None and "value" not in df.columns:
        raise ValueError("styled: row_units needs a 'value' column")

    def unit_of_column(c: Any) -> str | None:
        if isinstance(units, str):
            return units
        return (units or {}).get(c) if isinstance(c, str) else None

    cols: dict[int, list[str]] = {}
    for i, c in enumerate(df.columns):
        col = df.iloc[:, i]
        if labels and c in _KEY_LABELLED:
            cols[i] = [display_label(c, v) for v in col]
        elif c == "value" and row_units is not None:
            cols[i] = [_format_column(pd.Series([v]), u or None, decimals, pct_decimals)[0] for v, u in zip(col, row_units)]
        else:
            cols[i] = _format_column(col, unit_of_column(c), decimals, pct_decimals)
    out = pd.DataFrame(cols, index=df.index)
    out.columns = df.columns
    if labels and index:
        names = list(df.index.names)
        if isinstance(df.index, pd.MultiIndex):
            out.index = pd.MultiIndex.from_tuples(
                [tuple(display_label(n, v) if n in _KEY_LABELLED else v for n, v in zip(names, t)) for t in df.index],
                names=names)
        elif names[0] in _KEY_LABELLED:
            out.index = pd.Index([display_label(names[0], v) for v in df.index], name=names[0])
    if labels and isinstance(df.columns, pd.Index) and not isinstance(df.columns, pd.MultiIndex) \
            and df.columns.name in _KEY_LABELLED:
        out.columns = pd.Index([display_label(df.columns.name, v) for v in df.columns], name=df.columns.name)
    sty = out.style
    sty.set_uuid(_uuid(out))
    sty.set_table_attributes(f'class="{TABLE_CLASS}"')
    if not index:
        sty.hide(axis="index")
    return sty


#: Columns whose values :func:`styled` shows as labels (:func:`paper.display_label`).
_KEY_LABELLED: frozenset[str] = frozenset({"backbone", "dataset", "signal", "arm", "quantity", "alpha"})
