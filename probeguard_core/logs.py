"""Typed records and their strict readers for the artifacts of DESIGN section 2.1-2.4.

The records are the paper's execution log (Section 3, DESIGN 2.1), the counter-evidence
probe (Eq. 4, Algorithm 1, DESIGN 2.2), the self-report baselines (Section 4.1, DESIGN 2.3)
and the NLI cache behind rationale semantic entropy (Eq. 3, Appendix C, DESIGN 2.4).  Each
record type is defined once, as a pydantic model (its fields, types and bounds); each rule
across fields once, as a plain function (:func:`log_problem`, :func:`nli_problem`, ...) that the
models' validators call.  Unknown extra fields are kept (``model_extra``) and written back.
Nothing is repaired, defaulted or dropped: the first malformed record raises
:class:`LogFormatError` naming ``file:line: field: reason`` (for example
``logs.jsonl:3: rounds[1].candidates[2].logprob: Input should be a finite number (got nan)``).

Reading is fast for every caller (issue 24): each model has a msgspec struct derived from it
(:func:`probeguard_core.structs.struct_of`, never written by hand), and :func:`read_records` first decodes the whole
file into these structs, requiring every line to re-encode to its own bytes and every rule to
hold; only when that declines (an error, or a legal file in another spelling or with extra
fields) are the lines validated by the pydantic models, which name the error or return the
models.  Either way the readers return the models (DESIGN section 3): an accepted struct is
turned into its model without re-validation (:func:`probeguard_core.structs.model_builder`,
as ``model_construct`` does), with the fields set that the line holds.  The lines of a file are read by
:mod:`probeguard_core.jsonl` (duplicate keys, NaN, bounded line and file sizes).

Public API (DESIGN 4): :func:`read_logs`, :func:`read_probe`, :func:`read_nli`,
:func:`read_self_report`, :class:`LogFormatError`; plus :func:`write_jsonl` (atomic writer),
:func:`validate_record`, and the cross-file checks
:func:`check_probe_consensus` and :func:`check_nli_against_logs`.
"""

from __future__ import annotations

import gzip
import json
import operator
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from probeguard_core.jsonl import LogFormatError, gc_paused, iter_jsonl, loc_to_field, raw_lines
from probeguard_core.structs import model_builder, struct_of

SCHEMA_VERSION = 1
OPTION_KEY = re.compile(r"^[A-Z]\Z")
ARMS = ("counter_evidence", "instruction_only", "irrelevant_docs", "neutral_instruction")
MAX_PROBE_DOCS = 8
#: Start of the reason given for a log whose last round is contested below ``max_rounds``.
CUT_SHORT = "log is cut short"

__all__ = [
    "ARMS",
    "CUT_SHORT",
    "Candidate",
    "Cost",
    "LogFormatError",
    "NLIRecord",
    "ProbeRecord",
    "QuestionLog",
    "ReAnswer",
    "Retrieval",
    "Round",
    "SelfReport",
    "check_nli_against_logs",
    "check_options",
    "check_probe_consensus",
    "consensus_problem",
    "json_line",
    "doc_ids_problem",
    "log_problem",
    "logprob_problem",
    "modal_answer",
    "nli_problem",
    "options_problem",
    "probe_problem",
    "read_logs",
    "read_nli",
    "read_probe",
    "read_records",
    "read_self_report",
    "validate_record",
    "version_problem",
    "jsonl_bytes",
    "write_jsonl",
]


class _FieldError(ValueError):
    """Raised inside validators to name the offending field precisely.

    ``loc`` is relative to the model (or field) whose validator raises it; :func:`_parse`
    prefixes pydantic's location of that validator.
    """

    def __init__(self, loc: str | int | tuple[str | int, ...], reason: str):
        self.loc: tuple[str | int, ...] = loc if isinstance(loc, tuple) else (loc,)
        self.reason = reason
        super().__init__(reason)


# --------------------------------------------------------------------------------------------
# Rules: each written once, as a plain function of a record's fields.  The pydantic validators
# below call them (raising the reason, which pydantic places at the field), and so does the
# fast read (:func:`_fast_problem`), which reads the same attributes of the record structs.
# --------------------------------------------------------------------------------------------

#: ``(location relative to the record, reason)`` of the first broken rule, or None.
_Broken = tuple[tuple[str | int, ...], str] | None

_T = TypeVar("_T")


def _raise_if(reason: str | None, value: _T) -> _T:
    """A field validator's body: raise ``reason`` (pydantic names the field), else pass ``value``."""
    if reason:
        raise ValueError(reason)
    return value


def _raise_broken(problem: _Broken, record: _T) -> _T:
    """A model validator's body: raise the broken rule at its field (:class:`_FieldError`), else pass."""
    if problem:
        raise _FieldError(*problem)
    return record


def version_problem(v: int) -> str | None:
    """Every record: ``schema_version`` is 1 (DESIGN 2)."""
    return None if v == SCHEMA_VERSION else f"unsupported schema_version {v}; this reader understands {SCHEMA_VERSION}"


def logprob_problem(v: float | None) -> str | None:
    """A candidate's ``logprob`` is a sum of token log-probabilities, so never positive (DESIGN 2.1)."""
    if v is not None and v > 0.0:
        return f"sequence log-probability {v!r} is positive (a sum of log-probabilities is <= 0)"
    return None


def doc_ids_problem(v: list[str]) -> str | None:
    """One round's retrieval (D_t, Eq. 10) names each document once."""
    if len(set(v)) != len(v):
        first = next(d for d, k in Counter(v).items() if k > 1)
        return f"document id {first!r} is retrieved more than once in one round"
    return None


def options_problem(v: dict[str, str]) -> str | None:
    """DESIGN 2.1 ``options``: at least 2 keys, each one uppercase letter."""
    if len(v) < 2:
        return f"needs at least 2 options, got {len(v)}"
    for k in v:
        if not OPTION_KEY.match(k):
            return f"option key {k!r} is not one uppercase letter"
    return None


def consensus_problem(v: str) -> str | None:
    """DESIGN 2.2 ``consensus``: the unanimous first-round answer m*, one uppercase letter."""
    return None if OPTION_KEY.match(v) else f"consensus {v!r} is not one uppercase letter"


def _unanimous(rnd: Any) -> bool:
    answers = {c.answer for c in rnd.candidates}
    return len(answers) == 1 and None not in answers


def log_problem(log: Any) -> _Broken:
    """The rules across one log's fields (DESIGN 2.1, Section 3): gold among the options, at most
    ``max_rounds`` rounds numbered 1, 2, ... with ``n_candidates`` candidates each, answers among
    the options (or null), a stop at unanimity, no retrieval after the last round, and a contested
    last round only at ``max_rounds``."""
    options = log.options
    if log.gold not in options:
        return ("gold",), f"{log.gold!r} is not among the options {sorted(options)}"
    rounds = log.rounds
    n_rounds, n = len(rounds), log.n_candidates
    if n_rounds > log.max_rounds:
        return ("rounds",), f"{n_rounds} rounds exceed max_rounds={log.max_rounds}"
    for t, rnd in enumerate(rounds, start=1):
        at = ("rounds", t - 1)
        if rnd.round != t:
            return (*at, "round"), f"expected round {t} (consecutive from 1), got {rnd.round}"
        cands = rnd.candidates
        if len(cands) != n:
            return (*at, "candidates"), f"expected n_candidates={n} candidates, got {len(cands)}"
        for i, cand in enumerate(cands):
            if cand.answer is not None and cand.answer not in options:
                return (*at, "candidates", i, "answer"), f"{cand.answer!r} is not among the options {sorted(options)}"
        if t < n_rounds and _unanimous(rnd):
            return at, f"round {t} is unanimous but is followed by round {t + 1} (the substrate stops at unanimity)"
    last = rounds[-1]
    if last.retrieval is not None:
        reason = f"round {last.round} is the last logged round but has a retrieval (evidence is retrieved for a next round)"
        return ("rounds", n_rounds - 1, "retrieval"), reason
    if len({c.answer for c in last.candidates}) > 1 and n_rounds < log.max_rounds:
        return ("rounds",), (f"{CUT_SHORT}: round {last.round} is contested but only {n_rounds} of "
                             f"max_rounds={log.max_rounds} rounds are logged (the substrate stops only at unanimity or max_rounds)")
    return None


def probe_problem(rec: Any) -> _Broken:
    """DESIGN 2.2 across a probe record's fields: the instruction_only arm has no queries and no
    documents; each re-answer is null or one uppercase letter."""
    if rec.arm == "instruction_only":
        for name in ("queries", "doc_ids"):
            if getattr(rec, name):
                return (name,), "the instruction_only arm has no queries and no documents"
    for i, cand in enumerate(rec.reanswers):
        if cand.answer is not None and not OPTION_KEY.match(cand.answer):
            return ("reanswers", i, "answer"), f"{cand.answer!r} is not one uppercase letter"
    return None


def nli_problem(rec: Any) -> _Broken:
    """DESIGN 2.4 across an NLI record's fields (Eq. 3): distinct candidate indices, one claim per
    candidate, a square matrix of probabilities in [0, 1]."""
    cands = rec.candidates
    n = len(cands)
    if len(set(cands)) != n:
        dup = [c for c, k in Counter(cands).items() if k > 1]
        return ("candidates",), f"candidate index {dup[0]} is listed more than once"
    if len(rec.claims) != n:
        return ("claims",), f"{len(rec.claims)} claims for {n} candidate indices (one per candidate)"
    if len(rec.entailment) != n:
        return ("entailment",), f"matrix has {len(rec.entailment)} rows for {n} claims"
    for i, row in enumerate(rec.entailment):
        if len(row) != n:
            return ("entailment", i), f"matrix is not square: row has {len(row)} entries, expected {n}"
        if row and not 0.0 <= min(row) <= max(row) <= 1.0:
            j = next(j for j, v in enumerate(row) if not 0.0 <= v <= 1.0)
            return ("entailment", i, j), f"probability {row[j]!r} is not in [0, 1]"
    return None


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------

#: A finite JSON number (an int is accepted and stored as float; bool, str, NaN, inf are not).
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
NonNegInt = Annotated[int, Field(ge=0)]
NonEmptyStr = Annotated[str, Field(min_length=1)]


class _Record(BaseModel):
    """Base: strict types (no bool-as-int, no str-as-number), extra fields allowed and preserved."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=False)


class _Versioned(_Record):
    """A top-level record: ``schema_version`` must be the integer 1 (not 1.0, not true)."""

    schema_version: StrictInt

    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: int) -> int:
        return _raise_if(version_problem(v), v)


class Cost(_Record):
    """Inference cost of one question or probe arm (Appendix L)."""

    wall_s: FiniteFloat = Field(ge=0)
    completion_tokens: NonNegInt


class Candidate(_Record):
    """One sampled answer with its rationale (DESIGN 2.1 ``rounds[t].candidates[i]``).

    All five fields are required keys (null allowed where noted); nothing is defaulted.
    ``logprob`` is a sum of token log-probabilities, so it is never positive.
    """

    answer: StrictStr | None
    rationale: StrictStr
    logprob: FiniteFloat | None
    n_tokens: NonNegInt | None
    mean_token_entropy: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None

    @field_validator("logprob")
    @classmethod
    def _log_probability(cls, v: float | None) -> float | None:
        return _raise_if(logprob_problem(v), v)


class ReAnswer(Candidate):
    """A probe re-answer (DESIGN 2.2): shaped like a candidate; ``mean_token_entropy`` optional."""

    mean_token_entropy: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None


class Retrieval(_Record):
    """Evidence retrieved after a round (D_t, Eq. 10)."""

    queries: list[StrictStr]
    doc_ids: list[StrictStr]

    @field_validator("doc_ids")
    @classmethod
    def _distinct_docs(cls, v: list[str]) -> list[str]:
        return _raise_if(doc_ids_problem(v), v)


class Round(_Record):
    """One round t of the substrate: N candidates and the retrieval that followed."""

    round: StrictInt = Field(ge=1)
    candidates: list[Candidate]
    retrieval: Retrieval | None


def modal_answer(rnd: Round) -> str | None:
    """The round's modal *vote* among answers cast, ties to the alphabetically first key.

    None when every candidate's answer is null: such a round has no voters, hence no NLI
    record (DESIGN 2.4), and no modal answer (DESIGN 3); the feature arithmetic's m_t
    (:func:`probeguard_core.features.modal_answer`) agrees on every round.
    """
    counts = Counter(c.answer for c in rnd.candidates if c.answer is not None)
    if not counts:
        return None
    top = max(counts.values())
    return min(a for a, k in counts.items() if k == top)


def check_options(v: dict[str, str]) -> dict[str, str]:
    """DESIGN 2.1 ``options``: at least 2 keys, each one uppercase letter (raises ValueError)."""
    return _raise_if(options_problem(v), v)


class QuestionLog(_Versioned):
    """One question's execution log (DESIGN 2.1; Section 3 of the paper)."""

    qid: NonEmptyStr
    dataset: NonEmptyStr
    backbone: NonEmptyStr
    question: StrictStr
    options: dict[StrictStr, StrictStr]
    gold: StrictStr
    specialty: StrictStr | None
    n_candidates: StrictInt = Field(ge=1)
    max_rounds: StrictInt = Field(ge=1)
    rounds: list[Round] = Field(min_length=1)
    cost: Cost | None

    @field_validator("options")
    @classmethod
    def _option_keys(cls, v: dict[str, str]) -> dict[str, str]:
        return check_options(v)

    @model_validator(mode="after")
    def _consistency(self) -> QuestionLog:
        _raise_broken(log_problem(self), self)
        if not isinstance(self.probe_pilot, (bool, type(None))):  # optional field, DESIGN 2.1
            raise _FieldError("probe_pilot", f"expected true or false, got {self.probe_pilot!r}")
        return self

    @property
    def probe_pilot(self) -> bool | None:
        """DESIGN 2.1 optional ``probe_pilot``: the question was in the probe pilot (§5.2); None = not recorded."""
        return (self.model_extra or {}).get("probe_pilot")


class ProbeRecord(_Versioned):
    """One (question, arm) of the counter-evidence probe (DESIGN 2.2, Eq. 4, Algorithm 1)."""

    qid: NonEmptyStr
    dataset: NonEmptyStr
    backbone: NonEmptyStr
    arm: Literal["counter_evidence", "instruction_only", "irrelevant_docs", "neutral_instruction"]
    consensus: StrictStr
    queries: list[StrictStr]
    doc_ids: list[StrictStr] = Field(max_length=MAX_PROBE_DOCS)
    reanswers: list[ReAnswer] = Field(min_length=1)
    cost: Cost | None

    @field_validator("reanswers", mode="before")
    @classmethod
    def _accept_candidates(cls, v: Any) -> Any:
        """Let callers pass :class:`Candidate` objects; they are re-validated as :class:`ReAnswer`."""
        if isinstance(v, list):
            return [c.model_dump() if type(c) is Candidate else c for c in v]
        return v

    @field_validator("consensus")
    @classmethod
    def _consensus_key(cls, v: str) -> str:
        return _raise_if(consensus_problem(v), v)

    @model_validator(mode="after")
    def _arm_rules(self) -> ProbeRecord:
        return _raise_broken(probe_problem(self), self)


class SelfReport(_Versioned):
    """Post-hoc self-report baselines (DESIGN 2.3; verbalized confidence and P(True), Section 4.1)."""

    qid: NonEmptyStr
    dataset: NonEmptyStr
    backbone: NonEmptyStr
    verbalized_confidence: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] | None
    p_true: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None


class NLIRecord(_Versioned):
    """Entailment among one round's concluding claims (DESIGN 2.4; Eq. 3, Appendix C)."""

    qid: NonEmptyStr
    dataset: NonEmptyStr
    backbone: NonEmptyStr
    round: StrictInt = Field(ge=1)
    model: NonEmptyStr
    candidates: list[NonNegInt] = Field(min_length=1)
    claims: list[StrictStr]
    entailment: list[list[FiniteFloat]]

    @model_validator(mode="after")
    def _matrix(self) -> NLIRecord:
        return _raise_broken(nli_problem(self), self)


# --------------------------------------------------------------------------------------------
# The records as msgspec structs, derived from the models above (never written a second time)
# --------------------------------------------------------------------------------------------

#: DESIGN 2.1's one optional field (§5.2's pilot marker), last; absent = None, left out of the encoding.
QuestionLogStruct = struct_of(QuestionLog, __name__, extra=[("probe_pilot", bool | None, None)])
NLIRecordStruct = struct_of(NLIRecord, __name__)
CandidateStruct = struct_of(Candidate, __name__)
RoundStruct = struct_of(Round, __name__)
RetrievalStruct = struct_of(Retrieval, __name__)
CostStruct = struct_of(Cost, __name__)


def _log_struct_ok(log: Any) -> bool:
    """Every rule of :class:`QuestionLog` and of the records inside it holds for a decoded struct."""
    if version_problem(log.schema_version) or options_problem(log.options):
        return False
    for rnd in log.rounds:
        ret = rnd.retrieval
        if ret is not None and doc_ids_problem(ret.doc_ids):
            return False
        if any(map(logprob_problem, [c.logprob for c in rnd.candidates])):
            return False
    return log_problem(log) is None


def _nli_struct_ok(rec: Any) -> bool:
    """Every rule of :class:`NLIRecord` holds for a decoded struct."""
    return not version_problem(rec.schema_version) and nli_problem(rec) is None


#: model -> (decoder of one line, "every rule of the model holds" on the decoded struct, struct -> model)
_FAST: dict[type[BaseModel], tuple[Any, Any, Any]] = {
    QuestionLog: (msgspec.json.Decoder(QuestionLogStruct).decode, _log_struct_ok, model_builder(QuestionLog)),
    NLIRecord: (msgspec.json.Decoder(NLIRecordStruct).decode, _nli_struct_ok, model_builder(NLIRecord)),
}
_ENCODE = msgspec.json.Encoder().encode


def _format_pydantic(err: Any) -> tuple[tuple[str | int, ...], str]:
    """(location, reason) for one pydantic error dict, resolving our own _FieldError."""
    loc = tuple(err["loc"])
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _FieldError):
        return (*loc, *ctx_error.loc), ctx_error.reason
    if err["type"] == "missing":
        return loc, "missing required field"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if "input" in err and err["type"] != "value_error":
        shown = repr(err["input"])
        msg = f"{msg} (got {shown if len(shown) <= 60 else shown[:57] + '...'})"
    return loc, msg


_R = TypeVar("_R", bound=BaseModel)


def validate_record(model: type[_R], obj: Any, path: str | os.PathLike[str], line: int | None) -> _R:
    """Validate one parsed object as ``model``; any failure becomes ``LogFormatError(path, line, field)``."""
    if not isinstance(obj, dict):
        raise LogFormatError(path, line, None, f"expected a JSON object, got {type(obj).__name__}")
    try:
        return model.model_validate(obj)
    except RecursionError:
        raise LogFormatError(path, line, None, "invalid JSON: nesting too deep to validate") from None
    except ValidationError as exc:
        loc, reason = _format_pydantic(exc.errors(include_url=False)[0])
        raise LogFormatError(path, line, loc_to_field(loc) or None, reason) from None


def read_records(model: type[_R], path: str | os.PathLike[str], key_fields: tuple[str, ...]) -> list[_R]:
    """Read a JSONL file of ``model`` records whose ``key_fields`` tuple is unique per file.

    Logs and NLI records are first read fast (:func:`_read_fast`: the derived structs, every rule
    applied, then built into the models without re-validation); when that declines, each line is validated by the pydantic model, which either
    raises the ``file:line: field: reason`` error or returns the records (a file with fields
    beyond DESIGN's, another key order or spacing).  Either way the same values are returned.
    """
    p = Path(path)
    with gc_paused():
        fast = _read_fast(model, p, key_fields)
        if fast is not None:
            return fast
        out: list[_R] = []
        _read_into(out, {}, model, p, key_fields)
    return out


def _read_fast(model: type[BaseModel], p: Path, key_fields: tuple[str, ...]) -> list[Any] | None:
    """The file's records as models when every line is provably valid, else None.

    Each line is decoded by msgspec into the struct (types and bounds checked in C) and must
    re-encode to its own bytes: that proves that it holds exactly DESIGN's fields in order, no key
    repeated (a repeated key would be lost), no NaN / Infinity and numbers of the declared types
    (``1.0`` for an int or ``-5`` for a float is declined).  Lines that :func:`write_jsonl` writes
    pass.  Then every rule of the model holds (the rule functions above) and the keys are unique,
    so the models are built from the structs without validating again.
    It never raises: anything unusual is declined, and the pydantic path names the error.
    """
    spec = _FAST.get(model)
    if spec is None:
        return None
    decode, ok, build = spec
    try:
        lines = [raw for _, raw in raw_lines(p)]
        recs = [decode(raw) for raw in lines]
        same = all(map(operator.eq, map(_ENCODE, recs), lines))
    except (LogFormatError, msgspec.MsgspecError, ValueError, OverflowError, RecursionError):
        return None  # UnicodeDecodeError is a ValueError
    if not recs or not same or not all(map(ok, recs)):
        return None
    key = operator.attrgetter(*key_fields)
    if len(set(map(key, recs))) != len(recs):
        return None
    return build(recs)


def _read_into(out: list[_R], seen: dict[tuple[Any, ...], int], model: type[_R], p: Path,
               key_fields: tuple[str, ...]) -> None:
    for line, obj in iter_jsonl(p):
        rec = validate_record(model, obj, p, line)
        key = tuple(getattr(rec, f) for f in key_fields)
        if key in seen:
            what = ", ".join(f"{f}={v!r}" for f, v in zip(key_fields, key))
            reason = f"duplicate record {what} (first on line {seen[key]})"
            raise LogFormatError(p, line, key_fields[-1], reason)
        seen[key] = line
        out.append(rec)


def read_logs(path: str | os.PathLike[str]) -> list[QuestionLog]:
    """Read execution logs (DESIGN 2.1); qids must be unique within the file."""
    return read_records(QuestionLog, path, ("qid",))


def read_probe(path: str | os.PathLike[str], logs: Iterable[QuestionLog] | None = None) -> list[ProbeRecord]:
    """Read probe records (DESIGN 2.2, Algorithm 1); one per (qid, arm).

    With ``logs`` given, each record is checked against its question by
    :func:`check_probe_consensus`.
    """
    records = read_records(ProbeRecord, path, ("qid", "arm"))
    if logs is not None:
        check_probe_consensus(records, logs, path)
    return records


def read_nli(path: str | os.PathLike[str], logs: Iterable[QuestionLog] | None = None) -> list[NLIRecord]:
    """Read the NLI cache (DESIGN 2.4, Eq. 3); one record per (qid, round).

    With ``logs`` given, each record is checked against its round by :func:`check_nli_against_logs`.
    """
    records = read_records(NLIRecord, path, ("qid", "round"))
    if logs is not None:
        check_nli_against_logs(records, logs, path)
    return records


def read_self_report(path: str | os.PathLike[str]) -> list[SelfReport]:
    """Read self-report baselines (DESIGN 2.3); qids unique."""
    return read_records(SelfReport, path, ("qid",))


# --------------------------------------------------------------------------------------------
# Cross-file checks (records are numbered by position = file line, as the readers keep order)
# --------------------------------------------------------------------------------------------

_Problem = tuple[str, str] | None  # (field, reason) of a cross-file mismatch, or None


def _probe_problem(rec: ProbeRecord, log: QuestionLog) -> _Problem:
    first = log.rounds[0]
    if not _unanimous(first):
        return "consensus", f"question {rec.qid!r} is not unanimous in round 1; it cannot be probed"
    m = first.candidates[0].answer
    if rec.consensus != m:
        return "consensus", f"{rec.consensus!r} differs from the log's unanimous first-round answer {m!r}"
    if len(rec.reanswers) != log.n_candidates:
        return "reanswers", f"expected N={log.n_candidates} re-answers, got {len(rec.reanswers)}"
    for i, c in enumerate(rec.reanswers):
        if c.answer is not None and c.answer not in log.options:
            return f"reanswers[{i}].answer", f"{c.answer!r} is not among the options {sorted(log.options)}"
    return None


def check_probe_consensus(
    records: Sequence[ProbeRecord], logs: Iterable[QuestionLog], path: str | os.PathLike[str] = "<probe>"
) -> None:
    """Reject a probe record that does not fit its question's log (DESIGN 2.2, Algorithm 1).

    For a record whose qid is in ``logs``: the question's first round must be unanimous on one
    non-null answer equal to ``consensus``; there must be N re-answers, each null or an option
    key of that question.  Records for qids absent from ``logs`` are left alone (a probe file
    may cover an extra pool).  Line numbers are positions in ``records`` (1-based).
    """
    by_qid = {log.qid: log for log in logs}
    for line, rec in enumerate(records, start=1):
        log = by_qid.get(rec.qid)
        problem = None if log is None else _probe_problem(rec, log)
        if problem:
            raise LogFormatError(path, line, *problem)


def _nli_problem(rec: NLIRecord, log: QuestionLog) -> _Problem:
    if rec.round > len(log.rounds):
        return "round", f"question {rec.qid!r} has {len(log.rounds)} logged rounds, not round {rec.round}"
    rnd = log.rounds[rec.round - 1]
    m = modal_answer(rnd)
    if m is None:
        return "round", f"round {rec.round} of {rec.qid!r} has no non-null answer, so no modal voters"
    voters = [i for i, c in enumerate(rnd.candidates) if c.answer == m]
    if sorted(rec.candidates) != voters:
        return "candidates", f"{rec.candidates} are not the voters {voters} of round {rec.round}'s modal answer {m!r}"
    if len(rec.claims) != len(rec.candidates):
        return "claims", f"{len(rec.claims)} claims for {len(rec.candidates)} candidates"
    return None


def check_nli_against_logs(
    nli: Sequence[NLIRecord],
    logs: Iterable[QuestionLog],
    path: str | os.PathLike[str] = "<nli>",
    allow_unknown_qids: bool = False,
) -> None:
    """Reject an NLI record that does not describe its round (DESIGN 2.4, Eq. 3, Appendix C).

    The qid must be in ``logs`` (unless ``allow_unknown_qids``), the round must be logged
    (1..T_stop), the round must have a modal answer m_t (DESIGN 3), and ``candidates`` must be
    exactly the indices of the candidates voting m_t, in any order (all N on a unanimous round);
    one claim per listed candidate.  Line numbers are positions in ``nli`` (1-based).
    """
    by_qid = {log.qid: log for log in logs}
    for line, rec in enumerate(nli, start=1):
        log = by_qid.get(rec.qid)
        if log is None and not allow_unknown_qids:
            raise LogFormatError(path, line, "qid", f"{rec.qid!r} is not in the execution logs")
        problem = None if log is None else _nli_problem(rec, log)
        if problem:
            raise LogFormatError(path, line, *problem)


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

def json_line(rec: BaseModel | dict[str, Any]) -> str:
    """A record (a model or a plain dict) as one artifact line, ``\\n`` included:
    compact JSON, UTF-8 as is, NaN / Infinity refused (``ValueError``).  The one line format of
    :func:`write_jsonl` and of the pipeline's append-only run files."""
    obj = rec.model_dump(mode="json") if isinstance(rec, BaseModel) else rec
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n"


def _write_records(raw: Any, name: str, records: Iterable[BaseModel | dict[str, Any]]) -> None:
    """The one artifact file format: :func:`json_line` per record, gzip (no timestamp, no file
    name) when ``name`` ends in ``.gz``."""
    if name.endswith(".gz"):
        with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
            for rec in records:
                gz.write(json_line(rec).encode("utf-8"))
    else:
        for rec in records:
            raw.write(json_line(rec).encode("utf-8"))


def jsonl_bytes(path: str | os.PathLike[str], records: Iterable[BaseModel | dict[str, Any]]) -> bytes:
    """The bytes :func:`write_jsonl` writes to ``path``, for a file written as one of a set
    (:func:`probeguard_core.fileio.write_files_atomically`)."""
    import io

    buf = io.BytesIO()
    _write_records(buf, Path(path).name, records)
    return buf.getvalue()


def write_jsonl(path: str | os.PathLike[str], records: Iterable[BaseModel | dict[str, Any]]) -> Path:
    """Write records atomically (:func:`probeguard_core.fileio.atomic_open`); ``.gz`` paths are compressed.

    Output is byte-reproducible (compact JSON, no gzip timestamp or file name); NaN/inf
    raise ``ValueError`` rather than producing invalid JSON.  Extra fields are written back.
    """
    from probeguard_core.fileio import atomic_open

    p = Path(path)
    with atomic_open(p) as raw:
        _write_records(raw, p.name, records)
    return p
