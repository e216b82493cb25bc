"""Unexecuted ``.ipynb`` twins of the book's notebooks, for Colab and Binder.

The jupytext MyST sources ``notebooks/<name>.md`` are the source of truth; Colab cannot open
them, so each has a committed twin ``notebooks/ipynb/<name>.ipynb``: the same cells, converted
by jupytext exactly as :mod:`probeguard_core.book.build` converts them (stable cell ids
``cell-000``, ...), no outputs, plus a first markdown cell telling a Colab / Binder reader how
to install the repository. The book's launch buttons point at the twins
(:mod:`probeguard_core.book.sphinx_ext`).

    python -m probeguard_core.book.twins            # regenerate every twin
    python -m probeguard_core.book.twins --check    # exit 1 naming each stale twin

(``tools/sync_notebooks.py`` is the same command.) ``tests/test_book_twins.py`` fails when a
twin is stale.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["INSTALL_CELL_ID", "TWINS", "install_markdown", "stale_twins", "sync_twins", "twin_notebook", "twin_path",
           "twin_text"]

#: Folder of the twins, relative to the repository root.
TWINS = Path("notebooks") / "ipynb"
#: Id of the added first cell (the converted cells keep ``cell-000``, ``cell-001``, ...).
INSTALL_CELL_ID = "install"


def _repo_url(root: Path) -> str:
    import yaml

    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")) or {}
    url = (config.get("repository") or {}).get("url")
    if not url:
        raise ValueError(f"{root / '_config.yml'}: repository.url is not set (the twins' install cell needs it)")
    return str(url).rstrip("/")


def install_markdown(repo_url: str) -> str:
    """The first cell of every twin: how a Colab or Binder reader gets the package and the data."""
    name = repo_url.rsplit("/", 1)[-1]
    return (
        "**Running this notebook on Colab or Binder.** The source of this notebook is "
        "`notebooks/<name>.md` in the repository; this `.ipynb` is its generated, unexecuted twin. "
        "It reads a release folder from the repository (`data/simulated-v1` by default), so it must "
        "run inside a checkout of the repository with the package installed.\n\n"
        "* **Binder** installs the repository for you (`binder/requirements.txt`); run the cells as they are.\n"
        "* **Colab**: run this first, then restart the runtime if asked:\n\n"
        "  ```\n"
        f"  !git clone --depth 1 {repo_url}\n"
        f"  %cd {name}\n"
        "  !pip install -q -e '.[book]'\n"
        "  ```\n\n"
        "Locally: `pip install -e '.[book]'` in a checkout and open the notebook from `notebooks/`."
    )


def twin_path(source: Path, root: Path) -> Path:
    """``notebooks/ipynb/<name>.ipynb`` for ``notebooks/<name>.md``."""
    return root / TWINS / f"{Path(source).stem}.ipynb"


def twin_notebook(source: Path, root: Path) -> Any:
    """The twin of one jupytext source: converted as the build converts it, no outputs, with
    the install cell first."""
    import nbformat

    from probeguard_core.book.build import read_source

    nb = read_source(Path(source))
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    note = nbformat.v4.new_markdown_cell(install_markdown(_repo_url(root)).replace("<name>", Path(source).stem))
    note["id"] = INSTALL_CELL_ID
    nb.cells.insert(0, note)
    nb.metadata.pop("jupytext", None)  # a plain notebook: not paired with the .md by jupytext
    return nb


def twin_text(source: Path, root: Path) -> str:
    """The exact text of a twin (nbformat 4, one-space indent, trailing newline)."""
    import nbformat

    return nbformat.writes(twin_notebook(source, root), version=4) + "\n"


def _sources(root: Path) -> list[Path]:
    from probeguard_core.book.build import load_registry

    return [root / e.source for e in load_registry(root)]


def stale_twins(root: Path | None = None) -> list[str]:
    """Twins that are missing, differ from their source, or have no registered source."""
    from probeguard_core.book.paths import repo_root

    root = root or repo_root()
    problems = []
    sources = _sources(root)
    for src in sources:
        twin = twin_path(src, root)
        if not twin.is_file():
            problems.append(f"{twin.relative_to(root)}: missing")
        elif twin.read_text(encoding="utf-8") != twin_text(src, root):
            problems.append(f"{twin.relative_to(root)}: differs from {src.relative_to(root)}")
    known = {twin_path(s, root) for s in sources}
    for extra in sorted((root / TWINS).glob("*.ipynb")):
        if extra not in known:
            problems.append(f"{extra.relative_to(root)}: no registered notebooks/{extra.stem}.md")
    return problems


def sync_twins(root: Path | None = None) -> list[Path]:
    """Write every twin (only those whose text changed); remove twins without a source."""
    from probeguard_core.book.paths import repo_root

    root = root or repo_root()
    (root / TWINS).mkdir(parents=True, exist_ok=True)
    written = []
    sources = _sources(root)
    for src in sources:
        twin, text = twin_path(src, root), twin_text(src, root)
        if not twin.is_file() or twin.read_text(encoding="utf-8") != text:
            twin.write_text(text, encoding="utf-8")
            written.append(twin)
    known = {twin_path(s, root) for s in sources}
    for extra in (root / TWINS).glob("*.ipynb"):
        if extra not in known:
            extra.unlink()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probeguard_core.book.twins", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a twin is stale (write nothing)")
    args = ap.parse_args(argv)
    if args.check:
        stale = stale_twins()
        for line in stale:
            print(f"stale: {line}", file=sys.stderr)
        if stale:
            print("run: python -m probeguard_core.book.twins", file=sys.stderr)
        return 1 if stale else 0
    written = sync_twins()
    print(f"{len(written)} twin(s) written" + "".join(f"\n  {p}" for p in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
