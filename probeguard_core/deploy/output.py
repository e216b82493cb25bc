"""Atomic output of the deployment commands: the old set of a run's files or the new one (issues 12, 25).

The writer is :mod:`probeguard_core.fileio`'s (the one atomic writer of the project): every
file goes through a temporary file in its folder and ``os.replace``, under a journal that names
the set; on any failure (or Ctrl-C) the files already renamed are rolled back to the old ones,
and the temporaries, backups, journals and the folders it created are removed.  A run killed
outright (SIGKILL, power loss) cannot clean up: a set it left mixed is refused by
:func:`~probeguard_core.deploy.certificate.load_certificate` and rolled back by the next run that
writes one of its files, which also removes its ``.NAME.XXXXXXXX.tmp`` files.  Folders are
created only when the outputs are written, so an interrupted computation leaves no empty output
folder.  Failures are raised as :class:`~probeguard_core.deploy.errors.DeployError`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from probeguard_core import fileio
from probeguard_core.deploy.errors import DeployError

__all__ = ["atomic_write_text", "write_files_atomically"]


def write_files_atomically(files: Mapping[Path, bytes]) -> None:
    """:func:`probeguard_core.fileio.write_files_atomically`, failures as :class:`DeployError`."""
    fileio.write_files_atomically(files, error=DeployError)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) atomically to ``path``."""
    p = Path(path)
    write_files_atomically({p: text.encode("utf-8")})
    return p
