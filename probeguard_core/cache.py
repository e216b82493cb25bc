"""A content-addressed cache of tables derived from release files (no pickle, ever).

Parsing and validating a cell's logs and NLI records and computing its feature table
(Appendix B), or any other per-cell table, is done once per content of those files: the result
is stored as a columnar ``.npz`` (numeric and bool columns as numpy arrays, string columns and
the index as fixed-width unicode arrays, loaded with ``allow_pickle=False``) beside a small JSON
header, under a key that hashes

* the sha256 of every source file (so an edited or replaced file is never served stale),
* the table's name and parameters, and
* the source code that computes it (:func:`code_fingerprint`), so a change to the readers or
  the feature arithmetic invalidates every entry.

The header records the sha256 of the ``.npz`` bytes; an entry whose bytes do not match is
ignored and rebuilt (a damaged or altered cache entry is never used).  Entries live in the
user's cache folder: ``$PROBEGUARD_CACHE_DIR``, else ``$XDG_CACHE_HOME/probeguard``, else
``~/.cache/probeguard``; ``PROBEGUARD_CACHE=0`` turns the cache off (every call rebuilds).
Writing is atomic (:func:`probeguard_core.fileio.write_bytes_atomic`); a cache folder that
cannot be written is not an error, the table is simply not stored.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "cache_enabled", "cached_frame", "cached_json", "code_fingerprint", "file_sha256"]

_FORMAT = 2  # 2: string columns, MultiIndex / RangeIndex (issue 15)
_fingerprints: dict[tuple[str, ...], str] = {}


def cache_enabled() -> bool:
    return os.environ.get("PROBEGUARD_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """The cache folder (see the module docstring); not created until something is stored."""
    if os.environ.get("PROBEGUARD_CACHE_DIR"):
        return Path(os.environ["PROBEGUARD_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "probeguard"


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file (:func:`probeguard_core.fileio.sha256_file`)."""
    from probeguard_core.fileio import sha256_file

    return sha256_file(path)


def code_fingerprint(*modules: str) -> str:
    """sha256 over the source files of ``modules`` (dotted names), e.g. ``probeguard_core.features``."""
    key = tuple(sorted(modules))
    if key not in _fingerprints:
        import importlib.util

        h = hashlib.sha256()
        for name in key:
            spec = importlib.util.find_spec(name)
            if spec is None or spec.origin is None:
                raise ValueError(f"code_fingerprint: cannot locate module {name!r}")
            h.update(name.encode() + b"\0" + Path(spec.origin).read_bytes() + b"\0")
        _fingerprints[key] = h.hexdigest()
    return _fingerprints[key]


def _key(name: str, sources: Mapping[str, str], params: Mapping[str, Any], code: str) -> str:
    doc = {"format": _FORMAT, "name": name, "sources": dict(sorted(sources.items())), "params": params, "code": code}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def _str_array(values: list[Any]) -> Any:
    """A fixed-width unicode array of ``values`` if every one is a ``str`` numpy keeps intact, else None.

    (numpy drops trailing NUL characters of unicode items, so a string ending in one is refused.)"""
    import numpy as np

    if not all(isinstance(v, str) and not v.endswith("\0") for v in values):
        return None
    return np.asarray(values, dtype=str) if values else np.zeros(0, dtype="<U1")


def _encode(df: Any) -> tuple[bytes, dict[str, Any]] | None:
    """``(npz bytes, header)`` of a frame the cache can store exactly, else None.

    Storable: unique string column labels; numeric / bool columns, and string columns (object
    or pandas ``str`` dtype, every value a ``str``); an index of strings, a MultiIndex whose
    levels all hold strings, or the default ``RangeIndex``.  Anything else (NaN in a string
    column, mixed objects, categoricals, dates) is not cached: the table is rebuilt each time.
    """
    import numpy as np
    import pandas as pd

    cols = [str(c) for c in df.columns]
    if len(set(cols)) != len(cols) or list(df.columns) != cols:
        return None
    arrays: dict[str, Any] = {}
    kinds: list[str] = []
    for i, c in enumerate(cols):
        col = df[c]
        a = col.to_numpy()
        if col.dtype.kind in "fiub" and a.dtype == col.dtype:
            arrays[f"c{i}"], kind = a, "numeric"
        elif col.dtype == object or isinstance(col.dtype, pd.StringDtype):
            arrays[f"c{i}"], kind = _str_array(a.tolist()), "str"
            if arrays[f"c{i}"] is None:
                return None
        else:
            return None
        kinds.append(kind)
    idx = df.index
    if isinstance(idx, pd.RangeIndex) and idx.start == 0 and idx.step == 1 and idx.name is None:
        index: dict[str, Any] = {"kind": "range"}
    elif isinstance(idx, pd.MultiIndex):
        for j in range(idx.nlevels):
            arrays[f"i{j}"] = _str_array(idx.get_level_values(j).to_numpy().tolist())
            if arrays[f"i{j}"] is None or str(idx.levels[j].dtype) != str(idx.get_level_values(j).dtype):
                return None
        index = {"kind": "multi", "names": list(idx.names), "dtypes": [str(lv.dtype) for lv in idx.levels]}
    else:
        arrays["i0"] = _str_array(idx.to_numpy().tolist())
        if arrays["i0"] is None:
            return None
        index = {"kind": "str", "names": [idx.name], "dtypes": [str(idx.dtype)]}
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    header = {"columns": cols, "dtypes": [str(df[c].dtype) for c in cols], "kinds": kinds, "index": index,
              "n": len(df)}
    return buf.getvalue(), header


def _decode(data: bytes, header: Mapping[str, Any]) -> Any:
    import numpy as np
    import pandas as pd

    ix = header["index"]
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        if ix["kind"] == "range":
            index: Any = pd.RangeIndex(header["n"])
        elif ix["kind"] == "multi":
            index = pd.MultiIndex.from_arrays(
                [pd.Index(z[f"i{j}"].tolist(), dtype=dt) for j, dt in enumerate(ix["dtypes"])], names=ix["names"])
        else:
            index = pd.Index(z["i0"].tolist(), name=ix["names"][0], dtype=ix["dtypes"][0])
        cols = {}
        for i, (c, dt, kind) in enumerate(zip(header["columns"], header["dtypes"], header["kinds"])):
            a = z[f"c{i}"]
            # a Series with its dtype stated: pandas would infer ``str`` for an object array
            cols[c] = pd.Series(a.astype(dt, copy=False) if kind == "numeric" else a.tolist(), index=index, dtype=dt,
                                copy=False)
    return pd.DataFrame(cols, index=index, columns=header["columns"])


_MISS = object()  # what a lookup returns for no usable entry (None may be a cached JSON value)


def _get_or_build(folder: Path, key: str, lookup: Callable[[], Any], make: Callable[[], Any]) -> Any:
    """``lookup()``'s entry, else ``make()`` (which builds and stores it) under the entry's lock,
    looking once more after the lock is held: another process may have built it meanwhile."""
    if (hit := lookup()) is not _MISS:
        return hit
    with _entry_lock(folder, key):
        if (hit := lookup()) is not _MISS:
            return hit
        return make()


@contextmanager
def _entry_lock(folder: Path, key: str) -> Iterator[None]:
    """Hold ``folder/<key>.lock`` exclusively (``fcntl.flock``) while an entry is built, so that two
    processes asking for the same missing entry (two notebooks of one build) build it once: the
    second waits, then reads the first one's entry.  Without a writable folder (or ``fcntl``),
    nothing is locked."""
    try:
        import fcntl

        folder.mkdir(parents=True, exist_ok=True)
        fh = open(folder / f"{key}.lock", "a+b")  # noqa: SIM115 - closed below
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
    finally:
        fh.close()  # closing releases the lock


def cached_frame(
    name: str,
    sources: Mapping[str, str] | Iterable[str | os.PathLike[str]],
    build: Callable[[], Any],
    *,
    params: Mapping[str, Any] | None = None,
    code: Iterable[str] = (),
) -> Any:
    """``build()``'s DataFrame, served from the cache when ``sources``, ``params`` and ``code`` match.

    ``sources`` maps a label to each source file's sha256 (a release's manifest already holds
    them), or is a list of paths to hash.  ``code`` lists the modules whose source defines the
    table.  The frame served from the cache equals ``build()``'s: same columns, dtypes, index
    and values to the last bit (checked before an entry is stored, and tested).  A frame
    :func:`_encode` cannot store exactly is never cached.  Two processes missing the same entry at
    once build it once (:func:`_entry_lock`).
    """
    if not isinstance(sources, Mapping):
        sources = {str(p): file_sha256(p) for p in sources}
    if not cache_enabled():
        return build()
    key = _key(name, sources, dict(params or {}), code_fingerprint(*code) if code else "")
    folder = cache_dir() / name
    npz, meta = folder / f"{key}.npz", folder / f"{key}.json"

    def lookup() -> Any:
        try:
            header = json.loads(meta.read_text(encoding="utf-8"))
            data = npz.read_bytes()
            if header.get("key") == key and header.get("sha256") == hashlib.sha256(data).hexdigest():
                return _decode(data, header)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # no entry, or an unreadable / altered one: rebuild
        return _MISS

    def make() -> Any:
        df = build()
        encoded = _encode(df)
        if encoded is not None and _round_trips(df, *encoded):
            data, header = encoded
            header |= {"key": key, "name": name, "sources": dict(sources), "sha256": hashlib.sha256(data).hexdigest()}
            try:
                from probeguard_core.fileio import write_bytes_atomic

                write_bytes_atomic(npz, data)
                write_bytes_atomic(meta, (json.dumps(header, indent=1, sort_keys=True) + "\n").encode("utf-8"))
            except OSError:
                pass  # a read-only cache folder only costs speed
        return df

    return _get_or_build(folder, key, lookup, make)


def _round_trips(df: Any, data: bytes, header: Mapping[str, Any]) -> bool:
    """Whether the encoded entry decodes to ``df`` exactly (values to the bit, dtypes, index, names):
    checked before anything is stored, so an entry never serves a frame other than ``build()``'s."""
    import pandas as pd

    back = _decode(data, header)
    try:
        pd.testing.assert_frame_equal(back, df, check_exact=True, check_index_type=True, check_column_type=True,
                                      check_names=True, check_flags=True)
    except AssertionError:  # dtypes (object vs str included) and the index type are compared too
        return False
    return True


def cached_json(name: str, key_doc: Mapping[str, Any], build: Callable[[], Any],
                encode: Callable[[Any], Any], decode: Callable[[Any], Any]) -> Any:
    """``build()``'s value, stored as JSON (``encode`` to plain data, ``decode`` back) under the
    sha256 of ``key_doc``; an entry whose recorded sha256 does not match its body is rebuilt."""
    if not cache_enabled():
        return build()
    key = hashlib.sha256(json.dumps({"format": _FORMAT, "name": name, **key_doc}, sort_keys=True,
                                    default=str).encode("utf-8")).hexdigest()
    path = cache_dir() / name / f"{key}.json"

    def lookup() -> Any:
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            body = json.dumps(entry["value"], sort_keys=True)
            if entry.get("key") == key and entry.get("sha256") == hashlib.sha256(body.encode("utf-8")).hexdigest():
                return decode(entry["value"])
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return _MISS

    def make() -> Any:
        value = build()
        plain = encode(value)
        body = json.dumps(plain, sort_keys=True)
        entry = {"key": key, "name": name, "sha256": hashlib.sha256(body.encode("utf-8")).hexdigest(), "value": plain}
        try:
            from probeguard_core.fileio import write_text_atomic

            write_text_atomic(path, json.dumps(entry, sort_keys=True, indent=1) + "\n")
        except OSError:
            pass
        return value

    return _get_or_build(path.parent, key, lookup, make)
