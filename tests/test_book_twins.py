"""The committed ``notebooks/ipynb/<name>.ipynb`` twins (opened by the book's Colab and Binder
buttons) are exactly what ``python -m probeguard_core.book.twins`` generates from
``notebooks/<name>.md``; a stale, missing or orphaned twin fails here."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from book_fixtures import REPO

from probeguard_core.book import build as bb
from probeguard_core.book import twins as tw
from probeguard_core.book import sphinx_ext

ENTRIES = bb.load_registry(REPO)


def test_every_twin_is_current() -> None:
    stale = tw.stale_twins(REPO)
    assert not stale, "stale notebook twins (run `python -m probeguard_core.book.twins`):\n" + "\n".join(stale)


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_twin_is_unexecuted_with_stable_ids_and_install_cell(entry: bb.NotebookEntry) -> None:
    twin = REPO / tw.TWINS / f"{entry.name}.ipynb"
    nb = nbformat.read(twin, as_version=4)
    nbformat.validate(nb)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.id == tw.INSTALL_CELL_ID
    assert "pip install" in first.source and "Colab" in first.source and f"notebooks/{entry.name}.md" in first.source
    assert [c.id for c in nb.cells[1:]] == [f"cell-{i:03d}" for i in range(len(nb.cells) - 1)]
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    assert sum("parameters" in c.metadata.get("tags", []) for c in code) == 1
    # the same cells the build executes, in the same order
    src = bb.read_source(REPO / entry.source)
    assert [(c.cell_type, c.source) for c in nb.cells[1:]] == [(c.cell_type, c.source) for c in src.cells]


def test_launch_buttons_open_the_twins() -> None:
    assert sphinx_ext.TWINS == tw.TWINS.as_posix()
    for e in ENTRIES:
        assert (REPO / sphinx_ext.launch_path(e.name)).is_file(), e.name


def _copy(dest: Path) -> Path:
    for name in ("_config.yml", "_toc.yml", "pyproject.toml"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "notebooks", dest / "notebooks", ignore=shutil.ignore_patterns("pipeline", "__pycache__"))
    return dest


def test_edited_source_makes_its_twin_stale_and_sync_repairs_it(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(tmp_path)
    name = ENTRIES[0].name
    src = root / "notebooks" / f"{name}.md"
    src.write_text(src.read_text(encoding="utf-8").replace("\n## ", "\nAn added sentence.\n\n## ", 1), encoding="utf-8")
    orphan = root / tw.TWINS / "no_such_notebook.ipynb"
    orphan.write_text("{}", encoding="utf-8")
    (root / tw.TWINS / f"{ENTRIES[1].name}.ipynb").unlink()
    stale = tw.stale_twins(root)
    assert any(s.startswith(f"notebooks/ipynb/{name}.ipynb: differs") for s in stale), stale
    assert any(s.startswith(f"notebooks/ipynb/{ENTRIES[1].name}.ipynb: missing") for s in stale), stale
    assert any("no_such_notebook.ipynb: no registered" in s for s in stale), stale
    assert len(stale) == 3
    written = tw.sync_twins(root)
    assert sorted(p.name for p in written) == sorted([f"{name}.ipynb", f"{ENTRIES[1].name}.ipynb"])
    assert not orphan.exists()
    assert tw.stale_twins(root) == []
    assert "An added sentence." in (root / tw.TWINS / f"{name}.ipynb").read_text(encoding="utf-8")
    assert tw.sync_twins(root) == []  # idempotent: nothing rewritten


def test_cli_check_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    root = _copy(tmp_path)
    monkeypatch.setenv("PROBEGUARD_REPO_ROOT", str(root))
    bb._root_from.cache_clear()
    try:
        assert tw.main(["--check"]) == 0
        (root / tw.TWINS / f"{ENTRIES[0].name}.ipynb").unlink()
        assert tw.main(["--check"]) == 1
        assert f"{ENTRIES[0].name}.ipynb: missing" in capsys.readouterr().err
        assert tw.main([]) == 0
        assert tw.main(["--check"]) == 0
    finally:
        bb._root_from.cache_clear()
