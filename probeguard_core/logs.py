"""Typed records and strict readers/writers for the artifacts of DESIGN section 2.

Every artifact is JSON Lines (optionally gzip-compressed), one object per line, with
``"schema_version": 1``.  Unknown extra fields are kept (``model_extra``) and written back.
Nothing is repaired, defaulted or dropped: the first malformed record raises
:class:`LogFormatError` naming ``file:line: field: reason``.

Public API (DESIGN 4): :func:`read_logs`, :func:`read_probe`, :func:`read_nli`,
:func:`read_self_report`, :class:`LogFormatError`; plus :func:`write_jsonl` (atomic writer)
and :func:`check_probe_consensus` for the cross-file rule of DESIGN 2.2.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

SCHEMA_VERSION = 1
OPTION_KEY = re.compile(r"^[A-Z]$")
ARMS = ("counter_evidence", "instruction_only", "irrelevant_docs", "neutral_instruction")

__all__ = [
    "ARMS",
    "Candidate",
    "Cost",
    "LogFormatError",
    "NLIRecord",
    "ProbeRecord",
    "QuestionLog",
    "Retrieval",
    "Round",
    "SelfReport",
    "check_probe_consensus",
    "iter_jsonl",
    "read_logs",
    "read_nli",
    "read_probe",
    "read_self_report",
    "write_jsonl",
]


class LogFormatError(ValueError):
    """A malformed artifact: carries ``path``, ``line`` (1-based, None for file-level) and ``field``."""

    def __init__(self, path: str | os.PathLike[str], line: int | None, field: str | None, reason: str):
        self.path = str(path)
        self.line = line
        self.field = field
        self.reason = reason
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {field or '<record>'}: {reason}")


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------

FiniteFloat = StrictFloat | StrictInt  # JSON has no int/float distinction for numbers like 0


def _finite(value: float | None, name: str) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


class _Record(BaseModel):
    """Base: strict types, extra fields allowed and preserved."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=False)


class Cost(_Record):
    wall_s: FiniteFloat = Field(ge=0)
    completion_tokens: StrictInt = Field(ge=0)

    @field_validator("wall_s")
    @classmethod
    def _wall_finite(cls, v: float) -> float:
        return _finite(v, "wall_s")  # type: ignore[return-value]


class Candidate(_Record):
    """One sampled answer with its rationale (DESIGN 2.1)."""

    answer: StrictStr | None
    rationale: StrictStr
    logprob: FiniteFloat | None = None
    n_tokens: StrictInt | None = Field(default=None, ge=0)
    mean_token_entropy: FiniteFloat | None = None

    @field_validator("logprob", "mean_token_entropy")
    @classmethod
    def _is_finite(cls, v: float | None, info: Any) -> float | None:
        return _finite(v, info.field_name)


class Retrieval(_Record):
    """Evidence retrieved after a round (D_t)."""

    queries: list[StrictStr]
    doc_ids: list[StrictStr]


class Round(_Record):
    round: StrictInt = Field(ge=1)
    candidates: list[Candidate]
    retrieval: Retrieval | None


class QuestionLog(_Record):
    """One question's execution log (DESIGN 2.1)."""

    schema_version: Literal[1]
    qid: StrictStr = Field(min_length=1)
    dataset: StrictStr
    backbone: StrictStr
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
        if len(v) < 2:
            raise ValueError(f"needs at least 2 options, got {len(v)}")
        bad = [k for k in v if not OPTION_KEY.match(k)]
        if bad:
            raise ValueError(f"option key {bad[0]!r} is not one uppercase letter")
        return v

    @model_validator(mode="after")
    def _consistency(self) -> QuestionLog:
        if self.gold not in self.options:
            raise _FieldError("gold", f"{self.gold!r} is not among the options {sorted(self.options)}")
        if len(self.rounds) > self.max_rounds:
            raise _FieldError("rounds", f"{len(self.rounds)} rounds exceed max_rounds={self.max_rounds}")
        for t, rnd in enumerate(self.rounds, start=1):
            if rnd.round != t:
                raise _FieldError(f"rounds[{t - 1}].round", f"expected round {t} (consecutive from 1), got {rnd.round}")
            if len(rnd.candidates) != self.n_candidates:
                raise _FieldError(
                    f"rounds[{t - 1}].candidates",
                    f"expected n_candidates={self.n_candidates} candidates, got {len(rnd.candidates)}",
                )
            for i, cand in enumerate(rnd.candidates):
                if cand.answer is not None and cand.answer not in self.options:
                    raise _FieldError(
                        f"rounds[{t - 1}].candidates[{i}].answer",
                        f"{cand.answer!r} is not among the options {sorted(self.options)}",
                    )
            answers = {c.answer for c in rnd.candidates}
            unanimous = len(answers) == 1 and None not in answers
            if unanimous and t < len(self.rounds):
                raise _FieldError(
                    f"rounds[{t - 1}]",
                    f"round {t} is unanimous but is followed by round {t + 1} (the substrate stops at unanimity)",
                )
        return self


class ProbeRecord(_Record):
    """One (question, arm) of the counter-evidence probe (DESIGN 2.2, Algorithm 1)."""

    schema_version: Literal[1]
    qid: StrictStr = Field(min_length=1)
    dataset: StrictStr
    backbone: StrictStr
    arm: Literal["counter_evidence", "instruction_only", "irrelevant_docs", "neutral_instruction"]
    consensus: StrictStr
    queries: list[StrictStr]
    doc_ids: list[StrictStr] = Field(max_length=8)
    reanswers: list[Candidate] = Field(min_length=1)
    cost: Cost | None

    @field_validator("consensus")
    @classmethod
    def _consensus_key(cls, v: str) -> str:
        if not OPTION_KEY.match(v):
            raise ValueError(f"consensus {v!r} is not one uppercase letter")
        return v

    @model_validator(mode="after")
    def _arm_rules(self) -> ProbeRecord:
        if self.arm == "instruction_only" and (self.queries or self.doc_ids):
            raise _FieldError("doc_ids", "the instruction_only arm has no queries and no documents")
        for i, cand in enumerate(self.reanswers):
            if cand.answer is not None and not OPTION_KEY.match(cand.answer):
                raise _FieldError(f"reanswers[{i}].answer", f"{cand.answer!r} is not one uppercase letter")
        return self


class SelfReport(_Record):
    """Post-hoc self-report baselines (DESIGN 2.3)."""

    schema_version: Literal[1]
    qid: StrictStr = Field(min_length=1)
    dataset: StrictStr
    backbone: StrictStr
    verbalized_confidence: FiniteFloat | None = Field(ge=0, le=100)
    p_true: FiniteFloat | None = Field(ge=0, le=1)

    @field_validator("verbalized_confidence", "p_true")
    @classmethod
    def _is_finite(cls, v: float | None, info: Any) -> float | None:
        return _finite(v, info.field_name)


class NLIRecord(_Record):
    """Entailment among one round's concluding claims (DESIGN 2.4)."""

    schema_version: Literal[1]
    qid: StrictStr = Field(min_length=1)
    dataset: StrictStr
    backbone: StrictStr
    round: StrictInt = Field(ge=1)
    model: StrictStr
    candidates: list[StrictInt]
    claims: list[StrictStr]
    entailment: list[list[FiniteFloat]]

    @model_validator(mode="after")
    def _matrix(self) -> NLIRecord:
        n = len(self.claims)
        if len(self.candidates) != n:
            raise _FieldError("candidates", f"{len(self.candidates)} candidate indices for {n} claims")
        if len(set(self.candidates)) != len(self.candidates) or any(c < 0 for c in self.candidates):
            raise _FieldError("candidates", "candidate indices must be distinct and non-negative")
        if len(self.entailment) != n:
            raise _FieldError("entailment", f"matrix has {len(self.entailment)} rows for {n} claims")
        for i, row in enumerate(self.entailment):
            if len(row) != n:
                raise _FieldError(f"entailment[{i}]", f"matrix is not square: row has {len(row)} entries, expected {n}")
            for j, v in enumerate(row):
                if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                    raise _FieldError(f"entailment[{i}][{j}]", f"probability {v!r} is not in [0, 1]")
        return self


class _FieldError(ValueError):
    """Raised inside model validators to name the offending field precisely."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(reason)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------

def _open_text(path: Path, mode: str = "rt"):
    if path.name.endswith(".gz"):
        return gzip.open(path, mode, encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def _reject_constant(name: str) -> float:
    raise ValueError(f"non-standard JSON number {name}")


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for every line; blank lines are errors, not skipped."""
    p = Path(path)
    if not p.exists():
        raise LogFormatError(p, None, None, "file does not exist")
    n = 0
    try:
        with _open_text(p) as fh:
            for n, raw in enumerate(fh, start=1):
                text = raw.rstrip("\n").rstrip("\r")
                if not text.strip():
                    raise LogFormatError(p, n, None, "empty line (one JSON object per line expected)")
                try:
                    obj = json.loads(text, parse_constant=_reject_constant)
                except (json.JSONDecodeError, ValueError) as exc:
                    raise LogFormatError(p, n, None, f"invalid JSON: {exc}") from None
                if not isinstance(obj, dict):
                    raise LogFormatError(p, n, None, f"expected a JSON object, got {type(obj).__name__}")
                yield n, obj
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as exc:
        if isinstance(exc, LogFormatError):
            raise
        raise LogFormatError(p, n + 1 if n else None, None, f"unreadable or truncated file: {exc}") from None
    except UnicodeDecodeError as exc:
        raise LogFormatError(p, n + 1, None, f"not UTF-8: {exc}") from None
    if n == 0:
        raise LogFormatError(p, None, None, "file is empty (no records)")


def _loc_to_field(loc: Sequence[str | int]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


_R = TypeVar("_R", bound=_Record)


def _parse(model: type[_R], path: Path, line: int, obj: dict[str, Any]) -> _R:
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, _FieldError):
            raise LogFormatError(path, line, ctx_error.field, ctx_error.reason) from None
        loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "union[", "list[", "dict[")))]
        # pydantic puts union branch names (e.g. 'float', 'int') into loc; drop trailing type tags
        loc = [p for p in loc if p not in ("float", "int", "str", "none", "StrictFloat", "StrictInt", "StrictStr", "literal['counter_evidence','instruction_only','irrelevant_docs','neutral_instruction']")]
        field = _loc_to_field(loc) or None
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "missing":
            msg = "missing required field"
        elif "input" in err and err["type"] not in ("missing",):
            shown = repr(err["input"])
            if len(shown) > 60:
                shown = shown[:57] + "..."
            msg = f"{msg} (got {shown})"
        raise LogFormatError(path, line, field, msg) from None


def _read(model: type[_R], path: str | os.PathLike[str], unique_key: Any) -> list[_R]:
    p = Path(path)
    out: list[_R] = []
    seen: dict[Any, int] = {}
    for line, obj in iter_jsonl(p):
        rec = _parse(model, p, line, obj)
        key = unique_key(rec)
        if key in seen:
            raise LogFormatError(p, line, "qid", f"duplicate {key!r} (first seen on line {seen[key]})")
        seen[key] = line
        out.append(rec)
    return out


def read_logs(path: str | os.PathLike[str]) -> list[QuestionLog]:
    """Read execution logs (DESIGN 2.1); qids must be unique within the file."""
    return _read(QuestionLog, path, lambda r: r.qid)


def read_probe(path: str | os.PathLike[str], logs: Iterable[QuestionLog] | None = None) -> list[ProbeRecord]:
    """Read probe records (DESIGN 2.2); one per (qid, arm).

    With ``logs`` given, each record's ``consensus`` must equal that question's unanimous
    first-round answer (see :func:`check_probe_consensus`).
    """
    records = _read(ProbeRecord, path, lambda r: (r.qid, r.arm))
    if logs is not None:
        check_probe_consensus(records, logs, path)
    return records


def read_nli(path: str | os.PathLike[str]) -> list[NLIRecord]:
    """Read the NLI cache (DESIGN 2.4); one record per (qid, round)."""
    return _read(NLIRecord, path, lambda r: (r.qid, r.round))


def read_self_report(path: str | os.PathLike[str]) -> list[SelfReport]:
    """Read self-report baselines (DESIGN 2.3); qids unique."""
    return _read(SelfReport, path, lambda r: r.qid)


def check_probe_consensus(
    records: Sequence[ProbeRecord], logs: Iterable[QuestionLog], path: str | os.PathLike[str] = "<probe>"
) -> None:
    """Reject a probe record whose consensus is not the log's unanimous first-round answer.

    A record whose qid is in ``logs`` must point to a question whose first round is unanimous
    on one non-null answer equal to ``consensus``.  Records for qids absent from ``logs`` are
    left alone (a probe file may cover an extra pool).
    """
    by_qid = {log.qid: log for log in logs}
    for line, rec in enumerate(records, start=1):
        log = by_qid.get(rec.qid)
        if log is None:
            continue
        first = {c.answer for c in log.rounds[0].candidates}
        if len(first) != 1 or None in first:
            raise LogFormatError(path, line, "consensus", f"question {rec.qid!r} is not unanimous in round 1; it cannot be probed")
        (m,) = first
        if rec.consensus != m:
            raise LogFormatError(path, line, "consensus", f"{rec.consensus!r} differs from the log's unanimous first-round answer {m!r}")
        if len(rec.reanswers) != log.n_candidates:
            raise LogFormatError(path, line, "reanswers", f"expected N={log.n_candidates} re-answers, got {len(rec.reanswers)}")


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------

def _dump(rec: BaseModel | dict[str, Any]) -> str:
    obj = rec.model_dump(mode="json") if isinstance(rec, BaseModel) else rec
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def write_jsonl(path: str | os.PathLike[str], records: Iterable[BaseModel | dict[str, Any]]) -> Path:
    """Write records atomically (temporary file + rename); ``.gz`` paths are compressed.

    Compressed output is byte-reproducible (no timestamp, no file name in the gzip header).
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            if p.name.endswith(".gz"):
                with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
                    for rec in records:
                        gz.write((_dump(rec) + "\n").encode("utf-8"))
            else:
                for rec in records:
                    raw.write((_dump(rec) + "\n").encode("utf-8"))
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return p
