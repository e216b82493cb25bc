"""Foreign-log adapters (DESIGN 2.5): MA-RAG native logs -> DESIGN 2.1 execution logs.

The paper's substrate is MA-RAG (Wu et al. 2026, code NJU-RL/MA-RAG; ``ma_rag_entropy.py`` is
the entropy-guided variant, Section 3 and Appendix L).  Its native log is one folder per
question, ``evaluations/question_<id>/round_<r>.jsonl``, one line per candidate with keys
``round, answer_id, answer, prediction, is_correct, prompt, reasoning, response, logprobs,
token_entropies``.  In that code ``answer`` is the dataset's *gold* label and ``prediction``
is the option letter its ``judger`` parsed from the response (``''`` when none).

Conversion rules (one candidate line -> one DESIGN 2.1 candidate):

* ``answer``    = ``prediction`` when it is one of the question's option keys, else null
  (an empty, multi-letter or out-of-range prediction is "no parseable answer"; never guessed).
  The native ``answer`` key is the gold label: it is never used as a prediction, and where
  present it must equal the question's gold (a mismatch means the wrong dataset file).
* ``rationale`` = ``response`` (the text after the thinking block, which carries the
  ``<answer>X</answer>`` tag); ``reasoning`` only when ``response`` is absent or null.
* ``logprob``   = sum of ``logprobs`` (the completion's token log-probabilities);
  ``n_tokens`` = ``len(logprobs)``; both null when ``logprobs`` is absent or null.
* ``mean_token_entropy`` = mean of ``token_entropies`` (null when absent, null or empty).
* ``retrieval`` = null for every round: MA-RAG does not log retrieved document ids, so the
  retrieval family (rho_t, Eq. 10) is *missing*, not zero.  ``cost`` = null.

Errors name ``file:line: field: reason`` in the native files (:class:`LogFormatError`).  A
converted log that breaks DESIGN 2.1 (e.g. a unanimous round followed by another round) is
reported against the offending round file.  A question whose last round is neither unanimous
(MA-RAG's own stop rule: all predictions identical) nor the ``max_rounds``-th is reported as
an interrupted run rather than converted into a spurious "not converged" log.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr
from tqdm.auto import tqdm

from probeguard_core.jsonl import LogFormatError, iter_jsonl
from probeguard_core.logs import CUT_SHORT, QuestionLog, validate_record
from probeguard_core.questions import Question

__all__ = ["convert_ma_rag_tree", "convert_ma_rag_question"]

# canonical numbers only (issue 25): ``question_02/`` beside ``question_2/`` (or ``round_02``
# beside ``round_2``) would be one id twice, ``round_0`` is before the first round, and an id
# of thousands of digits is no id; each is named with its reason
_QUESTION_DIR = re.compile(r"^question_(0|[1-9]\d{0,17})\Z")
_ROUND_FILE = re.compile(r"^round_([1-9]\d{0,5})\.jsonl\Z")
_NUMBERED = re.compile(r"^(question|round)_(\d+)(\.jsonl)?\Z")


def _number_reason(name: str) -> str | None:
    """Why a ``question_<id>`` / ``round_<r>.jsonl`` name holds a number that is not canonical."""
    m = _NUMBERED.match(name)
    if m is None:
        return None
    digits = m.group(2)
    if len(digits) > 1 and digits.startswith("0"):
        return f"number {digits!r} has a leading zero ({m.group(1)}_{int(digits[:18])} would name the same one)"
    if m.group(1) == "round" and set(digits) == {"0"}:
        return "rounds are numbered from 1 (round_1.jsonl is the first)"
    return f"number of {len(digits)} digits is too long"
_ROUND_LOC = re.compile(r"^rounds\[(\d+)\](?:\.candidates\[(\d+)\])?")

_Finite = Annotated[float, Field(allow_inf_nan=False)]
_NonNegFinite = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _NativeLine(BaseModel):
    """One candidate line of an MA-RAG ``round_<r>.jsonl`` (extra keys such as ``prompt`` ignored)."""

    model_config = ConfigDict(extra="allow", strict=True)

    round: StrictInt
    answer_id: StrictInt | None = None
    answer: StrictStr | None = None  # MA-RAG writes the gold label here
    prediction: StrictStr | None
    reasoning: StrictStr | None = None
    response: StrictStr | None = None
    logprobs: list[_Finite] | None = None
    token_entropies: list[_NonNegFinite] | None = None


def _candidate(line: _NativeLine, options: Mapping[str, str], path: Path, n: int) -> dict[str, Any]:
    """Map one native line to a DESIGN 2.1 candidate (rules in the module docstring)."""
    rationale = line.response if line.response is not None else line.reasoning
    if rationale is None:
        raise LogFormatError(path, n, "response", "neither 'response' nor 'reasoning' holds the rationale text")
    lp = line.logprobs
    ent = line.token_entropies
    try:
        total = None if lp is None else math.fsum(lp)
    except OverflowError:
        total = -math.inf
    if total is not None and not math.isfinite(total):
        raise LogFormatError(path, n, "logprobs", f"sum of token log-probabilities is {total} (overflow)")
    return {
        "answer": line.prediction if line.prediction in options else None,
        "rationale": rationale,
        "logprob": total,
        "n_tokens": None if lp is None else len(lp),
        "mean_token_entropy": math.fsum(ent) / len(ent) if ent else None,
    }


def _read_round(
    path: Path, r: int, q: Question, n_candidates: int
) -> tuple[list[dict[str, Any]], set[str | None]]:
    """Candidates of one round file, plus the set of raw predictions (MA-RAG's stop rule)."""
    cands: list[dict[str, Any]] = []
    raw: set[str | None] = set()
    for n, obj in iter_jsonl(path):
        if n > n_candidates:
            raise LogFormatError(path, n, None, f"more than n_candidates={n_candidates} candidate lines")
        line = validate_record(_NativeLine, obj, path, n)
        if line.round != r:
            raise LogFormatError(path, n, "round", f"{line.round} in the file of round {r}")
        if line.answer_id is not None and line.answer_id != n:
            raise LogFormatError(path, n, "answer_id", f"{line.answer_id} on line {n} (answer ids are 1..N in order)")
        if line.answer is not None and line.answer != q.gold:
            reason = f"logged gold {line.answer!r} differs from the question's gold {q.gold!r}"
            raise LogFormatError(path, n, "answer", reason)
        raw.add(line.prediction)
        cands.append(_candidate(line, q.options, path, n))
    if len(cands) != n_candidates:
        reason = f"expected n_candidates={n_candidates} candidate lines, got {len(cands)}"
        raise LogFormatError(path, None, None, reason)
    return cands, raw


def _round_files(qdir: Path, max_rounds: int) -> list[Path]:
    """``round_1.jsonl .. round_T.jsonl`` of one question folder, consecutive, T <= max_rounds."""
    found: dict[int, Path] = {}
    for f in sorted(qdir.iterdir()):
        m = _ROUND_FILE.match(f.name)
        if f.name.startswith("."):
            continue
        if not m and (why := _number_reason(f.name)) is not None:
            raise LogFormatError(f, None, None, why)
        if not m or not f.is_file():
            raise LogFormatError(f, None, None, "unexpected entry in an MA-RAG question folder (expected round_<r>.jsonl)")
        found[int(m.group(1))] = f
    if not found:
        raise LogFormatError(qdir, None, None, "no round_<r>.jsonl files")
    for r in range(1, max(found) + 1):
        if r not in found:
            reason = f"missing; rounds must be consecutive from 1 (found {sorted(found)})"
            raise LogFormatError(qdir / f"round_{r}.jsonl", None, None, reason)
    if len(found) > max_rounds:
        raise LogFormatError(found[max_rounds + 1], None, None, f"more than max_rounds={max_rounds} rounds")
    return [found[r] for r in range(1, len(found) + 1)]


def _validate_converted(rec: dict[str, Any], qdir: Path, files: list[Path]) -> QuestionLog:
    """Validate against DESIGN 2.1; a round-level error is reported against its round file."""
    try:
        return validate_record(QuestionLog, rec, qdir, None)
    except LogFormatError as exc:
        m = _ROUND_LOC.match(exc.field or "")
        if m is None:
            raise
        cand = m.group(2)
        line = None if cand is None else int(cand) + 1
        raise LogFormatError(files[int(m.group(1))], line, exc.field, exc.reason) from None


def convert_ma_rag_question(
    qdir: str | os.PathLike[str],
    question: Question,
    dataset: str,
    backbone: str,
    n_candidates: int = 8,
    max_rounds: int = 8,
) -> QuestionLog:
    """Convert one MA-RAG ``question_<id>/`` folder into a DESIGN 2.1 :class:`QuestionLog`."""
    qdir = Path(qdir)
    files = _round_files(qdir, max_rounds)
    rounds: list[dict[str, Any]] = []
    last_raw: set[str | None] = set()
    for r, f in enumerate(files, start=1):
        cands, last_raw = _read_round(f, r, question, n_candidates)
        rounds.append({"round": r, "candidates": cands, "retrieval": None})
    rec = {
        "schema_version": 1, "qid": question.qid, "dataset": dataset, "backbone": backbone,
        "question": question.question, "options": dict(question.options), "gold": question.gold,
        "specialty": question.specialty, "n_candidates": n_candidates, "max_rounds": max_rounds,
        "rounds": rounds, "cost": None,
    }
    interrupted = len(last_raw) != 1 and len(files) < max_rounds
    try:
        log = _validate_converted(rec, qdir, files)
    except LogFormatError as exc:
        if not (interrupted and exc.field == "rounds" and exc.reason.startswith(CUT_SHORT)):
            raise
    if interrupted:  # reported against the round file, in MA-RAG's terms
        reason = (f"round {len(files)} is neither unanimous nor round max_rounds={max_rounds}: an interrupted "
                  "run (MA-RAG stops only at unanimity or the round limit)")
        raise LogFormatError(files[-1], None, None, reason)
    return log


def _question_dirs(tree: Path) -> list[tuple[int, Path]]:
    """``question_<id>`` folders of ``tree`` (or of ``tree/evaluations``), by numeric id."""
    if not tree.is_dir():
        raise LogFormatError(tree, None, None, "not a folder")
    if not any(_QUESTION_DIR.match(p.name) for p in tree.iterdir()) and (tree / "evaluations").is_dir():
        tree = tree / "evaluations"
    out = []
    for p in sorted(tree.iterdir()):
        if p.name.startswith("."):
            continue
        m = _QUESTION_DIR.match(p.name)
        if not m and p.is_dir() and (why := _number_reason(p.name)) is not None:
            raise LogFormatError(p, None, None, why)
        if not m or not p.is_dir():
            raise LogFormatError(p, None, None, "unexpected entry in an MA-RAG log tree (expected question_<id>/ folders)")
        out.append((int(m.group(1)), p))
    if not out:
        raise LogFormatError(tree, None, None, "no question_<id>/ folders")
    return sorted(out)


def _index_questions(questions: Iterable[Question] | Mapping[str, Question], dataset: str) -> dict[str, Question]:
    items = list(questions.values()) if isinstance(questions, Mapping) else list(questions)
    by_qid: dict[str, Question] = {}
    for q in items:
        if not isinstance(q, Question):
            raise ValueError(f"questions: expected Question records (see load_questions), got {type(q).__name__}")
        if q.dataset != dataset:
            raise ValueError(f"questions: {q.qid!r} belongs to dataset {q.dataset!r}, not {dataset!r}")
        if q.qid in by_qid:
            raise ValueError(f"questions: duplicate qid {q.qid!r}")
        by_qid[q.qid] = q
    return by_qid


def convert_ma_rag_tree(
    tree: str | os.PathLike[str],
    questions: Iterable[Question] | Mapping[str, Question],
    dataset: str,
    backbone: str,
    n_candidates: int = 8,
    max_rounds: int = 8,
    progress: bool = False,
) -> list[QuestionLog]:
    """Convert an MA-RAG log tree into DESIGN 2.1 execution logs (DESIGN 2.5; Section 3).

    ``tree`` holds ``question_<id>/`` folders (or is the run folder holding ``evaluations/``);
    ``questions`` are the run's questions (``load_questions(MA-RAG dataset file, dataset)``),
    as a list or a ``{qid: Question}`` mapping; qid = ``str(id)``.  Every folder must have a
    question; questions without a folder are simply not part of the run.  The result is in
    numeric id order; write it with :func:`probeguard_core.logs.write_jsonl`.
    """
    if n_candidates < 1 or max_rounds < 1:
        raise ValueError(f"n_candidates and max_rounds must be >= 1, got {n_candidates} and {max_rounds}")
    by_qid = _index_questions(questions, dataset)
    dirs = _question_dirs(Path(tree))
    out = []
    for qid_int, qdir in tqdm(dirs, desc="MA-RAG -> logs", unit="question", disable=not progress):
        q = by_qid.get(str(qid_int))
        if q is None:
            raise LogFormatError(qdir, None, None, f"no question with qid {str(qid_int)!r} among the {len(by_qid)} given")
        out.append(convert_ma_rag_question(qdir, q, dataset, backbone, n_candidates, max_rounds))
    return out
