"""Consensus-process features (paper section 3.1, Eqs. 2 and 7-11, Appendix B; DESIGN section 3).

Two layers:

* Per-log functions, the readable reference definitions of DESIGN 4
  (:func:`first_round_agreement`, :func:`trajectory_agreement`, :func:`majority_flips`, ...).
* :func:`feature_table`, which builds every feature of the registry
  ``probeguard_core/data/features.yaml`` (34 features, five families) for many logs at once:
  the per-round base quantities are computed once as ``(question, round)`` arrays and the
  registry's aggregations (first / last / mean / slope / max) are vectorized over them.
  :func:`probeguard_core.feature_reference.feature_table_reference` computes the same table
  with a plain per-question Python loop over the per-log functions; the tests and
  ``benchmarks/feature_table_throughput.py`` compare the two.

Conventions fixed by DESIGN 3:

* ``s_t(a)`` is the share of round t's N candidates answering option a.  A null answer
  (no parseable answer) counts in N but is never an option: it lowers every share.
* ``m_t`` is the modal answer of round t, ties broken by the alphabetically first option
  key.  A round where every answer is null has no modal answer: ``m_t = None`` (DESIGN 3),
  the same as :func:`probeguard_core.logs.modal_answer`; its agreement ``s_t(m_t)`` is 0 and
  Eq. 8 compares None as a value (a move from or to None is a flip).
* Entropy ``H_t`` (Eq. 11) sums over the options only; the null share is *not* a term
  (it is not an answer), so nulls lower H.  Natural log; ``0 ln 0 = 0``.  (With nulls the
  shares sum to less than 1, so on two-option questions H can slightly exceed ln 2; the
  bound is max(ln K, K/e).)  The terms ``s ln s`` are summed in one canonical order
  (ascending value, left to right), so two rounds with the same multiset of shares have
  bit-equal entropies whichever options carry them, in both the per-log and the vectorized
  code (no tie in AUROC or risk-coverage is split by rounding).
* The Jensen-Shannon divergence between adjacent rounds compares full probability vectors
  ``(s_t(A), ..., s_t(K), null share)``, so a move to or from "no answer" is a change.
* Undefined values are NaN, never 0: slopes need two rounds, ``rho_t`` needs t >= 2 and
  ``|D_t| > 0``, the rationale family needs an NLI record, and retrieval totals need at
  least one retrieval record.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import yaml

from probeguard_core.jsonl import gc_paused
from probeguard_core.logs import NLIRecord, QuestionLog, Round
from probeguard_core.rse import hard_semantic_entropy, nli_scores, rationale_semantic_entropy

__all__ = [
    "AGGREGATIONS",
    "FAMILIES",
    "FeatureSpec",
    "answer_entropies",
    "answer_shares",
    "canonical_sum",
    "converged",
    "doc_repeat_rates",
    "feature_table",
    "final_answer",
    "first_round_agreement",
    "is_correct",
    "js_divergences",
    "load_registry",
    "majority_flips",
    "minority_persistence",
    "minority_shares",
    "n_minority_options",
    "modal_answer",
    "modal_answers",
    "round_agreement",
    "round_agreements",
    "stratum",
    "terminal_agreement",
    "trajectory_agreement",
]

FAMILIES = ("agreement", "distribution", "minority", "rationale", "retrieval")
AGGREGATIONS = ("first", "last", "mean", "slope", "max", "special")
#: Per-round series a non-special registry entry may aggregate.
SERIES = ("agreement", "entropy", "js", "minority_share", "rse", "hard_se", "doc_repeat", "docs", "queries")
#: Tolerance of "H does not increase" (identical distributions give identical entropies).
H_TOL = 1e-12
#: Code of "no modal answer" (an all-null round) in the vectorized modal array (-1 = no round).
NO_MODAL = -2
_REQUIRED_KEYS = ("name", "family", "base", "aggregation", "formula", "missing")

Stratum = Literal["S1", "S2", "S3"]


# ============================================================================================
# Per-log reference definitions (DESIGN 4)
# ============================================================================================

def _option_keys(log: QuestionLog) -> list[str]:
    return sorted(log.options)


def answer_shares(log: QuestionLog, rnd: Round) -> dict[str, float]:
    """s_t(a) for every option key a (sorted): votes for a divided by N (nulls count in N)."""
    n = log.n_candidates
    counts = dict.fromkeys(_option_keys(log), 0)
    for cand in rnd.candidates:
        if cand.answer is not None:
            counts[cand.answer] += 1
    return {a: c / n for a, c in counts.items()}


def modal_answer(shares: Mapping[str, float]) -> str | None:
    """m_t = argmax_a s_t(a), ties -> alphabetically first option key; None when every share is 0
    (all answers null: no modal answer, DESIGN 3)."""
    keys = sorted(shares)
    if not keys or max(shares.values()) <= 0:
        return None
    return max(keys, key=lambda a: shares[a])  # max() keeps the first of equal maxima


def modal_answers(log: QuestionLog) -> list[str | None]:
    """m_t for t = 1..T_stop."""
    return [modal_answer(answer_shares(log, r)) for r in log.rounds]


def round_agreement(log: QuestionLog, rnd: Round) -> float:
    """s_t(m_t) of one round: the modal answer's share, 0 when every answer is null."""
    s = answer_shares(log, rnd)
    m = modal_answer(s)
    return 0.0 if m is None else s[m]


def round_agreements(log: QuestionLog) -> list[float]:
    """s_t(m_t) for t = 1..T_stop (the agreement series of Eqs. 2 and 7)."""
    return [round_agreement(log, r) for r in log.rounds]


def first_round_agreement(log: QuestionLog) -> float:
    """a_1 = s_1(m_1)  (Eq. 2)."""
    return round_agreement(log, log.rounds[0])


def terminal_agreement(log: QuestionLog) -> float:
    """s_{T_stop}(m_{T_stop}): agreement of the last logged round (section 3.1)."""
    return round_agreements(log)[-1]


def trajectory_agreement(log: QuestionLog) -> float:
    """a-bar = (1/T_stop) sum_t s_t(m_t)  (Eq. 7)."""
    a = round_agreements(log)
    return sum(a) / len(a)


def majority_flips(log: QuestionLog) -> int:
    """n_flip = |{t < T_stop : m_{t+1} != m_t}|  (Eq. 8)."""
    m = modal_answers(log)
    return sum(1 for t in range(len(m) - 1) if m[t + 1] != m[t])


def final_answer(log: QuestionLog) -> str | None:
    """The unique plurality answer of the last round; a tie for the top or all-null -> None (DESIGN 3)."""
    s = answer_shares(log, log.rounds[-1])
    top = max(s.values())
    if top == 0:
        return None
    winners = [a for a, v in s.items() if v == top]
    return winners[0] if len(winners) == 1 else None


def is_correct(log: QuestionLog) -> bool:
    """correct = (final answer == gold); no final answer counts as an error (DESIGN 3)."""
    f = final_answer(log)
    return f is not None and f == log.gold


def converged(log: QuestionLog) -> bool:
    """The last round is unanimous on one non-null answer (DESIGN 3)."""
    answers = {c.answer for c in log.rounds[-1].candidates}
    return len(answers) == 1 and None not in answers


def stratum(log: QuestionLog) -> Stratum:
    """S1: first round unanimous (a_1 = 1); S2: a_1 < 1 and converged; S3: not converged (DESIGN 3)."""
    if first_round_agreement(log) == 1.0:
        return "S1"
    return "S2" if converged(log) else "S3"


def _reference_answer(log: QuestionLog) -> str | None:
    """m*: the final answer, or the last round's modal answer when there is none (DESIGN 3);
    None when the last round is all null (then every option with a supporter is a minority)."""
    f = final_answer(log)
    return f if f is not None else modal_answers(log)[-1]


def _support_rounds(log: QuestionLog) -> dict[str, int]:
    """For each option a: number of rounds with s_t(a) >= 1/N (at least one supporter)."""
    counts = dict.fromkeys(_option_keys(log), 0)
    for r in log.rounds:
        for a in {c.answer for c in r.candidates if c.answer is not None}:
            counts[a] += 1
    return counts


def minority_persistence(log: QuestionLog) -> float:
    """pi = max_{a != m*} |{t : s_t(a) >= 1/N}| / T_stop  (Eq. 9, DESIGN 3).

    0 when no option other than m* ever has a supporter.
    """
    mstar = _reference_answer(log)
    rounds = [n for a, n in _support_rounds(log).items() if a != mstar]
    return max(rounds, default=0) / len(log.rounds)


def n_minority_options(log: QuestionLog) -> int:
    """Number of distinct options other than m* that have a supporter in some round."""
    mstar = _reference_answer(log)
    return sum(1 for a, n in _support_rounds(log).items() if a != mstar and n > 0)


def minority_shares(log: QuestionLog) -> list[float]:
    """q_t = sum of s_t(a) over options a != m_t (non-null votes off the round's mode)."""
    out = []
    for r in log.rounds:
        s = answer_shares(log, r)
        m = modal_answer(s)
        out.append(sum(v for a, v in s.items() if a != m))
    return out


def answer_entropies(log: QuestionLog) -> list[float]:
    """H_t = -sum_a s_t(a) ln s_t(a) over options a, t = 1..T_stop  (Eq. 11).

    Null answers count in N (so they lower the shares) but are not a term of the sum.
    """
    out = []
    for r in log.rounds:
        out.append(-canonical_sum([v * math.log(v) for v in answer_shares(log, r).values() if v > 0]) + 0.0)
    return out


def canonical_sum(terms: Iterable[float]) -> float:
    """Sum of ``terms`` in one canonical order: ascending value, accumulated left to right.

    The result depends only on the multiset of terms, never on the order they arrive in
    (the order of the options carrying them); :func:`feature_table` sums the same way.
    """
    total = 0.0
    for x in sorted(terms):
        total += x
    return total


def _distribution(log: QuestionLog, rnd: Round) -> list[float]:
    s = answer_shares(log, rnd)
    nulls = sum(1 for c in rnd.candidates if c.answer is None) / log.n_candidates
    return [*s.values(), nulls]


def _js(p: Sequence[float], q: Sequence[float]) -> float:
    """Jensen-Shannon divergence, natural log (0 <= JS <= ln 2)."""
    total = 0.0
    for pi, qi in zip(p, q, strict=True):
        mi = 0.5 * (pi + qi)
        if pi > 0:
            total += 0.5 * pi * math.log(pi / mi)
        if qi > 0:
            total += 0.5 * qi * math.log(qi / mi)
    return total


def js_divergences(log: QuestionLog) -> list[float]:
    """JS(p_{t-1}, p_t) for t = 1..T_stop (NaN at t = 1); p_t includes the null share."""
    d = [_distribution(log, r) for r in log.rounds]
    return [math.nan] + [_js(d[t - 1], d[t]) for t in range(1, len(d))]


def _doc_sets(log: QuestionLog) -> list[set[str] | None]:
    return [None if r.retrieval is None else set(r.retrieval.doc_ids) for r in log.rounds]


def doc_repeat_rates(log: QuestionLog) -> list[float]:
    """rho_t = |D_t ∩ ∪_{t'<t} D_t'| / |D_t| for t = 1..T_stop  (Eq. 10).

    NaN at t = 1, where retrieval is null, or where |D_t| = 0 (DESIGN 3).  A null earlier
    retrieval contributes no documents to the union.
    """
    sets = _doc_sets(log)
    seen: set[str] = set()
    out: list[float] = []
    for t, d in enumerate(sets, start=1):
        if t >= 2 and d:
            out.append(len(d & seen) / len(d))
        else:
            out.append(math.nan)
        if d:
            seen |= d
    return out


def _retrieval_totals(log: QuestionLog) -> tuple[float, float]:
    """(sum |D_t|, sum |queries_t|) over rounds with a retrieval record; NaN if none has one."""
    recs = [r.retrieval for r in log.rounds if r.retrieval is not None]
    if not recs:
        return math.nan, math.nan
    return float(sum(len(set(x.doc_ids)) for x in recs)), float(sum(len(x.queries) for x in recs))


def _h_frac_nonincreasing(h: Sequence[float]) -> float:
    if len(h) < 2:
        return math.nan
    return sum(1 for t in range(len(h) - 1) if h[t + 1] <= h[t] + H_TOL) / (len(h) - 1)


# ============================================================================================
# Registry
# ============================================================================================

@dataclass(frozen=True)
class FeatureSpec:
    """One registry entry (Appendix B): a base quantity and its aggregation."""

    name: str
    family: str
    base: str
    aggregation: str
    formula: str
    missing: str


def _default_registry_path() -> Path:
    return Path(str(resources.files("probeguard_core") / "data" / "features.yaml"))


def load_registry(path: str | Path | None = None) -> tuple[FeatureSpec, ...]:
    """Load and validate the feature registry (default: the shipped ``data/features.yaml``).

    Raises ValueError naming the file, the entry and the field for: a missing or unknown
    key, an unknown family or aggregation, an unknown base series, a special feature with
    no implementation, or a duplicate name.
    """
    p = Path(path) if path is not None else _default_registry_path()
    return _load_registry_cached(str(p.resolve()), p.stat().st_mtime_ns)


@lru_cache(maxsize=8)
def _load_registry_cached(path: str, _mtime: int) -> tuple[FeatureSpec, ...]:
    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    if not isinstance(doc, dict) or not isinstance(doc.get("features"), list) or not doc["features"]:
        raise ValueError(f"{path}: features: expected a non-empty list of feature entries")
    specs: list[FeatureSpec] = []
    seen: set[str] = set()
    for i, entry in enumerate(doc["features"]):
        where = f"{path}: features[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected a mapping, got {type(entry).__name__}")
        where = f"{where} ({entry.get('name', '?')})"
        for key in _REQUIRED_KEYS:
            if key not in entry:
                raise ValueError(f"{where}: {key}: missing required field")
            if not isinstance(entry[key], str) or not entry[key].strip():
                raise ValueError(f"{where}: {key}: expected a non-empty string, got {entry[key]!r}")
        extra = set(entry) - set(_REQUIRED_KEYS)
        if extra:
            raise ValueError(f"{where}: {sorted(extra)[0]}: unknown field")
        spec = FeatureSpec(**{k: entry[k] for k in _REQUIRED_KEYS})
        if spec.family not in FAMILIES:
            raise ValueError(f"{where}: family: {spec.family!r} is not one of {list(FAMILIES)}")
        if spec.aggregation not in AGGREGATIONS:
            raise ValueError(f"{where}: aggregation: {spec.aggregation!r} is not one of {list(AGGREGATIONS)}")
        if spec.aggregation == "special":
            if spec.name not in _SPECIAL:
                raise ValueError(f"{where}: name: no implementation for special feature {spec.name!r}")
        elif spec.base not in SERIES:
            raise ValueError(f"{where}: base: {spec.base!r} is not a per-round series {list(SERIES)}")
        if spec.name in seen:
            raise ValueError(f"{where}: name: duplicate feature name {spec.name!r}")
        seen.add(spec.name)
        specs.append(spec)
    return tuple(specs)


# ============================================================================================
# Vectorized base quantities
# ============================================================================================

@dataclass
class _Base:
    """Per-round base quantities as (Q, Tmax) arrays (NaN outside a question's rounds)."""

    qids: list[str]
    T: np.ndarray  # (Q,) T_stop
    N: np.ndarray  # (Q,)
    counts: np.ndarray  # (Q, Tmax, K) votes per option letter
    valid: np.ndarray  # (Q, Tmax) round exists
    modal: np.ndarray  # (Q, Tmax) option index, -1 outside rounds
    final: np.ndarray  # (Q,) option index or -1
    mstar: np.ndarray  # (Q,) final answer or last modal
    gold: np.ndarray  # (Q,)
    series: dict[str, np.ndarray]  # name -> (Q, Tmax) float


def _nli_index(nli: Iterable[NLIRecord] | Mapping[tuple[str, int], NLIRecord] | None) -> dict[tuple[str, int], NLIRecord]:
    if nli is None:
        return {}
    if isinstance(nli, Mapping):
        items = list(nli.values())
    else:
        items = list(nli)
    out: dict[tuple[str, int], NLIRecord] = {}
    for rec in items:
        key = (rec.qid, rec.round)
        if key in out:
            raise ValueError(f"nli: duplicate record for qid={rec.qid!r} round={rec.round}")
        out[key] = rec
    return out


def _nli_for(logs: Sequence[QuestionLog], nli: Any) -> dict[str, dict[int, tuple[float, float]]]:
    """qid -> round -> (RSE_t, SE_t).  Records for qids absent from ``logs`` are ignored
    (an NLI cache may cover a larger pool); a record for a known qid must match its dataset,
    backbone and a logged round.

    The scores are computed in one batch (:func:`rse.nli_scores`); when any record is bad the
    per-record loop runs instead, so the first bad record is named exactly as before."""
    index = _nli_index(nli)
    if not index:
        return {}
    by_qid = {log.qid: log for log in logs}
    known = [(qid, t, rec) for (qid, t), rec in index.items() if qid in by_qid]
    for qid, t, rec in known:
        log = by_qid[qid]
        if rec.dataset != log.dataset or rec.backbone != log.backbone or t > len(log.rounds):
            return _nli_for_loop(known, by_qid)
    try:
        rse, hse = nli_scores([rec.entailment for _, _, rec in known])
    except ValueError:
        return _nli_for_loop(known, by_qid)
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for (qid, t, _), r_val, h_val in zip(known, rse.tolist(), hse.tolist()):
        out.setdefault(qid, {})[t] = (r_val, h_val)
    return out


def _nli_for_loop(known: list[tuple[str, int, NLIRecord]], by_qid: Mapping[str, QuestionLog]) -> dict[str, dict[int, tuple[float, float]]]:
    """The per-record form of :func:`_nli_for` (names the first bad record)."""
    out: dict[str, dict[int, tuple[float, float]]] = {}
    for qid, t, rec in known:
        log = by_qid[qid]
        if rec.dataset != log.dataset or rec.backbone != log.backbone:
            raise ValueError(
                f"nli: record qid={qid!r} round={t} is for {rec.dataset}/{rec.backbone}, "
                f"the log is {log.dataset}/{log.backbone}"
            )
        if t > len(log.rounds):
            raise ValueError(f"nli: record qid={qid!r} round={t} but the log has {len(log.rounds)} rounds")
        try:
            vals = (rationale_semantic_entropy(rec.entailment), hard_semantic_entropy(rec.entailment))
        except ValueError as exc:
            raise ValueError(f"nli: record qid={qid!r} round={t}: {exc}") from None
        out.setdefault(qid, {})[t] = vals
    return out


def _check_unique(logs: Sequence[QuestionLog]) -> None:
    seen: set[str] = set()
    for i, log in enumerate(logs):
        if not isinstance(log, QuestionLog):
            raise ValueError(f"logs[{i}]: expected a QuestionLog, got {type(log).__name__}")
        if log.qid in seen:
            raise ValueError(f"logs[{i}]: duplicate qid {log.qid!r}")
        seen.add(log.qid)


def _build_base(logs: Sequence[QuestionLog], nli: Any = None) -> _Base:
    """Collect every per-round base quantity once; heavy arithmetic is numpy over (Q, Tmax, K)."""
    _check_unique(logs)
    Q = len(logs)
    qids = [log.qid for log in logs]
    T = np.fromiter((len(log.rounds) for log in logs), dtype=np.int64, count=Q)
    N = np.fromiter((log.n_candidates for log in logs), dtype=np.int64, count=Q)
    Tmax = int(T.max()) if Q else 1
    letters = {k for log in logs for k in log.options} if Q else {"A"}
    K = max(ord(k) - 64 for k in letters)
    lut: dict[str | None, int] = {chr(65 + k): k for k in range(K)}
    lut[None] = -1

    # option mask (Q, K): which letters are options of each question (few distinct patterns)
    patterns: dict[tuple[str, ...], int] = {}
    pattern_id = np.fromiter(
        (patterns.setdefault(tuple(log.options), len(patterns)) for log in logs), dtype=np.int64, count=Q
    )
    pattern_rows = np.zeros((len(patterns), K), dtype=bool)
    for keys, pid in patterns.items():
        pattern_rows[pid, [ord(k) - 65 for k in keys]] = True
    optmask = pattern_rows[pattern_id]
    gold = np.fromiter((ord(log.gold) - 65 for log in logs), dtype=np.int64, count=Q)

    # flatten all answers: one Python pass over candidates, then bincount
    answers: list[str | None] = []
    extend = answers.extend
    round_sizes: list[int] = []
    size = round_sizes.append
    retrievals: list[tuple[int, int, Any]] = []
    for qi, log in enumerate(logs):
        for ti, rnd in enumerate(log.rounds):
            cands = rnd.candidates
            extend([c.answer for c in cands])
            size(len(cands))
            if rnd.retrieval is not None:
                retrievals.append((qi, ti, rnd.retrieval))
    # retrieval dynamics (Eq. 10): set arithmetic per question, in round order
    docs = np.full((Q, Tmax), np.nan)
    queries = np.full((Q, Tmax), np.nan)
    rho = np.full((Q, Tmax), np.nan)
    if retrievals:
        r_q, r_t, r_docs, r_queries, r_rho = [], [], [], [], []
        last_q = -1
        seen: set[str] = set()
        for qi, ti, ret in retrievals:
            if qi != last_q:
                seen, last_q = set(), qi
            d = set(ret.doc_ids)
            r_q.append(qi)
            r_t.append(ti)
            r_docs.append(len(d))
            r_queries.append(len(ret.queries))
            r_rho.append(len(d & seen) / len(d) if d and ti >= 1 else math.nan)
            seen |= d
        docs[r_q, r_t] = r_docs
        queries[r_q, r_t] = r_queries
        rho[r_q, r_t] = r_rho
    # row (q * Tmax + t) of every round, in log order
    starts = np.repeat(np.cumsum(T) - T, T)
    round_rows = np.repeat(np.arange(Q, dtype=np.int64) * Tmax, T) + (np.arange(int(T.sum())) - starts)
    codes = np.array(list(map(lut.__getitem__, answers)), dtype=np.int64)
    rows = np.repeat(round_rows, np.asarray(round_sizes, dtype=np.int64))
    keep = codes >= 0
    counts = np.bincount(rows[keep] * K + codes[keep], minlength=Q * Tmax * K).reshape(Q, Tmax, K)
    nulls = np.bincount(rows[~keep], minlength=Q * Tmax).reshape(Q, Tmax)

    valid = np.arange(Tmax)[None, :] < T[:, None]
    Nf = N[:, None].astype(float)
    shares = counts / Nf[:, :, None]
    null_share = nulls / Nf

    # modal answer: argmax over option letters only; np.argmax keeps the first (alphabetical) max;
    # an all-null round has none (NO_MODAL, DESIGN 3): agreement 0, and a flip where it changes
    masked = np.where(optmask[:, None, :], counts, -1)
    modal = masked.argmax(axis=2)
    top = np.take_along_axis(counts, modal[:, :, None], axis=2)[:, :, 0]
    agreement = np.where(valid, top / Nf, np.nan)
    minority = np.where(valid, shares.sum(axis=2) - top / Nf, np.nan)
    modal = np.where(valid, np.where(top > 0, modal, NO_MODAL), -1)

    with np.errstate(divide="ignore", invalid="ignore"):
        plogp = np.where(shares > 0, shares * np.log(np.where(shares > 0, shares, 1.0)), 0.0)
    # canonical order (as canonical_sum): sort the terms, then a strictly sequential sum
    # (cumsum, not numpy's pairwise sum); the zero terms of absent options change nothing.
    terms = np.sort(plogp, axis=2)
    h = np.cumsum(terms, axis=2)[:, :, -1] if K else np.zeros((Q, Tmax))
    entropy = np.where(valid, -h + 0.0, np.nan)

    # JS between adjacent rounds on (shares, null share)
    dist = np.concatenate([shares, null_share[:, :, None]], axis=2)
    js = np.full((Q, Tmax), np.nan)
    if Tmax > 1:
        p, q = dist[:, :-1, :], dist[:, 1:, :]
        m = 0.5 * (p + q)
        with np.errstate(divide="ignore", invalid="ignore"):
            tp = np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0) / np.where(m > 0, m, 1.0)), 0.0)
            tq = np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0) / np.where(m > 0, m, 1.0)), 0.0)
        js[:, 1:] = np.where(valid[:, 1:], 0.5 * tp.sum(axis=2) + 0.5 * tq.sum(axis=2), np.nan)

    # final answer = unique plurality of the last round
    last = counts[np.arange(Q), T - 1]  # (Q, K)
    last_top = last.max(axis=1) if K else np.zeros(Q, dtype=np.int64)
    n_top = (last == last_top[:, None]).sum(axis=1)
    final = np.where((last_top > 0) & (n_top == 1), last.argmax(axis=1), -1)
    mstar = np.where(final >= 0, final, modal[np.arange(Q), T - 1])  # NO_MODAL: no m*

    rse = np.full((Q, Tmax), np.nan)
    hse = np.full((Q, Tmax), np.nan)
    row_of = {q: i for i, q in enumerate(qids)}
    for qid, per_round in _nli_for(logs, nli).items():
        qi = row_of[qid]
        for t, (r_val, h_val) in per_round.items():
            rse[qi, t - 1] = r_val
            hse[qi, t - 1] = h_val

    series = {
        "agreement": agreement,
        "entropy": entropy,
        "js": js,
        "minority_share": minority,
        "rse": rse,
        "hard_se": hse,
        "doc_repeat": rho,
        "docs": docs,
        "queries": queries,
    }
    return _Base(qids, T, N, counts, valid, modal, final, mstar, gold, series)


# ---------------------------------------------------------------- vectorized aggregations

def _agg(x: np.ndarray, how: str) -> np.ndarray:
    """Aggregate each row of x over its defined (non-NaN) entries; NaN where none (or < 2 for slope)."""
    ok = ~np.isnan(x)
    n = ok.sum(axis=1)
    has = n > 0
    Q, Tm = x.shape
    rows = np.arange(Q)
    if how == "first":
        return np.where(has, x[rows, ok.argmax(axis=1)], np.nan)
    if how == "last":
        return np.where(has, x[rows, Tm - 1 - ok[:, ::-1].argmax(axis=1)], np.nan)
    x0 = np.where(ok, x, 0.0)
    if how == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(has, x0.sum(axis=1) / n, np.nan)
    if how == "max":
        return np.where(has, np.where(ok, x, -np.inf).max(axis=1), np.nan)
    if how == "slope":
        t = np.broadcast_to(np.arange(1, Tm + 1, dtype=float), x.shape)
        with np.errstate(invalid="ignore", divide="ignore"):
            tbar = np.where(ok, t, 0.0).sum(axis=1) / n
            ybar = x0.sum(axis=1) / n
            dt = np.where(ok, t - tbar[:, None], 0.0)
            dy = np.where(ok, x - ybar[:, None], 0.0)
            slope = (dt * dy).sum(axis=1) / (dt * dt).sum(axis=1)
        return np.where(n >= 2, slope + 0.0, np.nan)
    raise ValueError(f"unknown aggregation {how!r}")


def _special_n_flip(b: _Base) -> np.ndarray:
    if b.modal.shape[1] < 2:
        return np.zeros(len(b.T))
    both = b.valid[:, 1:]
    return ((b.modal[:, 1:] != b.modal[:, :-1]) & both).sum(axis=1).astype(float)


def _support(b: _Base) -> tuple[np.ndarray, np.ndarray]:
    """(rounds with >= 1 supporter per option letter with m* zeroed, T) for Eq. 9."""
    sup = ((b.counts >= 1) & b.valid[:, :, None]).sum(axis=1)  # (Q, K)
    has = b.mstar >= 0  # without m* (all-null last round) every option is a minority
    if sup.shape[1]:
        sup[np.arange(len(b.T))[has], b.mstar[has]] = 0
    return sup, b.T


def _special_minority_persistence(b: _Base) -> np.ndarray:
    sup, T = _support(b)
    return sup.max(axis=1, initial=0) / T


def _special_n_minority_options(b: _Base) -> np.ndarray:
    sup, _ = _support(b)
    return (sup > 0).sum(axis=1).astype(float)


def _special_h_frac(b: _Base) -> np.ndarray:
    h = b.series["entropy"]
    if h.shape[1] < 2:
        return np.full(len(b.T), np.nan)
    nonincr = (h[:, 1:] <= h[:, :-1] + H_TOL) & b.valid[:, 1:]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(b.T >= 2, nonincr.sum(axis=1) / (b.T - 1), np.nan)


def _nansum_or_nan(x: np.ndarray) -> np.ndarray:
    ok = ~np.isnan(x)
    return np.where(ok.any(axis=1), np.where(ok, x, 0.0).sum(axis=1), np.nan)


_SPECIAL: dict[str, Any] = {
    "n_flip": _special_n_flip,
    "t_stop": lambda b: b.T.astype(float),
    "converged": lambda b: (b.counts[np.arange(len(b.T)), b.T - 1].max(axis=1) == b.N).astype(float),
    "H_frac_nonincreasing": _special_h_frac,
    "minority_persistence": _special_minority_persistence,
    "n_minority_options": _special_n_minority_options,
    "docs_total": lambda b: _nansum_or_nan(b.series["docs"]),
    "queries_total": lambda b: _nansum_or_nan(b.series["queries"]),
}


def feature_table(
    logs: Sequence[QuestionLog],
    nli: Iterable[NLIRecord] | Mapping[tuple[str, int], NLIRecord] | None = None,
    registry: str | Path | Sequence[FeatureSpec] | None = None,
) -> pd.DataFrame:
    """All registry features for ``logs`` (Appendix B): index ``qid``, one float column per feature.

    Columns follow the registry order (default ``data/features.yaml``, 34 features); NaN marks
    an undefined value.  ``nli`` is the NLI cache (DESIGN 2.4) as a list of records or a
    mapping keyed by ``(qid, round)``; without it the rationale family is NaN.
    """
    specs = registry if isinstance(registry, (tuple, list)) else load_registry(registry)
    logs = list(logs)
    names = [s.name for s in specs]
    if not logs:
        return pd.DataFrame({n: pd.Series([], dtype=float) for n in names}, index=pd.Index([], name="qid", dtype=object))
    with gc_paused():  # tens of thousands of per-round series, none in a reference cycle
        b = _build_base(logs, nli)
    cols: dict[str, np.ndarray] = {}
    for spec in specs:
        if spec.aggregation == "special":
            if spec.name not in _SPECIAL:
                raise ValueError(f"registry: {spec.name}: no implementation for special feature")
            cols[spec.name] = np.asarray(_SPECIAL[spec.name](b), dtype=float)
        else:
            if spec.base not in b.series:
                raise ValueError(f"registry: {spec.name}: unknown base series {spec.base!r}")
            cols[spec.name] = _agg(b.series[spec.base], spec.aggregation)
    df = pd.DataFrame(cols, index=pd.Index(b.qids, name="qid", dtype=object), columns=names)
    return df.astype(float)
