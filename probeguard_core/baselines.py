"""Snapshot abstention signals the process score is compared with (paper section 4.1, Table 2).

Every signal follows the project convention, higher = more confident:

* terminal agreement s_{T_stop}(m_{T_stop}) and first-round agreement a_1 (Wang et al. 2023);
* :func:`sequence_logprob`: mean over the final round's candidates voting the final answer
  of their sequence log-probability (the logged ``logprob``, the sum of token
  log-probabilities); candidates with a null logprob are skipped; all null -> NaN.  With
  no final answer (a tie or all null, an error) the last round's modal answer m_{T_stop}
  stands in, so the signal stays defined;
* :func:`answer_entropy_score`: ``-H_1`` (Eq. 11, round 1), the multiple-choice reduction of
  semantic entropy (Kuhn et al. 2023), negated;
* verbalized confidence (0..100) and P(True) (0..1) from the self-report file (DESIGN 2.3).

:func:`signal_table` gathers them, plus RSE (round 1) and the probe keep rate where available.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core.features import (
    answer_entropies,
    answer_shares,
    final_answer,
    first_round_agreement,
    is_correct,
    modal_answer,
    stratum,
    terminal_agreement,
)
from probeguard_core.logs import NLIRecord, ProbeRecord, QuestionLog, SelfReport
from probeguard_core.probe import keep_rates
from probeguard_core.rse import first_round_rse

__all__ = [
    "SIGNALS",
    "answer_entropy_score",
    "first_round_agreement",
    "sequence_logprob",
    "signal_table",
    "terminal_agreement",
]

#: Signal columns of :func:`signal_table`, in Table 2 order, then the unanimous-layer signals.
SIGNALS = (
    "terminal_agreement",
    "first_round_agreement",
    "sequence_logprob",
    "answer_entropy",
    "verbalized_confidence",
    "p_true",
    "rse",
    "keep_rate",
)


def sequence_logprob(log: QuestionLog, length_normalized: bool = False) -> float:
    """Mean sequence log-probability of the final round's candidates voting the final answer.

    ``length_normalized=True`` divides each candidate's logprob by its ``n_tokens`` first
    (candidates without a positive token count are then skipped).  NaN when no voting
    candidate has a usable logprob.
    """
    last = log.rounds[-1]
    target = final_answer(log)
    if target is None:
        target = modal_answer(answer_shares(log, last))
    if target is None:  # an all-null last round: no candidate votes for anything
        return math.nan
    vals: list[float] = []
    for c in last.candidates:
        if c.answer != target or c.logprob is None:
            continue
        if length_normalized:
            if not c.n_tokens:
                continue
            vals.append(c.logprob / c.n_tokens)
        else:
            vals.append(float(c.logprob))
    return sum(vals) / len(vals) if vals else math.nan


def answer_entropy_score(log: QuestionLog) -> float:
    """``-H_1``: negated first-round answer entropy (Eq. 11), higher = more confident."""
    return -answer_entropies(log)[0] + 0.0


def _cell_sources(obj: Any) -> tuple[Any, Any, Any, Any]:
    """Duck-type a release ``Cell`` (attributes logs, self_report, nli, probe)."""
    return (
        obj.logs,
        getattr(obj, "self_report", None),
        getattr(obj, "nli", None),
        getattr(obj, "probe", None),
    )


def signal_table(
    logs: Sequence[QuestionLog] | Any,
    self_reports: Iterable[SelfReport] | None = None,
    nli: Iterable[NLIRecord] | None = None,
    probe: Iterable[ProbeRecord] | None = None,
    arm: str = "counter_evidence",
) -> pd.DataFrame:
    """One row per question (index ``qid``): the :data:`SIGNALS` columns, ``correct`` and ``stratum``.

    ``logs`` may also be a release cell exposing ``logs``, ``self_report``, ``nli`` and
    ``probe``; explicit arguments take precedence.  A signal whose source is absent is NaN
    (never 0): verbalized confidence and P(True) without a self-report, ``rse`` without a
    round-1 NLI record, ``keep_rate`` outside the probed (unanimous) layer.  Records for qids
    not in ``logs`` are ignored; duplicates raise ValueError.
    """
    if not isinstance(logs, (list, tuple)) and hasattr(logs, "logs"):
        cl, cs, cn, cp = _cell_sources(logs)
        logs = cl
        self_reports = cs if self_reports is None else self_reports
        nli = cn if nli is None else nli
        probe = cp if probe is None else probe
    logs = list(logs)
    qids = [log.qid for log in logs]
    if len(set(qids)) != len(qids):
        raise ValueError("logs: duplicate qid")
    known = set(qids)

    sr: dict[str, SelfReport] = {}
    for r in self_reports or ():
        if r.qid in known:
            if r.qid in sr:
                raise ValueError(f"self_reports: duplicate record for qid={r.qid!r}")
            sr[r.qid] = r
    rse = first_round_rse(nli, known)
    kappa = keep_rates(probe, logs, arm) if probe is not None else {}

    def _opt(v: float | None) -> float:
        return math.nan if v is None else float(v)

    data = {
        "terminal_agreement": [terminal_agreement(log) for log in logs],
        "first_round_agreement": [first_round_agreement(log) for log in logs],
        "sequence_logprob": [sequence_logprob(log) for log in logs],
        "answer_entropy": [answer_entropy_score(log) for log in logs],
        "verbalized_confidence": [_opt(sr[q].verbalized_confidence) if q in sr else math.nan for q in qids],
        "p_true": [_opt(sr[q].p_true) if q in sr else math.nan for q in qids],
        "rse": [rse.get(q, math.nan) for q in qids],
        "keep_rate": [kappa.get(q, math.nan) for q in qids],
    }
    df = pd.DataFrame(
        {k: np.asarray(v, dtype=float) for k, v in data.items()},
        index=pd.Index(qids, name="qid", dtype=object),
    )
    df["correct"] = np.asarray([is_correct(log) for log in logs], dtype=bool)
    df["stratum"] = [stratum(log) for log in logs]
    return df
