"""The one owner of atomic file writing and of conversion to JSON-ready values (issue 10).

Every file the project writes goes through here: the artifact writer
(:func:`probeguard_core.logs.write_jsonl`), the release manifest, the certificate / decisions /
report outputs of :mod:`probeguard_core.deploy`, the notebooks' ``results.json`` and the
artifact cache.

* :func:`atomic_open` / :func:`write_bytes_atomic` / :func:`write_text_atomic`: one file, via a
  temporary file in the target's folder, ``fsync`` and ``os.replace``; a failure leaves the old
  file (or nothing) and no temporary file behind.
* :func:`write_files_atomically`: several files, all or nothing (also removes the folders it
  created when it fails).
* :func:`sha256_file`: the digest a manifest and the artifact cache key on.
* :func:`jsonable`: numpy scalars and arrays, tuples and mappings to plain JSON values;
  non-finite floats become ``None`` (JSON has no NaN); ``round_digits`` optionally rounds floats.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

__all__ = [
    "remove_stale_temporaries",
    "AtomicWriteError",
    "atomic_open",
    "jsonable",
    "sha256_file",
    "write_bytes_atomic",
    "write_files_atomically",
    "write_text_atomic",
]


_TMP_SUFFIX = ".tmp"  # temporaries are .NAME.XXXXXXXX.tmp beside their target


class AtomicWriteError(OSError):
    """A file or folder that could not be written (the message names the path)."""


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mkstemp(path: Path, error: type[Exception]) -> tuple[int, str]:
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_TMP_SUFFIX, dir=path.parent)
    except OSError as exc:
        raise error(f"cannot write to {path.parent}: {exc.strerror or exc}") from None
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
    return fd, tmp


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str]) -> Iterator[IO[bytes]]:
    """A binary file handle whose content replaces ``path`` only when the block succeeds.

    The parent folder is created if needed.  On an exception the temporary file is removed and
    ``path`` is left as it was.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _mkstemp(p, AtomicWriteError)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_open`)."""
    with atomic_open(path) as fh:
        fh.write(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def _ensure_dir(folder: Path, error: type[Exception]) -> list[Path]:
    """Create ``folder`` (and parents); return the folders created, deepest last."""
    created: list[Path] = []
    missing = []
    p = folder
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    if p.exists() and not p.is_dir():
        raise error(f"cannot create output folder {folder}: {p} is a file, not a folder")
    for d in reversed(missing):
        try:
            d.mkdir()
        except OSError as exc:
            _remove_dirs(created)
            raise error(f"cannot create output folder {folder}: {exc.strerror or exc}") from None
        created.append(d)
    if not folder.is_dir():
        raise error(f"output path {folder} exists and is not a folder")
    return created


def _remove_dirs(created: list[Path]) -> None:
    for d in reversed(created):
        with contextlib.suppress(OSError):
            d.rmdir()



def _tmp_pattern(path: Path) -> re.Pattern[str]:
    """Names :func:`_mkstemp` gives for ``path`` (``.NAME.XXXXXXXX.tmp``)."""
    return re.compile(rf"\.{re.escape(path.name)}\.[A-Za-z0-9_]{{8}}{re.escape(_TMP_SUFFIX)}")


def remove_stale_temporaries(path: str | os.PathLike[str]) -> list[Path]:
    """Remove temporary files a killed earlier run left beside ``path``; return them.

    Only names of the exact shape this module's writers create for ``path``
    (``.NAME.XXXXXXXX.tmp``) are touched, and only regular files.
    """
    p = Path(path)
    folder = p.parent
    if not folder.is_dir():
        return []
    pat = _tmp_pattern(p)
    gone = []
    for entry in os.scandir(folder):
        if pat.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
            gone.append(Path(entry.path))
    return gone


def write_files_atomically(files: Mapping[Path, bytes], error: type[Exception] = AtomicWriteError) -> None:
    """Write every file via a temporary file in its folder and ``os.replace``; all or nothing.

    On any failure the temporary files, the files already renamed in this call and the folders
    this call created are removed, and ``error`` (default :class:`AtomicWriteError`) names the path.
    """
    created: list[Path] = []
    tmps: dict[Path, str] = {}
    done: list[Path] = []
    try:
        for path in files:
            created += _ensure_dir(Path(path).parent, error)
            remove_stale_temporaries(path)  # left by an earlier run that was killed outright
        for path, data in files.items():
            path = Path(path)
            fd, tmp = _mkstemp(path, error)
            tmps[path] = tmp
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise error(f"cannot write {path}: {exc.strerror or exc}") from None
        for path, tmp in tmps.items():
            if path.is_dir():
                raise error(f"cannot write {path}: it is a folder")
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise error(f"cannot write {path}: {exc.strerror or exc}") from None
            done.append(path)
    except BaseException:
        for tmp in tmps.values():
            if os.path.exists(tmp):
                os.unlink(tmp)
        for path in done:
            if path.exists():
                path.unlink()
        _remove_dirs(created)
        raise


def jsonable(value: Any, round_digits: int | None = None) -> Any:
    """``value`` as plain JSON data: mappings (keys as str), lists, numbers, strings, None.

    numpy scalars become Python numbers and arrays lists; a non-finite float becomes None
    (a missing number is null: JSON has no NaN); with ``round_digits`` floats are rounded.

    >>> import numpy as np
    >>> jsonable({"a": np.float64("nan"), 1: (np.int64(2), np.array([0.5]))})
    {'a': None, '1': [2, [0.5]]}
    >>> jsonable(1 / 3, round_digits=4)
    0.3333
    """
    import numpy as np

    if isinstance(value, Mapping):
        return {str(k): jsonable(v, round_digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, round_digits) for v in value]
    if isinstance(value, np.ndarray):
        return [jsonable(v, round_digits) for v in value.tolist()]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if round_digits is not None:
            return round(value, round_digits)
    return value
