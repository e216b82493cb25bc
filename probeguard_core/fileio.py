"""The one owner of atomic file writing and of conversion to JSON-ready values (issue 10).

Every file the project writes goes through here: the artifact writer
(:func:`probeguard_core.logs.write_jsonl`), the release manifest, the certificate / decisions /
report outputs of :mod:`probeguard_core.deploy`, the notebooks' ``results.json`` and the
artifact cache.

* :func:`atomic_open` / :func:`write_bytes_atomic` / :func:`write_text_atomic`: one file, via a
  temporary file in the target's folder, ``fsync`` and ``os.replace``; a failure leaves the old
  file (or nothing) and no temporary file behind.
* :func:`write_files_atomically`: a set of files that changes together (a journal beside each
  file while it is written, backups of the old files): an exception leaves the old set, a kill
  leaves a set that :func:`check_output_set` refuses when mixed and the next write rolls back
  (:func:`recover_output_set`); the folders it created are removed when it fails.
* :func:`sha256_file`: the digest a manifest and the artifact cache key on.
* :func:`jsonable`: numpy scalars and arrays, tuples and mappings to plain JSON values;
  non-finite floats become ``None`` (JSON has no NaN); ``round_digits`` optionally rounds floats.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

__all__ = [
    "AtomicWriteError",
    "atomic_open",
    "check_output_set",
    "journal_path",
    "recover_output_set",
    "remove_stale_temporaries",
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


# ------------------------------------------------------------------------------ output sets
_JOURNAL_SUFFIX = ".journal.tmp"  # .NAME.journal.tmp beside each file of a set while it is written
_JOURNAL_FORMAT = "probeguard-output-set"


def journal_path(path: str | os.PathLike[str]) -> Path:
    """The journal that names ``path``'s output set while a write of it is under way (or was killed)."""
    p = Path(path)
    return p.with_name(f".{p.name}{_JOURNAL_SUFFIX}")


@contextlib.contextmanager
def _locked(folders: list[Path], shared: bool = False) -> Iterator[list[int]]:
    """Hold ``fcntl.flock`` on each folder (sorted, so two writers cannot deadlock); yield their fds.

    Writers of an output set hold it exclusively, readers of a journal shared, so a reader never
    sees a set between its renames while its writer is alive.  Without ``fcntl`` (not POSIX) the
    folders are opened but not locked; a folder that cannot be opened for reading is skipped.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - POSIX only
        fcntl = None  # type: ignore[assignment]
    fds: list[int] = []
    try:
        for folder in sorted({os.path.realpath(f) for f in folders}):
            try:
                fd = os.open(folder, os.O_RDONLY)
            except OSError:  # a folder that can be written but not read: no lock, no folder fsync
                continue
            fds.append(fd)
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield fds
    finally:
        for fd in fds:
            os.close(fd)  # releases the lock


def _fsync_folders(fds: list[int]) -> None:
    """Make the renames and new names in these folders durable (a folder fsync)."""
    for fd in fds:
        with contextlib.suppress(OSError):  # some file systems cannot fsync a folder
            os.fsync(fd)


def _sha256_or_none(path: Path) -> str | None:
    return sha256_file(path) if os.path.lexists(path) and not path.is_dir() else None


def _read_journal(journal: Path) -> list[dict[str, Any]] | None:
    """The entries of a journal; None for one cut short (killed while it was written, before any rename)."""
    try:
        doc = json.loads(journal.read_bytes())
        files = doc["files"] if doc.get("format") == _JOURNAL_FORMAT else None
        entries = [{"path": journal.parent / e["path"], "old": e["old_sha256"], "new": e["new_sha256"],
                    "backup": None if e["backup"] is None else journal.parent / e["backup"]} for e in files]
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return entries


def _states(entries: list[dict[str, Any]]) -> dict[Path, str]:
    """Each file of a journalled set: 'new' (this write's bytes), 'old' (those it replaces) or 'other'."""
    out = {}
    for e in entries:
        sha = _sha256_or_none(e["path"])
        out[e["path"]] = "new" if sha == e["new"] else "old" if sha == e["old"] else "other"
    return out


def _mixed(path: Path, states: dict[Path, str], journal: Path) -> str | None:
    """The reason ``path``'s set is not whole (neither all old nor all new), or None."""
    kinds = set(states.values())
    if kinds in ({"old"}, {"new"}):
        return None
    by = {k: ", ".join(sorted(p.name for p, v in states.items() if v == k)) for k in kinds}
    parts = [f"{by[k]} {label}" for k, label in (("new", "new"), ("old", "old"), ("other", "changed since"))
             if k in by]
    return (f"{path}: output set: written only in part by an interrupted run ({'; '.join(parts)}; "
            f"journal {journal.name}); rerun the command that writes it")


def check_output_set(path: str | os.PathLike[str], error: type[Exception] = AtomicWriteError) -> None:
    """Refuse ``path`` when its output set was left mixed by a killed write (issue 25).

    Without a journal beside ``path`` (the usual case: one ``lstat``) the set is whole.  With one
    (a write under way, or killed), every file it names is hashed: all old or all new is a whole
    set; a mix raises ``error`` as ``file: output set: reason``.
    """
    p = Path(path)
    journal = journal_path(p)
    if not os.path.lexists(journal):
        return
    with _locked([p.parent], shared=True):
        entries = _read_journal(journal) if os.path.lexists(journal) else None
        if entries is None:
            return  # gone (the write finished) or cut short (no file was renamed yet)
        reason = _mixed(p, _states(entries), journal)
    if reason:
        raise error(reason)


def recover_output_set(path: str | os.PathLike[str], error: type[Exception] = AtomicWriteError) -> str | None:
    """Finish what a killed :func:`write_files_atomically` of ``path``'s set left; the caller holds the lock.

    A set whose files all hold the new bytes is kept (the kill came after the last rename); any
    other is rolled back to the old set from the backups the journal names.  Then the journals,
    backups and temporaries go.  Returns ``'old'`` / ``'new'`` (what the set now is) or None
    without a journal.  A file changed by someone since the kill is not overwritten: ``error``.
    """
    p = Path(path)
    journal = journal_path(p)
    if not os.path.lexists(journal):
        return None
    entries = _read_journal(journal)
    if entries is None:  # cut short while written: nothing was renamed
        os.unlink(journal)
        return "old"
    states = _states(entries)
    other = sorted(str(q) for q, v in states.items() if v == "other")
    if other:
        raise error(f"{p}: output set: {', '.join(other)} changed since an interrupted write; "
                    f"check the files, then remove {journal}")
    result = "new" if set(states.values()) == {"new"} else "old"
    if result == "old":
        for e in entries:
            if states[e["path"]] != "new":
                continue
            if e["old"] is None:
                os.unlink(e["path"])
            elif e["backup"] is not None and _sha256_or_none(e["backup"]) == e["old"]:
                os.replace(e["backup"], e["path"])
            else:
                raise error(f"{p}: output set: cannot restore the old {e['path'].name} (its backup is gone); "
                            f"check the files, then remove {journal}")
    for e in entries:
        for q in (e["backup"], journal_path(e["path"])):
            if q is not None and os.path.lexists(q):
                os.unlink(q)
    return result


def _backup(path: Path, error: type[Exception]) -> Path:
    """A second name for ``path``'s current file (a hard link; a copy where links are not possible)."""
    fd, tmp = _mkstemp(path, error)
    os.close(fd)
    os.unlink(tmp)
    try:
        os.link(path, tmp, follow_symlinks=False)
    except OSError:
        import shutil

        shutil.copy2(path, tmp, follow_symlinks=False)
    return Path(tmp)


def _write_journal(path: Path, body: bytes, error: type[Exception]) -> Path:
    """The journal beside ``path``, written in place (a journal cut short reads as 'nothing renamed')."""
    journal = journal_path(path)
    try:
        fd = os.open(journal, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666 & ~_umask())
    except OSError as exc:
        raise error(f"cannot write {journal}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(body)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(journal)
        if isinstance(exc, OSError):
            raise error(f"cannot write {journal}: {exc.strerror or exc}") from None
        raise
    return journal


def _journal_body(journal_dir: Path, entries: list[tuple[Path, str | None, str, Path | None]]) -> bytes:
    def rel(q: Path) -> str:
        return os.path.relpath(q, journal_dir)

    doc = {"format": _JOURNAL_FORMAT, "version": 1,
           "files": [{"path": rel(t), "old_sha256": old, "new_sha256": new, "backup": None if b is None else rel(b)}
                     for t, old, new, b in entries]}
    return (json.dumps(doc, indent=1) + "\n").encode("utf-8")


def write_files_atomically(files: Mapping[Path, bytes], error: type[Exception] = AtomicWriteError) -> None:
    """Write a set of files so that they change together: the old set or the new one, never a mix.

    The one writer of every command with several outputs (``certify``, ``apply``, ``monitor``,
    ``claims``; issue 25).  Outputs go into folders the user names and shares with other files, so
    the set cannot be one folder renamed into place; instead a journal is kept while it is written:

    1. each file's new bytes go to a temporary file beside it (``fsync``); each existing file gets
       a backup name (a hard link);
    2. a journal ``.NAME.journal.tmp`` beside every file names the set (paths, old and new sha256,
       backups) and is ``fsync``-ed with its folder;
    3. the temporary files are renamed over the targets (``os.replace``), the folders ``fsync``-ed;
    4. the journals and backups are removed.

    Any exception (an I/O error, Ctrl-C) rolls the renamed files back from their backups: the old
    set, with no temporary, backup or journal left, and the folders this call created removed.
    A kill (SIGKILL, power loss) leaves the journals: :func:`check_output_set` (the certificate
    reader's first step) then refuses a mixed set, and the next write of any of its files first
    rolls it back (:func:`recover_output_set`).  Writers hold ``flock`` on the folders, so two
    runs do not interleave.  Failures raise ``error`` (default :class:`AtomicWriteError`) naming
    the path.
    """
    targets = {Path(p): data for p, data in files.items()}
    created: list[Path] = []
    try:
        for path in targets:
            created += _ensure_dir(path.parent, error)
        with _locked([p.parent for p in targets]) as fds:
            for path in targets:
                recover_output_set(path, error)  # a set a killed run left: rolled back first
                remove_stale_temporaries(path)  # left by an earlier run that was killed outright
            _write_set(targets, fds, error)
    except BaseException:
        _remove_dirs(created)
        raise


def _write_set(targets: dict[Path, bytes], fds: list[int], error: type[Exception]) -> None:
    """Steps 1-4 of :func:`write_files_atomically`, under its lock."""
    tmps: dict[Path, str] = {}
    backups: dict[Path, Path] = {}
    journals: list[Path] = []
    done: list[Path] = []
    try:
        entries = []
        for path, data in targets.items():
            if path.is_dir():
                raise error(f"cannot write {path}: it is a folder")
            fd, tmps[path] = _mkstemp(path, error)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                    fh.flush()
                    os.fsync(fh.fileno())
            except OSError as exc:
                raise error(f"cannot write {path}: {exc.strerror or exc}") from None
            old = _sha256_or_none(path)
            if old is not None:
                backups[path] = _backup(path, error)
            entries.append((path, old, hashlib.sha256(data).hexdigest(), backups.get(path)))
        for path in targets:
            journals.append(_write_journal(path, _journal_body(path.parent, entries), error))
        _fsync_folders(fds)
        for path, tmp in tmps.items():
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise error(f"cannot write {path}: {exc.strerror or exc}") from None
            done.append(path)
    except BaseException:
        _roll_back(done, backups, tmps, journals)
        raise
    _fsync_folders(fds)  # committed: the new set is in place
    for q in [*journals, *backups.values()]:
        with contextlib.suppress(OSError):
            os.unlink(q)


def _roll_back(done: list[Path], backups: dict[Path, Path], tmps: dict[Path, str], journals: list[Path]) -> None:
    """Put the old files back (backups renamed over the new ones); then drop temporaries and journals.

    If the roll-back itself fails, the journals stay: the set is then refused on read and rolled
    back by the next write (:func:`recover_output_set`).
    """
    try:
        for path in reversed(done):
            if path in backups:
                os.replace(backups.pop(path), path)
            else:
                os.unlink(path)
    except OSError:
        return
    for q in [*tmps.values(), *backups.values(), *journals]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(q)


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
