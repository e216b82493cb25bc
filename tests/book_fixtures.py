"""Shared fixtures for the book tests: a small simulated release and a scratch copy of the
book sources (so a test build never touches the repository's ``book/_generated`` or ``_build``).

Set ``PROBEGUARD_TEST_RELEASE`` to an existing release folder to skip simulating one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def small_release(base: Path) -> Path:
    """A 5 % simulated release (``probeguard simulate --scale 0.05``), made once per session."""
    env = os.environ.get("PROBEGUARD_TEST_RELEASE")
    if env:
        return Path(env).resolve()
    out = base / "release-s005"
    if not (out / "manifest.json").is_file():
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
