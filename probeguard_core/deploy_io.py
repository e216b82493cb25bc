"""Atomic output of the deployment commands: all files of one run, or none (issue 12 §3).

:func:`write_files_atomically` writes every file through a temporary file in its folder and
``os.replace``; on any failure (or Ctrl-C) the temporaries, the files already renamed and the
folders it created are removed.  A run killed outright (SIGKILL, power loss) cannot clean up:
its ``.NAME.XXXXXXXX.tmp`` files are removed by the next run that writes ``NAME``
(:func:`remove_stale_temporaries`).  Folders are created only when the outputs are written, so
an interrupted computation leaves no empty output folder.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["DeployError", "atomic_write_text", "remove_stale_temporaries", "write_files_atomically"]


class DeployError(ValueError):
    """A bad certification / application request (names the input or parameter)."""


def _ensure_dir(folder: Path) -> list[Path]:
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
        raise DeployError(f"cannot create output folder {folder}: {p} is a file, not a folder")
    for d in reversed(missing):
        try:
            d.mkdir()
        except OSError as exc:
            _remove_dirs(created)
            raise DeployError(f"cannot create output folder {folder}: {exc.strerror or exc}") from None
        created.append(d)
    if not folder.is_dir():
        raise DeployError(f"output path {folder} exists and is not a folder")
    return created


def _remove_dirs(created: list[Path]) -> None:
    for d in reversed(created):
        try:
            d.rmdir()
        except OSError:
            pass


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_TMP_SUFFIX = ".tmp"


def _tmp_pattern(path: Path) -> re.Pattern[str]:
    """Names ``tempfile.mkstemp(prefix=".NAME.", suffix=".tmp")`` gives for ``path``."""
    return re.compile(rf"\.{re.escape(path.name)}\.[A-Za-z0-9_]{{8}}{re.escape(_TMP_SUFFIX)}")


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove temporary files a killed earlier run left beside ``path``; return them.

    Only names of the exact shape this writer creates for ``path`` (``.NAME.XXXXXXXX.tmp``)
    are touched, and only regular files.
    """
    folder = path.parent
    if not folder.is_dir():
        return []
    pat = _tmp_pattern(path)
    gone = []
    for entry in os.scandir(folder):
        if pat.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            os.unlink(entry.path)
            gone.append(Path(entry.path))
    return gone


def write_files_atomically(files: Mapping[Path, bytes]) -> None:
    """Write every file via a temporary file in its folder and ``os.replace``; all or nothing.

    On any failure the temporary files, the files already renamed in this call and the folders
    this call created are removed, and :class:`DeployError` names the path.  Temporary files
    left by an earlier run that was killed (no cleanup possible) are removed first.
    """
    created: list[Path] = []
    tmps: dict[Path, str] = {}
    done: list[Path] = []
    try:
        for path in files:
            created += _ensure_dir(path.parent)
            remove_stale_temporaries(path)
        for path, data in files.items():
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=_TMP_SUFFIX, dir=path.parent)
            except OSError as exc:
                raise DeployError(f"cannot write to {path.parent}: {exc.strerror or exc}") from None
            tmps[path] = tmp
            try:
                os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise DeployError(f"cannot write {path}: {exc.strerror or exc}") from None
        for path, tmp in tmps.items():
            if path.is_dir():
                raise DeployError(f"cannot write {path}: it is a folder")
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise DeployError(f"cannot write {path}: {exc.strerror or exc}") from None
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


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) atomically to ``path``."""
    p = Path(path)
    write_files_atomically({p: text.encode("utf-8")})
    return p
