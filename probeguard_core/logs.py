"""Typed records and strict readers/writers for the artifacts of DESIGN section 2.

Every artifact is JSON Lines (optionally gzip-compressed), one object per line, with
``"schema_version": 1``.  Unknown extra fields are kept (``model_extra``) and written back.
Nothing is repaired, defaulted or dropped: the first malformed record raises
:class:`LogFormatError` naming ``file:line: field: reason`` (for example
``logs.jsonl:3: rounds[1].candidates[2].logprob: Input should be a finite number (got nan)``).

The records are the paper's execution log (Section 3, DESIGN 2.1), the counter-evidence
probe (Eq. 4, Algorithm 1, DESIGN 2.2), the self-report baselines (Section 4.1, DESIGN 2.3)
and the NLI cache behind rationale semantic entropy (Eq. 3, Appendix C, DESIGN 2.4).

Public API (DESIGN 4): :func:`read_logs`, :func:`read_probe`, :func:`read_nli`,
:func:`read_self_report`, :class:`LogFormatError`; plus :func:`write_jsonl` (atomic writer),
:func:`iter_jsonl`, :func:`loc_to_field` (the one pydantic-location -> field-name mapper),
:func:`validate_record`, and the cross-file checks :func:`check_probe_consensus` and
:func:`check_nli_against_logs`.
"""

from __future__ import annotations

import gc
import gzip
import json
import math
import os
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

try:  # the fast JSON path of the strict readers; without it the stdlib path gives the same results
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a pinned dependency
    _orjson = None  # type: ignore[assignment]
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

SCHEMA_VERSION = 1
OPTION_KEY = re.compile(r"^[A-Z]\Z")
ARMS = ("counter_evidence", "instruction_only", "irrelevant_docs", "neutral_instruction")
MAX_PROBE_DOCS = 8
_GZIP_MAGIC = b"\x1f\x8b"
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
    "gc_paused",
    "iter_jsonl",
    "loc_to_field",
    "modal_answer",
    "read_logs",
    "read_nli",
    "read_probe",
    "read_records",
    "read_self_report",
    "validate_record",
    "write_jsonl",
]


class LogFormatError(ValueError):
    """A malformed artifact: carries ``path``, ``line`` (1-based, None for file-level) and ``field``.

    ``str(err)`` is ``file:line: field: reason`` (``file: field: reason`` without a line;
    ``<record>`` stands for the field when the whole line or file is at fault).
    """

    def __init__(self, path: str | os.PathLike[str], line: int | None, field: str | None, reason: str):
        self.path = str(path)
        self.line = line
        self.field = field
        self.reason = reason
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {field or '<record>'}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across worker processes
        return (type(self), (self.path, self.line, self.field, self.reason))


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
        if not all(0.0 <= v <= 1.0 for v in row):
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
        problem = log_problem(self)
        if problem:
            raise _FieldError(*problem)
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
        problem = probe_problem(self)
        if problem:
            raise _FieldError(*problem)
        return self


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
        problem = nli_problem(self)
        if problem:
            raise _FieldError(*problem)
        return self


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------

class _DuplicateKeys(dict):
    """A JSON object that repeated a key (json.loads would silently keep the last one)."""

    duplicates: list[str]


def _object_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) == len(pairs):
        return obj
    out = _DuplicateKeys(obj)
    out.duplicates = [k for k, n in Counter(k for k, _ in pairs).items() if n > 1]
    return out


def _scan(value: Any, loc: tuple[str | int, ...] = ()) -> tuple[tuple[str | int, ...], str] | None:
    """Find the first non-finite number or repeated key anywhere in a parsed JSON value."""
    if isinstance(value, float) and not math.isfinite(value):
        return loc, f"non-finite number {value!r} (JSON has no NaN or Infinity)"
    if isinstance(value, dict):
        if isinstance(value, _DuplicateKeys):
            return loc, f"duplicate key {value.duplicates[0]!r} in one JSON object"
        items: Iterable[tuple[str | int, Any]] = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for k, v in items:
        found = _scan(v, (*loc, k))
        if found:
            return found
    return None


def _raw_lines(p: Path) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, raw_bytes)``; gzip damage surfaces as LogFormatError at the next line."""
    n = 0
    try:
        with open(p, "rb") as fh:
            head = fh.read(2)
        if not head:
            return  # zero bytes: reported as an empty file by iter_jsonl
        if p.name.endswith(".gz"):
            if head != _GZIP_MAGIC:
                raise LogFormatError(p, None, None, "name ends in .gz but the file is not gzip-compressed")
            fh_ctx = gzip.open(p, "rb")
        elif head == _GZIP_MAGIC:
            raise LogFormatError(p, None, None, "file is gzip-compressed but its name does not end in .gz")
        else:
            fh_ctx = open(p, "rb")
        with fh_ctx as fh:
            for n, raw in enumerate(fh, start=1):
                yield n, raw
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise LogFormatError(p, n + 1, None, f"truncated or corrupt gzip data: {exc}") from None
    except FileNotFoundError:
        raise LogFormatError(p, None, None, "file does not exist") from None
    except OSError as exc:
        raise LogFormatError(p, None, None, f"cannot read file: {exc}") from None


def _parse_strict(p: Path, n: int, text: str) -> Any:
    """``json.loads`` that remembers repeated keys; pathological input becomes LogFormatError."""
    try:
        return json.loads(text, object_pairs_hook=_object_hook, parse_constant=float)
    except json.JSONDecodeError as exc:
        raise LogFormatError(p, n, None, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise LogFormatError(p, n, None, "invalid JSON: nesting too deep to parse") from None
    except ValueError as exc:  # an integer past the interpreter's digit limit (sys.get_int_max_str_digits)
        raise LogFormatError(p, n, None, f"invalid JSON: {exc}") from None


def _fast_object(raw: bytes) -> dict[str, Any] | None:
    """The line's object when it is provably clean, else None (the strict path then decides).

    orjson refuses NaN/Infinity, invalid UTF-8, integers beyond 64 bits and very deep nesting;
    re-encoding the parsed object and getting the line back byte for byte proves that no key was
    repeated (a repeated key would be lost, so the re-encoding would be shorter).  Lines written
    by :func:`write_jsonl` take this path; anything else is parsed by :func:`_parse_strict`.
    """
    if _orjson is None:
        return None
    body = raw[:-1] if raw.endswith(b"\n") else raw
    try:
        obj = _orjson.loads(body)
        return obj if type(obj) is dict and _orjson.dumps(obj) == body else None
    except (_orjson.JSONDecodeError, TypeError):  # TypeError: nesting deeper than orjson encodes
        return None


def _decode_line(p: Path, n: int, raw: bytes) -> dict[str, Any]:
    fast = _fast_object(raw)
    if fast is not None:
        return fast
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogFormatError(p, n, None, f"not valid UTF-8 (byte {exc.start})") from None
    text = text.removesuffix("\n").removesuffix("\r")
    if not text.strip():
        raise LogFormatError(p, n, None, "empty line (one JSON object per line expected)")
    obj = _parse_strict(p, n, text)
    if not isinstance(obj, dict):
        raise LogFormatError(p, n, None, f"expected a JSON object, got {type(obj).__name__}")
    try:
        bad = _scan(obj)
    except RecursionError:
        raise LogFormatError(p, n, None, "invalid JSON: nesting too deep to check") from None
    if bad:
        raise LogFormatError(p, n, loc_to_field(bad[0]) or None, bad[1])
    return dict(obj)


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for every line of a ``.jsonl`` or ``.jsonl.gz`` file.

    Rejected (``LogFormatError``): missing, empty or truncated files, non-UTF-8 bytes, blank
    lines (never skipped), invalid JSON, a line that is not an object, NaN/Infinity anywhere,
    and a key repeated inside one object.
    """
    p = Path(path)
    n = 0
    for n, raw in _raw_lines(p):
        yield n, _decode_line(p, n, raw)
    if n == 0:
        raise LogFormatError(p, None, None, "file is empty (no records)")


_TAG = re.compile(r"[\[\](),']")  # pydantic schema tags: function-after[...], literal['a'], list[int], ...


def loc_to_field(loc: Sequence[str | int]) -> str:
    """Map a pydantic error location to a field name: ``('rounds', 1, 'logprob')`` -> ``rounds[1].logprob``.

    Integers become ``[i]``; schema tags that pydantic inserts for unions and validator
    functions (they contain brackets, parentheses or quotes, which no DESIGN field name does)
    are dropped so that branch names never leak into field names.
    """
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _TAG.search(part):
            out += ("." if out else "") + part
    return out


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


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a file's records are built (issue 15).

    A cell is ~100,000 container objects; building them triggers repeated full collections
    that find nothing (records hold no reference cycles), which costs about as much as
    decoding them.  Reference counting still frees everything; the previous state is restored.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_records(model: type[_R], path: str | os.PathLike[str], key_fields: tuple[str, ...]) -> list[_R]:
    """Read a JSONL file of ``model`` records whose ``key_fields`` tuple is unique per file."""
    p = Path(path)
    out: list[_R] = []
    seen: dict[tuple[Any, ...], int] = {}
    with gc_paused():
        _read_into(out, seen, model, p, key_fields)
    return out


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

def _dump(rec: BaseModel | dict[str, Any]) -> str:
    obj = rec.model_dump(mode="json") if isinstance(rec, BaseModel) else rec
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def write_jsonl(path: str | os.PathLike[str], records: Iterable[BaseModel | dict[str, Any]]) -> Path:
    """Write records atomically (:func:`probeguard_core.fileio.atomic_open`); ``.gz`` paths are compressed.

    Output is byte-reproducible (compact JSON, no gzip timestamp or file name); NaN/inf
    raise ``ValueError`` rather than producing invalid JSON.  Extra fields are written back.
    """
    from probeguard_core.fileio import atomic_open

    p = Path(path)
    with atomic_open(p) as raw:
        if p.name.endswith(".gz"):
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                for rec in records:
                    gz.write((_dump(rec) + "\n").encode("utf-8"))
        else:
            for rec in records:
                raw.write((_dump(rec) + "\n").encode("utf-8"))
    return p
