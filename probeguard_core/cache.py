"""A content-addressed cache of tables derived from release files (no pickle, ever).

Parsing and validating a cell's logs and NLI records and computing its feature table
(Appendix B) is done once per content of those files: the result is stored as a columnar
``.npz`` (numeric columns as numpy arrays, the index as a fixed-width unicode array, loaded
with ``allow_pickle=False``) beside a small JSON header, under a key that hashes

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
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["cache_dir", "cache_enabled", "cached_frame", "cached_json", "code_fingerprint", "file_sha256"]

_FORMAT = 1
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


def _encode(df: Any) -> tuple[bytes, dict[str, Any]] | None:
    """``(npz bytes, header)`` for a frame of numeric columns and a string index, else None."""
    import numpy as np

    cols = [str(c) for c in df.columns]
    if len(set(cols)) != len(cols) or list(df.columns) != cols:
        return None
    arrays: dict[str, Any] = {}
    for i, c in enumerate(cols):
        a = df[c].to_numpy()
        if a.dtype.kind not in "fiub":
            return None
        arrays[f"c{i}"] = a
    idx = df.index
    values = idx.to_numpy()
    if not all(isinstance(v, str) for v in values.tolist()):
        return None
    arrays["index"] = np.asarray(values.tolist(), dtype=str) if len(values) else np.zeros(0, dtype="<U1")
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    header = {"columns": cols, "dtypes": [str(df[c].dtype) for c in cols], "index_name": idx.name,
              "index_dtype": str(idx.dtype), "n": len(df)}
    return buf.getvalue(), header


def _decode(data: bytes, header: Mapping[str, Any]) -> Any:
    import numpy as np
    import pandas as pd

    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        index = pd.Index(z["index"].tolist(), name=header["index_name"], dtype=header["index_dtype"])
        cols = {c: z[f"c{i}"].astype(dt, copy=False) for i, (c, dt) in enumerate(zip(header["columns"], header["dtypes"]))}
    return pd.DataFrame(cols, index=index, columns=header["columns"])


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
    and values to the last bit (tested).  A frame with non-numeric columns is never cached.
    """
    if not isinstance(sources, Mapping):
        sources = {str(p): file_sha256(p) for p in sources}
    if not cache_enabled():
        return build()
    key = _key(name, sources, dict(params or {}), code_fingerprint(*code) if code else "")
    folder = cache_dir() / name
    npz, meta = folder / f"{key}.npz", folder / f"{key}.json"
    try:
        header = json.loads(meta.read_text(encoding="utf-8"))
        data = npz.read_bytes()
        if header.get("key") == key and header.get("sha256") == hashlib.sha256(data).hexdigest():
            return _decode(data, header)
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no entry, or an unreadable / altered one: rebuild
    df = build()
    encoded = _encode(df)
    if encoded is not None:
        data, header = encoded
        header |= {"key": key, "name": name, "sources": dict(sources), "sha256": hashlib.sha256(data).hexdigest()}
        try:
            from probeguard_core.fileio import write_bytes_atomic

            write_bytes_atomic(npz, data)
            write_bytes_atomic(meta, (json.dumps(header, indent=1, sort_keys=True) + "\n").encode("utf-8"))
        except OSError:
            pass  # a read-only cache folder only costs speed
    return df


def cached_json(name: str, key_doc: Mapping[str, Any], build: Callable[[], Any],
                encode: Callable[[Any], Any], decode: Callable[[Any], Any]) -> Any:
    """``build()``'s value, stored as JSON (``encode`` to plain data, ``decode`` back) under the
    sha256 of ``key_doc``; an entry whose recorded sha256 does not match its body is rebuilt."""
    if not cache_enabled():
        return build()
    key = hashlib.sha256(json.dumps({"format": _FORMAT, "name": name, **key_doc}, sort_keys=True,
                                    default=str).encode("utf-8")).hexdigest()
    path = cache_dir() / name / f"{key}.json"
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        body = json.dumps(entry["value"], sort_keys=True)
        if entry.get("key") == key and entry.get("sha256") == hashlib.sha256(body.encode("utf-8")).hexdigest():
            return decode(entry["value"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
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
