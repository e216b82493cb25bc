"""Counter-evidence probe statistics (paper Eq. 4, Algorithm 1, Figure 3; DESIGN section 3).

* :func:`keep_rate` -- kappa = (# re-answers equal to the consensus m*) / N; a null
  re-answer counts as not kept.
* :func:`is_flipped` -- the consensus is flipped when the re-answers' unique plurality is
  not m*; a tie for the top counts as flipped, and so do N null re-answers.
* :func:`probe_table` -- one row per (qid, arm) with kappa and flipped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import pandas as pd

from probeguard_core.logs import Candidate, ProbeRecord, QuestionLog, check_probe_consensus

__all__ = ["is_flipped", "keep_rate", "keep_rates", "probe_table"]


def _answers(reanswers: Sequence[Candidate | str | None], consensus: str) -> list[str | None]:
    if not isinstance(consensus, str) or not consensus:
        raise ValueError(f"consensus must be an option key, got {consensus!r}")
    if isinstance(reanswers, str):
        raise ValueError("reanswers must be a sequence of candidates or answers, not one string")
    out: list[str | None] = []
    for i, r in enumerate(reanswers):
        if isinstance(r, Candidate):
            out.append(r.answer)
        elif r is None or isinstance(r, str):
            out.append(r)
        else:
            raise ValueError(f"reanswers[{i}]: expected a Candidate, an answer string or None, got {type(r).__name__}")
    if not out:
        raise ValueError("reanswers is empty (N >= 1 re-answers required)")
    return out


def keep_rate(reanswers: Sequence[Candidate | str | None], consensus: str) -> float:
    """kappa = |{i : re-answer i equals m*}| / N  (Eq. 4); nulls count in N as not kept."""
    answers = _answers(reanswers, consensus)
    return sum(1 for a in answers if a == consensus) / len(answers)


def is_flipped(reanswers: Sequence[Candidate | str | None], consensus: str) -> bool:
    """True unless the re-answers' unique plurality is m* (tie or all-null = flipped; Figure 3)."""
    answers = _answers(reanswers, consensus)
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return True
    top = max(counts.values())
    winners = [a for a, c in counts.items() if c == top]
    return not (len(winners) == 1 and winners[0] == consensus)


def probe_table(records: Iterable[ProbeRecord]) -> pd.DataFrame:
    """One row per (qid, arm): dataset, backbone, consensus, n (re-answers), kappa, flipped.

    Indexed by the MultiIndex ``(qid, arm)``; a duplicate pair raises ValueError.  Select
    one arm with ``table.xs("counter_evidence", level="arm")``.
    """
    rows = []
    seen: set[tuple[str, str]] = set()
    for i, rec in enumerate(records):
        if not isinstance(rec, ProbeRecord):
            raise ValueError(f"records[{i}]: expected a ProbeRecord, got {type(rec).__name__}")
        key = (rec.qid, rec.arm)
        if key in seen:
            raise ValueError(f"records[{i}]: duplicate probe record for qid={rec.qid!r} arm={rec.arm!r}")
        seen.add(key)
        rows.append(
            {
                "qid": rec.qid,
                "arm": rec.arm,
                "dataset": rec.dataset,
                "backbone": rec.backbone,
                "consensus": rec.consensus,
                "n": len(rec.reanswers),
                "kappa": keep_rate(rec.reanswers, rec.consensus),
                "flipped": is_flipped(rec.reanswers, rec.consensus),
            }
        )
    cols = ["qid", "arm", "dataset", "backbone", "consensus", "n", "kappa", "flipped"]
    df = pd.DataFrame(rows, columns=cols)
    df = df.astype({"n": "int64", "kappa": "float64", "flipped": "bool"})
    return df.set_index(["qid", "arm"])


def keep_rates(
    records: Iterable[ProbeRecord], logs: Sequence[QuestionLog], arm: str = "counter_evidence"
) -> dict[str, float]:
    """kappa (Eq. 4) per qid of ``logs`` for one probe ``arm``.

    Each record's consensus must be its log's unanimous first-round answer
    (:func:`probeguard_core.logs.check_probe_consensus`); records for qids outside ``logs`` are
    ignored; two records for one (qid, arm) raise ``ValueError``.
    """
    known = {log.qid for log in logs}
    recs = [r for r in records if r.arm == arm]
    check_probe_consensus(recs, logs, path=f"<probe arm={arm}>")
    kappa: dict[str, float] = {}
    for r in recs:
        if r.qid in known:
            if r.qid in kappa:
                raise ValueError(f"probe: duplicate record for qid={r.qid!r} arm={arm!r}")
            kappa[r.qid] = keep_rate(r.reanswers, r.consensus)
    return kappa
