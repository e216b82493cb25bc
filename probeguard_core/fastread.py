"""A fast strict read of a cell's logs and NLI files for the feature table (issue 15).

:func:`read_cell` decodes the execution logs (DESIGN 2.1) and the NLI cache (DESIGN 2.4) of
one cell with typed ``msgspec`` structs (types and bounds are checked in C while decoding),
then applies every rule of :class:`~probeguard_core.logs.QuestionLog` and
:class:`~probeguard_core.logs.NLIRecord` and the cross-file checks
(:func:`~probeguard_core.logs.check_nli_against_logs`, the release's join rule).

It only ever *accepts*: it returns the records when the files are provably valid, and
``None`` whenever anything is unusual; the caller then reads with the pydantic readers of
:mod:`probeguard_core.logs`, which are the only source of error messages.  So every error
(``file:line: field: reason``) is exactly the strict readers' error, and the fast path can
never accept what they refuse:

* each line must re-encode to its own bytes (``msgspec.json.encode(decoded) == line``).  That
  proves the line holds exactly the record's fields in DESIGN order with no key repeated (a
  repeated key would be lost, an unknown field dropped, and the re-encoding would differ), no
  ``NaN``/``Infinity`` token and numbers of the declared types (``1.0`` for an int, ``-5`` for
  a float are declined).  Lines that :func:`probeguard_core.logs.write_jsonl` writes pass;
  records with the optional ``probe_pilot`` as their last field pass too; records with other
  extra fields, another key order, ASCII escapes or spaces are declined and read strictly, with the same tables, only slower;
* the validators of the pydantic models are repeated below, rule for rule (one uppercase
  option key, gold among the options, consecutive rounds, N candidates, answers among the
  options, stop at unanimity, no retrieval after the last round, not cut short, distinct
  documents; NLI: distinct candidates, one claim per candidate, a square matrix of
  probabilities); ``tests/test_fastread.py`` runs every malformed case of the foundation
  through this reader and requires it to decline each one.

The structs have the field names of the pydantic models, so
:func:`probeguard_core.features.feature_table` computes the same table from either.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from probeguard_core import logs as L

try:
    import msgspec
    from msgspec import Meta, Struct
except ImportError:  # pragma: no cover - msgspec is a pinned dependency; without it every read is strict
    msgspec = None  # type: ignore[assignment]

__all__ = ["available", "gc_paused", "read_cell"]

gc_paused = L.gc_paused


def available() -> bool:
    """True when ``msgspec`` is importable (otherwise :func:`read_cell` always declines)."""
    return msgspec is not None


if msgspec is not None:
    _NonNeg = Annotated[int, Meta(ge=0)]
    _Pos = Annotated[int, Meta(ge=1)]
    _NonEmpty = Annotated[str, Meta(min_length=1)]

    class Candidate(Struct, gc=False):
        """DESIGN 2.1 ``rounds[t].candidates[i]`` (as :class:`probeguard_core.logs.Candidate`)."""

        answer: str | None
        rationale: str
        logprob: Annotated[float, Meta(le=0)] | None
        n_tokens: _NonNeg | None
        mean_token_entropy: Annotated[float, Meta(ge=0)] | None

    class Retrieval(Struct, gc=False):
        queries: list[str]
        doc_ids: list[str]

    class Round(Struct, gc=False):
        round: _Pos
        candidates: list[Candidate]
        retrieval: Retrieval | None

    class Cost(Struct, gc=False):
        wall_s: Annotated[float, Meta(ge=0)]
        completion_tokens: _NonNeg

    class QuestionLog(Struct, gc=False):
        """DESIGN 2.1, field for field and in order (as :class:`probeguard_core.logs.QuestionLog`)."""

        schema_version: int
        qid: _NonEmpty
        dataset: _NonEmpty
        backbone: _NonEmpty
        question: str
        options: dict[str, str]
        gold: str
        specialty: str | None
        n_candidates: _Pos
        max_rounds: _Pos
        rounds: Annotated[list[Round], Meta(min_length=1)]
        cost: Cost | None
        #: DESIGN 2.1's one optional field (§5.2's pilot marker), last when present; absent = UNSET,
        #: which msgspec never encodes, so a line without it still re-encodes to itself
        probe_pilot: bool | None | msgspec.UnsetType = msgspec.UNSET

    class NLIRecord(Struct, gc=False):
        """DESIGN 2.4 (as :class:`probeguard_core.logs.NLIRecord`)."""

        schema_version: int
        qid: _NonEmpty
        dataset: _NonEmpty
        backbone: _NonEmpty
        round: _Pos
        model: _NonEmpty
        candidates: Annotated[list[_NonNeg], Meta(min_length=1)]
        claims: list[str]
        entailment: list[list[Annotated[float, Meta(ge=0, le=1)]]]

    _ENCODE = msgspec.json.Encoder().encode
    _LOG = msgspec.json.Decoder(QuestionLog).decode
    _NLI = msgspec.json.Decoder(NLIRecord).decode


def _lines(p: Path) -> list[bytes] | None:
    """The file's lines (without their ``\\n``), or None when the strict reader must look."""
    try:
        data = p.read_bytes()
    except OSError:
        return None
    is_gz = data[:2] == b"\x1f\x8b"
    if is_gz != p.name.endswith(".gz"):
        return None
    if is_gz:
        try:
            data = gzip.decompress(data)
        except Exception:  # truncated or corrupt: the strict reader names the line
            return None
    if not data:
        return None
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines or None


def _decode(decode: Any, lines: list[bytes]) -> list[Any] | None:
    try:
        out = [decode(x) for x in lines]
    except (msgspec.MsgspecError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    try:
        same = all(_ENCODE(o) == x for o, x in zip(out, lines))
    except (msgspec.MsgspecError, ValueError, OverflowError):
        return None
    return out if same else None


def _log_ok(log: Any) -> bool:
    """The rules of ``QuestionLog`` (and its ``Round``/``Retrieval`` validators), in full."""
    opts = log.options
    if log.schema_version != L.SCHEMA_VERSION or len(opts) < 2:
        return False
    if not all(len(k) == 1 and "A" <= k <= "Z" for k in opts):
        return False
    rounds = log.rounds
    n_rounds = len(rounds)
    if log.gold not in opts or n_rounds > log.max_rounds:
        return False
    n = log.n_candidates
    for t, rnd in enumerate(rounds, start=1):
        cands = rnd.candidates
        if rnd.round != t or len(cands) != n:
            return False
        answers = {c.answer for c in cands}
        if not all(a is None or a in opts for a in answers):
            return False
        if t < n_rounds and len(answers) == 1 and None not in answers:
            return False  # unanimous round followed by another
        ret = rnd.retrieval
        if ret is not None and len(set(ret.doc_ids)) != len(ret.doc_ids):
            return False
    last = rounds[-1]
    if last.retrieval is not None:
        return False
    return not (len({c.answer for c in last.candidates}) > 1 and n_rounds < log.max_rounds)


def _nli_ok(rec: Any) -> bool:
    """The rules of ``NLIRecord`` (``_matrix``), in full."""
    n = len(rec.candidates)
    if rec.schema_version != L.SCHEMA_VERSION or len(set(rec.candidates)) != n:
        return False
    m = rec.entailment
    return len(rec.claims) == n and len(m) == n and all(len(row) == n for row in m)


def _unique(records: Sequence[Any], key: Any) -> bool:
    return len({key(r) for r in records}) == len(records)


def read_cell(
    logs_path: str | os.PathLike[str], nli_path: str | os.PathLike[str] | None = None
) -> tuple[list[Any], list[Any] | None] | None:
    """``(logs, nli)`` as validated structs when both files are provably valid, else ``None``.

    ``None`` means "read these files with the strict readers" (which then either raise the
    error or return the same records).  ``nli`` is None when ``nli_path`` is.
    """
    if msgspec is None:
        return None
    with L.gc_paused():
        return _read_cell(logs_path, nli_path)


def _read_cell(logs_path: str | os.PathLike[str], nli_path: str | os.PathLike[str] | None) -> Any:
    lines = _lines(Path(logs_path))
    logs = None if lines is None else _decode(_LOG, lines)
    if logs is None or not all(map(_log_ok, logs)) or not _unique(logs, lambda r: r.qid):
        return None
    if nli_path is None:
        return logs, None
    lines = _lines(Path(nli_path))
    nli = None if lines is None else _decode(_NLI, lines)
    if nli is None or not all(map(_nli_ok, nli)) or not _unique(nli, lambda r: (r.qid, r.round)):
        return None
    by_qid = {log.qid: log for log in logs}
    for rec in nli:  # the release's join rule (release.check_records_join)
        log = by_qid.get(rec.qid)
        if log is None or rec.dataset != log.dataset or rec.backbone != log.backbone:
            return None
    try:
        L.check_nli_against_logs(nli, logs, nli_path)
    except L.LogFormatError:
        return None
    return logs, nli
