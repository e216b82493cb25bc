"""An artifact file, line by line: the strict, bounded reading and the writing of JSON Lines
(DESIGN section 2), whatever the records in it.

Every artifact is JSON Lines (optionally gzip-compressed; the name ends in ``.gz`` exactly when
it is), one object per line.  :func:`iter_jsonl` yields each line's object and refuses, as
:class:`LogFormatError` naming ``file:line: field: reason``: a missing, empty, truncated or
corrupt file, bytes that are not UTF-8, a blank line, invalid JSON, a line that is not an
object, NaN / Infinity anywhere, a key repeated inside one object, and a line or a decompressed
file longer than its bound (:data:`MAX_LINE_BYTES`, :data:`MAX_FILE_BYTES`; other bounds with
:func:`read_limits`, the CLI's ``--max-line-bytes`` / ``--max-file-bytes``).  Lines are read in
chunks, so a small ``.gz`` that expands to one multi-GiB line (a decompression bomb) is refused
holding at most one bound's worth of it.  The records themselves (their fields and rules) are
:mod:`probeguard_core.logs`.
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
from contextvars import ContextVar
from pathlib import Path
from typing import Any

try:  # the fast JSON path of the strict reading; without it the stdlib path gives the same results
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a pinned dependency
    _orjson = None  # type: ignore[assignment]

_GZIP_MAGIC = b"\x1f\x8b"

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "LogFormatError",
    "check_values",
    "gc_paused",
    "iter_jsonl",
    "loc_to_field",
    "raw_lines",
    "read_document",
    "read_limits",
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


#: Default bound on one line of an artifact, in bytes (after gunzip): 64 MiB.  A longer line is
#: refused (``file:line: <record>: line longer than N bytes``) before it is held in memory, so a
#: small ``.gz`` that expands to one huge line (a decompression bomb) fails in bounded memory.
MAX_LINE_BYTES = 64 * 2**20
#: Default bound on one artifact file after gunzip, in bytes: 16 GiB (a cell of the paper's size
#: is a few hundred MiB).
MAX_FILE_BYTES = 16 * 2**30
_LIMITS: ContextVar[tuple[int, int]] = ContextVar("probeguard_read_limits", default=(MAX_LINE_BYTES, MAX_FILE_BYTES))
_CHUNK = 2**20


@contextmanager
def read_limits(line_bytes: int | None = None, file_bytes: int | None = None) -> Iterator[None]:
    """Read artifacts under other bounds (the CLI's ``--max-line-bytes`` / ``--max-file-bytes``)."""
    line0, file0 = _LIMITS.get()
    for name, v in (("line_bytes", line_bytes), ("file_bytes", file_bytes)):
        if v is not None and v < 1:
            raise ValueError(f"read limit {name} must be a positive number of bytes, got {v}")
    token = _LIMITS.set((line_bytes or line0, file_bytes or file0))
    try:
        yield
    finally:
        _LIMITS.reset(token)


def _bounded_lines(p: Path, fh: Any) -> Iterator[bytes]:
    """The lines of a binary stream without their ``\\n``, read in chunks: no line longer than the
    line bound and no more bytes than the file bound are ever held (each raises LogFormatError)."""
    max_line, max_file = _LIMITS.get()
    read = getattr(fh, "read1", fh.read)  # read1: a corrupt gzip stream gives its good lines first
    n, total, pending, pending_len = 0, 0, [], 0
    while chunk := read(_CHUNK):
        total += len(chunk)
        if total > max_file:
            raise LogFormatError(p, None, None, f"file longer than {max_file} bytes after decompression (the limit)")
        parts = chunk.split(b"\n")
        if len(parts) > 1:
            first = b"".join([*pending, parts[0]]) if pending else parts[0]
            pending, pending_len = [], 0
            for raw in (first, *parts[1:-1]):
                n += 1
                if len(raw) > max_line:
                    raise LogFormatError(p, n, None, f"line longer than {max_line} bytes (the limit)")
                yield raw
        if parts[-1]:
            pending.append(parts[-1])
            pending_len += len(parts[-1])
            if pending_len > max_line:
                raise LogFormatError(p, n + 1, None, f"line longer than {max_line} bytes (the limit)")
    if pending:
        yield b"".join(pending)


def raw_lines(p: Path) -> Iterator[tuple[int, bytes]]:
    """Yield ``(line_number, raw_bytes)`` (without the ``\\n``), bounded by :func:`read_limits`;
    gzip damage surfaces as LogFormatError at the next line."""
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
            for n, raw in enumerate(_bounded_lines(p, fh), start=1):
                yield n, raw
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise LogFormatError(p, n + 1, None, f"truncated or corrupt gzip data: {exc}") from None
    except FileNotFoundError:
        raise LogFormatError(p, None, None, "file does not exist") from None
    except OSError as exc:
        raise LogFormatError(p, None, None, f"cannot read file: {exc}") from None


def read_document(p: Path) -> bytes:
    """A whole JSON document (a questions file, ``.json`` or ``.json.gz``), decompressed, bounded
    like one line (:func:`read_limits`): a longer document is refused before it is held."""
    max_bytes = _LIMITS.get()[0]
    try:
        with gzip.open(p, "rb") if p.name.endswith(".gz") else open(p, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except FileNotFoundError:
        raise LogFormatError(p, None, None, "file does not exist") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise LogFormatError(p, None, None, f"truncated or corrupt gzip data: {exc}") from None
    except OSError as exc:
        raise LogFormatError(p, None, None, f"cannot read file: {exc}") from None
    if len(data) > max_bytes:
        raise LogFormatError(p, None, None, f"document longer than {max_bytes} bytes after decompression (the limit)")
    return data


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
    try:
        obj = _orjson.loads(raw)
        return obj if type(obj) is dict and _orjson.dumps(obj) == raw else None
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
    text = text.removesuffix("\r")
    if not text.strip():
        raise LogFormatError(p, n, None, "empty line (one JSON object per line expected)")
    obj = _parse_strict(p, n, text)
    if not isinstance(obj, dict):
        raise LogFormatError(p, n, None, f"expected a JSON object, got {type(obj).__name__}")
    check_values(p, n, obj, "nesting too deep to check")
    return dict(obj)


def check_values(p: Path, n: int | None, obj: Any, too_deep: str) -> None:
    """Refuse a parsed line or document holding a value no record may hold (:func:`_scan`: NaN,
    infinities, ...), naming ``p``, line ``n`` and the field; a structure too deep to walk is
    refused as ``invalid JSON: <too_deep>``."""
    try:
        bad = _scan(obj)
    except RecursionError:
        raise LogFormatError(p, n, None, f"invalid JSON: {too_deep}") from None
    if bad:
        raise LogFormatError(p, n, loc_to_field(bad[0]) or None, bad[1])


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for every line of a ``.jsonl`` or ``.jsonl.gz`` file.

    Rejected (``LogFormatError``): missing, empty or truncated files, non-UTF-8 bytes, blank
    lines (never skipped), invalid JSON, a line that is not an object, NaN/Infinity anywhere,
    and a key repeated inside one object.
    """
    p = Path(path)
    n = 0
    for n, raw in raw_lines(p):
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
