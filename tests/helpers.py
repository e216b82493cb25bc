"""Shared test helpers: build small, valid DESIGN section 2 records as plain dicts.

Import from any test module as ``from helpers import make_log, make_probe, make_nli,
make_self_report, write_records`` (pytest puts ``tests/`` on ``sys.path``; there is no
``tests/__init__.py``).

Every builder returns a plain ``dict`` (a JSON object as it would appear on one line of the
artifact) that validates against :mod:`probeguard_core.logs` when called with consistent
arguments.  The builders do **not** validate themselves, so a test can deliberately build a
record that breaks a rule (e.g. a unanimous round followed by another round) and check that
the reader rejects it.  Everything is deterministic: no randomness anywhere.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "default_rationale",
    "make_candidate",
    "make_log",
    "make_nli",
    "make_probe",
    "make_self_report",
    "options_dict",
    "write_records",
]


def options_dict(options: str | Sequence[str] | Mapping[str, str] = "ABCD") -> dict[str, str]:
    """Turn ``"ABCD"`` (or ``["A", "B"]``) into ``{"A": "option A", ...}``; a mapping is copied as is."""
    if isinstance(options, Mapping):
        return dict(options)
    return {k: f"option {k}" for k in options}


def default_rationale(answer: str | None) -> str:
    """The rationale the builders use when none is given (ends in a cue sentence, App. C)."""
    if answer is None:
        return "The question is ambiguous and I cannot decide."
    return f"Considering the findings step by step. Therefore, the answer is {answer}. <answer>{answer}</answer>"


def make_candidate(
    answer: str | None,
    rationale: str | None = None,
    logprob: float | None = -5.0,
    n_tokens: int | None = 20,
    mean_token_entropy: float | None = 0.5,
    **extra: Any,
) -> dict[str, Any]:
    """One candidate / re-answer object (DESIGN 2.1 ``candidates[i]``, 2.2 ``reanswers[i]``).

    ``rationale=None`` uses :func:`default_rationale`; ``extra`` keys are added verbatim.
    """
    return {
        "answer": answer,
        "rationale": default_rationale(answer) if rationale is None else rationale,
        "logprob": logprob,
        "n_tokens": n_tokens,
        "mean_token_entropy": mean_token_entropy,
        **extra,
    }


def make_log(
    rounds: Sequence[Sequence[str | None]],
    gold: str = "A",
    options: str | Sequence[str] | Mapping[str, str] = "ABCD",
    doc_ids: Sequence[Sequence[str] | None] | None = None,
    qid: str = "q1",
    rationales: Sequence[Sequence[str]] | None = None,
    *,
    logprobs: Sequence[Sequence[float | None]] | None = None,
    dataset: str = "medqa",
    backbone: str = "test/backbone",
    question: str | None = None,
    specialty: str | None = None,
    n_candidates: int | None = None,
    max_rounds: int | None = None,
    cost: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Build one execution-log record (DESIGN 2.1) as a dict.

    Parameters
    ----------
    rounds:
        ``rounds[t][i]`` is candidate ``i``'s answer in round ``t + 1`` (an option key or None).
        E.g. ``[["A", "B", "A"], ["A", "A", "A"]]`` is N=3, T_stop=2, converged on A.
    gold, options:
        ``options`` is a string of keys (``"ABCD"``), a list of keys, or a full mapping.
    doc_ids:
        One entry per round: a list of document ids retrieved after that round (then
        ``retrieval = {"queries": ["query t"], "doc_ids": [...]}``) or None
        (``retrieval = null``).  ``doc_ids=None`` means no retrieval in any round.
    rationales:
        Same shape as ``rounds``; default :func:`default_rationale` of each answer.
    logprobs:
        Same shape as ``rounds``; default ``-5.0`` for every candidate.
    n_candidates:
        Default ``len(rounds[0])``.
    max_rounds:
        Default 8 when the last round is unanimous, else ``len(rounds)`` (a contested last round
        below max_rounds is a cut-short log, which the readers refuse).
    cost:
        None (default) or ``{"wall_s": ..., "completion_tokens": ...}``.
    extra:
        Extra top-level keys added verbatim (unknown fields must be preserved by readers).
    """
    opts = options_dict(options)
    n = len(rounds[0]) if n_candidates is None else n_candidates
    out_rounds: list[dict[str, Any]] = []
    for t, answers in enumerate(rounds):
        cands = []
        for i, a in enumerate(answers):
            rat = None if rationales is None else rationales[t][i]
            lp = -5.0 if logprobs is None else logprobs[t][i]
            cands.append(make_candidate(a, rationale=rat, logprob=lp))
        ids = None if doc_ids is None else doc_ids[t]
        retrieval = None if ids is None else {"queries": [f"query {t + 1}"], "doc_ids": list(ids)}
        out_rounds.append({"round": t + 1, "candidates": cands, "retrieval": retrieval})
    if max_rounds is None:
        last = set(rounds[-1]) if rounds else set()
        max_rounds = 8 if len(last) == 1 and None not in last else max(len(rounds), 1)
    return {
        "schema_version": 1,
        "qid": qid,
        "dataset": dataset,
        "backbone": backbone,
        "question": f"Question {qid}?" if question is None else question,
        "options": opts,
        "gold": gold,
        "specialty": specialty,
        "n_candidates": n,
        "max_rounds": max_rounds,
        "rounds": out_rounds,
        "cost": None if cost is None else dict(cost),
        **copy.deepcopy(extra),
    }


def make_probe(
    reanswers: Sequence[str | None],
    consensus: str = "A",
    arm: str = "counter_evidence",
    qid: str = "q1",
    doc_ids: Sequence[str] | None = None,
    queries: Sequence[str] | None = None,
    *,
    dataset: str = "medqa",
    backbone: str = "test/backbone",
    rationales: Sequence[str] | None = None,
    cost: Mapping[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Build one probe record (DESIGN 2.2) as a dict.

    ``reanswers`` lists the N re-answers (option keys or None).  ``doc_ids`` / ``queries``
    default to ``["d1", "d2"]`` / ``["counter query"]``, except for the ``instruction_only``
    arm where both default to ``[]`` (that arm has no queries and no documents).
    """
    no_docs = arm == "instruction_only"
    ids = ([] if no_docs else ["d1", "d2"]) if doc_ids is None else list(doc_ids)
    qs = ([] if no_docs else ["counter query"]) if queries is None else list(queries)
    rats = [None] * len(reanswers) if rationales is None else list(rationales)
    return {
        "schema_version": 1,
        "qid": qid,
        "dataset": dataset,
        "backbone": backbone,
        "arm": arm,
        "consensus": consensus,
        "queries": qs,
        "doc_ids": ids,
        "reanswers": [make_candidate(a, rationale=r) for a, r in zip(reanswers, rats)],
        "cost": None if cost is None else dict(cost),
        **copy.deepcopy(extra),
    }


def make_nli(
    claims: Sequence[str] = ("The answer is A.", "Option A is correct."),
    entailment: Sequence[Sequence[float]] | None = None,
    candidates: Sequence[int] | None = None,
    qid: str = "q1",
    round: int = 1,  # noqa: A002  (the DESIGN field name)
    *,
    model: str = "test/nli",
    dataset: str = "medqa",
    backbone: str = "test/backbone",
    **extra: Any,
) -> dict[str, Any]:
    """Build one NLI-cache record (DESIGN 2.4) as a dict.

    ``entailment`` defaults to an n x n matrix with 1.0 on the diagonal and 0.9 elsewhere;
    ``candidates`` defaults to ``[0, 1, ..., n - 1]`` (n = ``len(claims)``).
    """
    n = len(claims)
    mat = [[1.0 if i == j else 0.9 for j in range(n)] for i in range(n)] if entailment is None else [list(r) for r in entailment]
    return {
        "schema_version": 1,
        "qid": qid,
        "dataset": dataset,
        "backbone": backbone,
        "round": round,
        "model": model,
        "candidates": list(range(n)) if candidates is None else list(candidates),
        "claims": list(claims),
        "entailment": mat,
        **copy.deepcopy(extra),
    }


def make_self_report(
    qid: str = "q1",
    verbalized_confidence: float | None = 80.0,
    p_true: float | None = 0.7,
    *,
    dataset: str = "medqa",
    backbone: str = "test/backbone",
    **extra: Any,
) -> dict[str, Any]:
    """Build one self-report record (DESIGN 2.3) as a dict."""
    return {
        "schema_version": 1,
        "qid": qid,
        "dataset": dataset,
        "backbone": backbone,
        "verbalized_confidence": verbalized_confidence,
        "p_true": p_true,
        **copy.deepcopy(extra),
    }


def write_records(path: str | Path, records: Iterable[Mapping[str, Any] | str]) -> Path:
    """Write one line per record to ``path`` (plain text, or gzip when it ends in ``.gz``).

    A ``str`` record is written verbatim (to craft malformed lines); a mapping is written
    with ``json.dumps`` (``allow_nan=True``, so NaN/Infinity tokens can be produced on purpose).
    """
    import gzip

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records)
    data = text.encode("utf-8")
    if p.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    p.write_bytes(data)
    return p


def paper_text_path() -> Path | None:
    """The paper's text: ``$PROBEGUARD_PAPER_TEXT``, ``data/paper/probeguard-paper.txt`` or
    ``../shared/paper/probeguard-paper.txt`` beside the repository; None where there is none."""
    repo = Path(__file__).resolve().parents[1]
    for candidate in (os.environ.get("PROBEGUARD_PAPER_TEXT"), repo / "data" / "paper" / "probeguard-paper.txt",
                      repo.parent / "shared" / "paper" / "probeguard-paper.txt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def paper_text() -> str:
    """The paper's text (:func:`paper_text_path`), or a skip that says how to give it."""
    import pytest

    path = paper_text_path()
    if path is None:
        pytest.skip("paper text not found: set PROBEGUARD_PAPER_TEXT to probeguard-paper.txt")
    return path.read_text(encoding="utf-8")
