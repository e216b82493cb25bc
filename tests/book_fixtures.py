"""Shared fixtures for the book tests: a small simulated release and a scratch copy of the
book sources (so a test build never touches the repository's ``book/_generated`` or ``_build``).

Set ``PROBEGUARD_TEST_RELEASE`` to an existing release folder to skip simulating one.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def session_dir(base: Path) -> Path:
    """A folder shared by every pytest-xdist worker of this session (``base`` is a worker's
    basetemp; the workers' basetemps are siblings), or ``base`` itself without xdist."""
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    return shared


@contextlib.contextmanager
def once_per_session(base: Path, name: str) -> Iterator[tuple[Path, bool]]:
    """``(folder, must_make)``: the first worker to ask makes ``folder`` (holding a file lock),
    the others wait and reuse it; ``<name>.done`` beside it marks it complete (outside the folder:
    a release folder must hold only the files its manifest lists)."""
    from filelock import FileLock

    shared = session_dir(base)
    folder, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        must = not done.is_file()
        if must and folder.exists():
            shutil.rmtree(folder)  # a half-made folder of an interrupted worker
        yield folder, must
        if must:
            folder.mkdir(parents=True, exist_ok=True)
            done.write_text("ok\n")


def small_release(base: Path) -> Path:
    """A 5 % simulated release (``probeguard simulate --scale 0.05``), made once per session
    (shared by the xdist workers)."""
    env = os.environ.get("PROBEGUARD_TEST_RELEASE")
    if env:
        return Path(env).resolve()
    with once_per_session(base, "release-s005") as (out, must):
        if must:
            cmd = [str(Path(sys.executable).parent / "probeguard"), "simulate", "--out", str(out), "--scale", "0.05", "--quiet"]
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return out


def book_copy(dest: Path) -> Path:
    """Copy what a book build reads (config, toc, pyproject, prose chapters, CSS, notebooks) to ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("_config.yml", "_toc.yml", "pyproject.toml"):
        shutil.copy2(REPO / name, dest / name)
    for folder, pattern in (("book", "*.md"), ("book", "*.bib"), ("book/_static", "*.css"), ("notebooks", "*.md"),
                            ("notebooks", "registry.yml")):
        (dest / folder).mkdir(parents=True, exist_ok=True)
        for p in (REPO / folder).glob(pattern):
            shutil.copy2(p, dest / folder / p.name)
    return dest
