"""Where the book's files are: the repository root and the one release-path resolver.

Every notebook, the build and the tests find the repository, a release folder and an output
folder through these three functions, whether they run under papermill (the build injects
``release`` and ``output_dir``) or interactively from ``notebooks/``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

__all__ = ["BuildError", "repo_relative", "repo_root", "resolve", "resolve_release"]


class BuildError(RuntimeError):
    """The book could not be built: names the notebook (or file) and the error."""


def _is_root(p: Path) -> bool:
    return (p / "_toc.yml").is_file() and (p / "pyproject.toml").is_file()


@lru_cache(maxsize=None)
def _root_from(cwd: str) -> Path:
    env = os.environ.get("PROBEGUARD_REPO_ROOT")
    if env:
        p = Path(env).resolve()
        if not _is_root(p):
            raise BuildError(f"PROBEGUARD_REPO_ROOT={env} holds no _toc.yml and pyproject.toml")
        return p
    here = Path(cwd).resolve()
    for p in (here, *here.parents):
        if _is_root(p):
            return p
    pkg = Path(__file__).resolve().parents[2]
    if _is_root(pkg):
        return pkg
    raise BuildError(
        f"cannot find the repository root (a folder with _toc.yml and pyproject.toml) above {here} "
        f"or at {pkg}; set PROBEGUARD_REPO_ROOT"
    )


def repo_root() -> Path:
    """The repository root: nearest folder upward from the working directory with ``_toc.yml``
    and ``pyproject.toml`` (``$PROBEGUARD_REPO_ROOT`` wins; else the checkout of this package)."""
    return _root_from(os.getcwd())


def resolve(path: str | os.PathLike[str], root: Path | None = None) -> Path:
    """An absolute path: ``path`` as is when absolute, else relative to ``root`` (default
    :func:`repo_root`).

    >>> resolve("/tmp/x")
    PosixPath('/tmp/x')
    >>> resolve("data/simulated-v1", root=Path("/repo"))
    PosixPath('/repo/data/simulated-v1')
    """
    p = Path(path).expanduser()
    return p if p.is_absolute() else (root or repo_root()) / p


def resolve_release(release: str | os.PathLike[str], root: Path | None = None) -> Path:
    """The one release-path resolver: the release folder ``release`` (absolute, or relative to
    the repository root) as an absolute path; ``ValueError`` when it has no ``manifest.json``."""
    path = resolve(release, root)
    if not (path / "manifest.json").is_file():
        raise ValueError(f"release {release}: {path} has no manifest.json")
    return path


def repo_relative(path: str | os.PathLike[str], root: Path | None = None) -> str:
    """``path`` relative to the repository root when it lies inside it (POSIX form), else as given:
    what executed notebooks and banners show, so no build-machine path leaks into them.

    >>> repo_relative("/repo/data/simulated-v1", root=Path("/repo"))
    'data/simulated-v1'
    >>> repo_relative("/elsewhere/rel", root=Path("/repo"))
    '/elsewhere/rel'
    """
    p = Path(path)
    base = root or repo_root()
    try:
        return p.resolve().relative_to(base.resolve()).as_posix() if p.is_absolute() else p.as_posix()
    except ValueError:
        return str(path)
