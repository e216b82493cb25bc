"""Referral dossiers: what a clinician reads for every question ProbeGuard does not answer (§5.3).

§5.3: a question outside the certified region is referred to a clinician *with its challenge
documents and the record of dissent*.  :func:`build_dossiers` turns a decision table
(:func:`probeguard_core.deploy.apply.apply_certificate`) and the logs it came from into one record
per referred question; :func:`dossiers_bytes` writes them as ``dossiers.jsonl``.  Everything
is read from the logs and probe records, nothing is inferred.

Schema (``schema_version`` 1; one JSON object per line, keys in this order):

``schema_version``  1
``qid``, ``dataset``, ``backbone``, ``specialty``, ``question``, ``options``  as in the log (DESIGN 2.1)
``system_answer``  the system's final answer (DESIGN 3: unique plurality of the last round; null on a tie)
``stratum``, ``base_stratum``  the certificate's stratum name and S1 / S2 / S3
``referral``  ``{code, reason, score, threshold, alpha}``; ``code`` is one of :data:`REFERRAL_CODES`:
    ``s3_not_converged`` (S3: never converged), ``below_threshold`` (score <= the certified
    threshold; both numbers given), ``stratum_not_certified`` (an LTT ran but certified nothing at
    this alpha), ``stratum_not_calibrated`` (no certificate for this stratum), ``no_score``
    (probe or NLI record missing)
``dissent``  ``{n_candidates, rounds, majority_flips}``:
    ``rounds[t]`` = ``{round, votes, modal_answer, minority, retrieval}`` with ``votes`` the
    count per option key plus ``null`` (parse failures), ``modal_answer`` m_t (DESIGN 3),
    ``minority`` one entry per answer other than m_t that has a vote:
    ``{answer, candidates, claims}`` (candidate indices and, per candidate, the concluding
    claims of its rationale, :func:`probeguard_core.claims.extract_claims`), and
    ``retrieval`` the queries and doc ids retrieved after the round (or null);
    ``majority_flips`` = ``[{after_round, from, to}]`` wherever m_{t+1} != m_t (Eq. 8)
``probe``  null unless the first round is unanimous and a counter-evidence record exists:
    ``{arm, consensus, keep_rate, n_reanswers, flipped, queries, challenge_documents}`` with
    ``keep_rate`` kappa (Eq. 4), ``flipped`` the re-answers that left the consensus
    (``{index, answer, claims}``) and ``challenge_documents`` ``[{id, title, first_lines}]``
    (title and first lines from ``--corpus``, DESIGN 2.6; null without a corpus).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from probeguard_core import logs as L
from probeguard_core.claims import extract_claims
from probeguard_core.deploy.apply import REASONS
from probeguard_core.features import answer_shares, final_answer, modal_answer
from probeguard_core.probe import keep_rate

__all__ = ["DOSSIER_SCHEMA_VERSION", "REFERRAL_CODES", "build_dossiers", "dossiers_bytes", "load_corpus_excerpts"]

DOSSIER_SCHEMA_VERSION = 1
REFERRAL_CODES = ("s3_not_converged", "below_threshold", "stratum_not_certified", "stratum_not_calibrated", "no_score")
#: Characters of a challenge document's first lines shown in a dossier.
FIRST_LINES_CHARS = 280
_REASON_CODE = {reason: code for code, reason in REASONS.items() if code in REFERRAL_CODES}


def _first_lines(content: str) -> str:
    lines = [ln.strip() for ln in content.splitlines() if ln.strip()]
    text = " ".join(lines[:2])
    return text if len(text) <= FIRST_LINES_CHARS else text[: FIRST_LINES_CHARS - 1].rstrip() + "…"


def load_corpus_excerpts(path: str | os.PathLike[str], ids: Iterable[str]) -> dict[str, dict[str, str]]:
    """``{doc id: {title, first_lines}}`` for ``ids`` from a MedCorp-shaped corpus (DESIGN 2.6).

    A wanted id that the corpus does not hold is an error (the corpus is not the one the probe
    retrieved from), never a silently empty entry.
    """
    from probeguard_core.questions import iter_corpus

    want = set(ids)
    out: dict[str, dict[str, str]] = {}
    for doc in iter_corpus(path):
        if doc.id in want:
            out[doc.id] = {"title": doc.title, "first_lines": _first_lines(doc.content)}
    missing = sorted(want - set(out))
    if missing:
        raise L.LogFormatError(path, None, "id", f"{len(missing)} challenge document id(s) are not in the corpus, "
                               f"e.g. {missing[0]!r}; pass the corpus the probe retrieved from")
    return out


def _dissent(log: L.QuestionLog) -> dict[str, Any]:
    rounds = []
    modal = []
    for rnd in log.rounds:
        shares = answer_shares(log, rnd)
        m = modal_answer(shares)
        modal.append(m)
        votes = {a: 0 for a in sorted(log.options)}
        votes["null"] = 0
        by_answer: dict[str, list[int]] = {}
        for i, c in enumerate(rnd.candidates):
            votes["null" if c.answer is None else c.answer] += 1
            if c.answer is not None and c.answer != m:
                by_answer.setdefault(c.answer, []).append(i)
        minority = [{"answer": a, "candidates": idx,
                     "claims": [extract_claims(rnd.candidates[i].rationale) for i in idx]}
                    for a, idx in sorted(by_answer.items())]
        retrieval = None if rnd.retrieval is None else {"queries": list(rnd.retrieval.queries),
                                                        "doc_ids": list(rnd.retrieval.doc_ids)}
        rounds.append({"round": rnd.round, "votes": votes, "modal_answer": m, "minority": minority,
                       "retrieval": retrieval})
    flips = [{"after_round": t + 1, "from": modal[t], "to": modal[t + 1]}
             for t in range(len(modal) - 1) if modal[t + 1] != modal[t]]
    return {"n_candidates": log.n_candidates, "rounds": rounds, "majority_flips": flips}


def _probe(rec: L.ProbeRecord | None, excerpts: Mapping[str, Mapping[str, str]] | None) -> dict[str, Any] | None:
    if rec is None:
        return None
    flipped = [{"index": i, "answer": c.answer, "claims": extract_claims(c.rationale)}
               for i, c in enumerate(rec.reanswers) if c.answer != rec.consensus]
    docs = [{"id": d, "title": None if excerpts is None else excerpts[d]["title"],
             "first_lines": None if excerpts is None else excerpts[d]["first_lines"]} for d in rec.doc_ids]
    return {"arm": rec.arm, "consensus": rec.consensus, "keep_rate": keep_rate(rec.reanswers, rec.consensus),
            "n_reanswers": len(rec.reanswers), "flipped": flipped, "queries": list(rec.queries),
            "challenge_documents": docs}


def _referral(row: Mapping[str, Any], alpha: float) -> dict[str, Any]:
    code = _REASON_CODE.get(row["reason"])
    if code is None:
        raise ValueError(f"qid {row['qid']!r}: decision reason {row['reason']!r} has no referral code")
    score = None if pd.isna(row["score"]) else float(row["score"])
    thr = None if pd.isna(row["threshold"]) else float(row["threshold"])
    reason = row["reason"]
    if code == "below_threshold":
        reason = f"score {score:.6g} is at or below the certified threshold {thr:.6g} of {row['stratum']}"
    elif code == "stratum_not_certified":
        reason = f"stratum {row['stratum']} certifies nothing at alpha = {alpha:g}: every question in it is referred"
    elif code == "s3_not_converged":
        reason = "S3: the consensus never converged (no unanimous last round); S3 abstains as a whole"
    return {"code": code, "reason": reason, "score": score, "threshold": thr, "alpha": alpha}


def build_dossiers(
    table: pd.DataFrame,
    logs: Sequence[L.QuestionLog],
    probe: Sequence[L.ProbeRecord] | None = None,
    *,
    alpha: float,
    corpus: str | os.PathLike[str] | None = None,
) -> list[dict[str, Any]]:
    """One dossier per referred (``decision == "abstain"``) question, in the table's order.

    ``table`` is :func:`probeguard_core.deploy.apply.apply_certificate`'s output for ``logs``;
    ``probe`` the probe records (the counter-evidence arm is used); ``corpus`` a MedCorp-shaped
    file or folder giving the challenge documents' titles and first lines.
    """
    by_qid = {log.qid: log for log in logs}
    ce = {r.qid: r for r in (probe or []) if r.arm == "counter_evidence"}
    referred = table[table["decision"] != "answer"]
    excerpts = None
    if corpus is not None:
        ids = [d for q in referred["qid"] if q in ce for d in ce[q].doc_ids]
        excerpts = load_corpus_excerpts(corpus, ids)
    out = []
    for row in referred.to_dict("records"):
        log = by_qid[row["qid"]]
        out.append({
            "schema_version": DOSSIER_SCHEMA_VERSION,
            "qid": log.qid, "dataset": log.dataset, "backbone": log.backbone, "specialty": log.specialty,
            "question": log.question, "options": dict(log.options), "system_answer": final_answer(log),
            "stratum": row["stratum"], "base_stratum": row["base_stratum"],
            "referral": _referral(row, alpha),
            "dissent": _dissent(log),
            "probe": _probe(ce.get(log.qid), excerpts) if row["base_stratum"] == "S1" else None,
        })
    return out


def dossiers_bytes(dossiers: Iterable[Mapping[str, Any]]) -> bytes:
    """``dossiers.jsonl``: one compact JSON object per line (UTF-8, no NaN); empty file for none."""
    lines = [json.dumps(d, ensure_ascii=False, allow_nan=False, separators=(",", ":")) for d in dossiers]
    return ("".join(line + "\n" for line in lines)).encode("utf-8")
