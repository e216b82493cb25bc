"""Questions and corpus snippets (DESIGN 2.5-2.6): MIRAGE, MA-RAG and MedCorp shapes.

The paper evaluates on MedQA, MedMCQA, MMLU-Pro (medicine) and MedXpertQA (Section 4) with
MedCorp-style retrieval (Appendix L).  Two question-file shapes load as distributed:

* MIRAGE ``benchmark.json`` (MedRAG): ``{dataset: {qid: {"question", "options", "answer"}}}``,
  or the flat ``{qid: {...}}`` of one dataset;
* MA-RAG ``datasets/*.json``: a list of ``{"id": int, "question", "option": {...}, "answer"}``
  (singular ``option``; the integer id becomes the string qid).

Corpus snippets are JSONL ``{"id", "title", "content"}`` (MedCorp chunks).

Every problem raises :class:`~probeguard_core.logs.LogFormatError` naming the file and the
field; JSON (not JSONL) files have no line (``line=None``) and fields like ``[17].option`` or
``medqa.0042.answer``.  Options are kept exactly as given (an option with empty text stays).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr, field_validator, model_validator

from probeguard_core.jsonl import LogFormatError, _object_hook, check_values, iter_jsonl, loc_to_field, read_document
from probeguard_core.logs import _FieldError, check_options, validate_record

__all__ = ["Doc", "Question", "iter_corpus", "load_corpus", "load_questions"]

NonEmptyStr = Annotated[str, Field(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class Question(_Strict):
    """One multiple-choice question (the fields shared with a DESIGN 2.1 log record).

    Extra keys of the source item (e.g. MA-RAG's ``question_type``) are kept in ``model_extra``.
    """

    qid: NonEmptyStr
    question: StrictStr
    options: dict[StrictStr, StrictStr]
    gold: StrictStr
    dataset: NonEmptyStr
    specialty: StrictStr | None = None

    @field_validator("options")
    @classmethod
    def _options(cls, v: dict[str, str]) -> dict[str, str]:
        return check_options(v)

    @model_validator(mode="after")
    def _gold(self) -> Question:
        if self.gold not in self.options:
            raise _FieldError("gold", f"{self.gold!r} is not among the options {sorted(self.options)}")
        return self


class Doc(_Strict):
    """One corpus snippet (MedCorp chunk shape); extra keys such as ``contents`` are kept."""

    id: NonEmptyStr
    title: StrictStr
    content: StrictStr


# ---- source-shaped items: validated first, so errors name the source file's own keys ----------

class _Item(_Strict):
    question: StrictStr
    answer: StrictStr
    specialty: StrictStr | None = None

    def _check(self, options: dict[str, str], name: str) -> None:
        _check_or_raise(options, name)
        if self.answer not in options:
            raise _FieldError("answer", f"{self.answer!r} is not among the {name} {sorted(options)}")


def _check_or_raise(options: dict[str, str], name: str) -> None:
    try:
        check_options(options)
    except ValueError as exc:
        raise _FieldError(name, str(exc)) from None


class _MirageItem(_Item):
    options: dict[StrictStr, StrictStr]

    @model_validator(mode="after")
    def _valid(self) -> _MirageItem:
        self._check(self.options, "options")
        return self


class _MaRagItem(_Item):
    id: StrictInt = Field(ge=0)
    option: dict[StrictStr, StrictStr]

    @model_validator(mode="after")
    def _valid(self) -> _MaRagItem:
        self._check(self.option, "option")
        return self


_RESERVED = {"qid", "gold", "dataset", "options"}


def _question(
    item: _Item, qid: str, options: dict[str, str], dataset: str, path: Path, where: str
) -> Question:
    extra = dict(item.model_extra or {})
    clash = sorted(_RESERVED & extra.keys())
    if clash:
        raise LogFormatError(path, None, f"{where}.{clash[0]}", "key clashes with a Question field; rename it")
    return Question(qid=qid, question=item.question, options=dict(options), gold=item.answer,
                    dataset=dataset, specialty=item.specialty, **extra)


# ---- reading JSON ---------------------------------------------------------------------------

def _read_json(p: Path) -> Any:
    """Parse a whole ``.json`` (or ``.json.gz``) file strictly: UTF-8, no NaN, no repeated keys."""
    raw = read_document(p)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LogFormatError(p, None, None, f"not valid UTF-8 (byte {exc.start})") from None
    if not text.strip():
        raise LogFormatError(p, None, None, "file is empty")
    try:
        data = json.loads(text, object_pairs_hook=_object_hook, parse_constant=float)
    except json.JSONDecodeError as exc:
        reason = f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        raise LogFormatError(p, None, None, reason) from None
    except RecursionError:  # issue 25: a deeply nested document, named instead of a traceback
        raise LogFormatError(p, None, None, "invalid JSON: nested too deeply") from None
    except ValueError as exc:  # issue 25: e.g. an integer of more than 4,300 digits
        raise LogFormatError(p, None, None, f"invalid JSON: {exc}") from None
    check_values(p, None, data, "nested too deeply")
    return data


def _need_dataset(p: Path, dataset: str | None, shape: str) -> str:
    if dataset is None:
        raise ValueError(f"{p}: a {shape} file holds one dataset without naming it; pass dataset=... (e.g. 'medqa')")
    if not dataset:
        raise ValueError("dataset must be a non-empty string")
    return dataset


def _load_ma_rag(p: Path, data: list[Any], dataset: str) -> list[Question]:
    out: list[Question] = []
    first: dict[int, int] = {}
    for i, obj in enumerate(data):
        item = _validate(_MaRagItem, obj, p, (i,))
        if item.id in first:
            raise LogFormatError(p, None, f"[{i}].id", f"duplicate id {item.id} (first at [{first[item.id]}])")
        first[item.id] = i
        out.append(_question(item, str(item.id), item.option, dataset, p, f"[{i}]"))
    return out


def _load_mirage_flat(
    p: Path, data: dict[str, Any], dataset: str, prefix: tuple[str, ...] = ()
) -> list[Question]:
    out = []
    for qid, obj in data.items():
        if not qid:
            raise LogFormatError(p, None, loc_to_field(prefix) or None, "empty question id")
        item = _validate(_MirageItem, obj, p, (*prefix, qid))
        out.append(_question(item, qid, item.options, dataset, p, loc_to_field((*prefix, qid))))
    return out


def _validate(model: type[_Item], obj: Any, p: Path, loc: tuple[str | int, ...]) -> Any:
    """Validate one source item; the error's field is prefixed with the item's location."""
    try:
        return validate_record(model, obj, p, None)
    except LogFormatError as exc:
        field = loc_to_field((*loc,)) + ("." + exc.field if exc.field else "")
        raise LogFormatError(p, None, field, exc.reason) from None


def _is_flat_mirage(data: dict[str, Any]) -> bool:
    """A flat file maps qids to items (with 'question' etc.); a nested one maps dataset names to such maps."""
    return any(isinstance(v, dict) and {"question", "options", "answer"} & v.keys() for v in data.values())


def load_questions(path: str | os.PathLike[str], dataset: str | None = None) -> list[Question]:
    """Load questions from a MIRAGE ``benchmark.json`` (nested or flat) or an MA-RAG dataset file.

    ``dataset`` selects one dataset of a nested MIRAGE file (``None`` loads all, each question
    tagged with its dataset key) and is required for the flat MIRAGE and the MA-RAG shapes,
    which do not name their dataset.  Order follows the file.  qids are unique per dataset.
    """
    p = Path(path)
    data = _read_json(p)
    if isinstance(data, list):
        if not data:
            raise LogFormatError(p, None, None, "the question list is empty")
        return _load_ma_rag(p, data, _need_dataset(p, dataset, "MA-RAG"))
    if not isinstance(data, dict) or not data:
        raise LogFormatError(p, None, None, "expected a non-empty JSON list (MA-RAG) or object (MIRAGE)")
    if _is_flat_mirage(data):
        return _load_mirage_flat(p, data, _need_dataset(p, dataset, "flat MIRAGE"))
    names = [dataset] if dataset is not None else list(data)
    if dataset is not None and dataset not in data:
        raise ValueError(f"{p}: dataset {dataset!r} is not in the file; it holds {sorted(data)}")
    out: list[Question] = []
    for name in names:
        block = data[name]
        if not isinstance(block, dict) or not block:
            raise LogFormatError(p, None, name, "expected a non-empty object mapping question ids to questions")
        out.extend(_load_mirage_flat(p, block, name, (name,)))
    return out


# ---- corpus -----------------------------------------------------------------------------------

def _corpus_files(p: Path) -> list[Path]:
    if not p.is_dir():
        return [p]
    files = sorted(f for f in p.iterdir() if f.name.endswith((".jsonl", ".jsonl.gz")))
    if not files:
        raise LogFormatError(p, None, None, "folder holds no .jsonl or .jsonl.gz corpus files")
    return files


def iter_corpus(path: str | os.PathLike[str]) -> Iterator[Doc]:
    """Yield corpus snippets from a MedCorp-shaped JSONL file, or every ``*.jsonl[.gz]`` of a folder.

    Document ids must be unique across everything read.
    """
    seen: dict[str, str] = {}
    for f in _corpus_files(Path(path)):
        for line, obj in iter_jsonl(f):
            doc = validate_record(Doc, obj, f, line)
            if doc.id in seen:
                raise LogFormatError(f, line, "id", f"duplicate document id {doc.id!r} (first at {seen[doc.id]})")
            seen[doc.id] = f"{f.name}:{line}"
            yield doc


def load_corpus(path: str | os.PathLike[str]) -> list[Doc]:
    """All snippets of a MedCorp-shaped corpus (DESIGN 2.6), in file order; see :func:`iter_corpus`."""
    return list(iter_corpus(path))
