"""The build's first tasks: the main cells' per-question tables, computed once for the pages that
share them (registry ``cell_tables``; ``book.build._warm_tasks``, ``tables.warm.warm_cell_tables``)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from probeguard_core.book import build as bb
from probeguard_core import tables as T
from probeguard_core.release import load_release

RELEASE = Path(__file__).resolve().parents[1] / "data" / "simulated-v1"


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROBEGUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PROBEGUARD_CACHE", raising=False)
    return tmp_path / "cache"


def _entries(*flags: bool) -> list[bb.NotebookEntry]:
    return [bb.NotebookEntry(f"n{i}", cell_tables=f) for i, f in enumerate(flags)]


def test_registry_cell_tables_must_be_a_boolean(tmp_path: Path) -> None:
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "registry.yml").write_text("- name: a\n  cell_tables: yes please\n")
    with pytest.raises(bb.BuildError, match="cell_tables must be true or false"):
        bb.load_registry(tmp_path)


def test_shipped_registry_marks_the_pages_that_share_the_tables() -> None:
    marked = {e.name for e in bb.load_registry() if e.cell_tables}
    assert {"table2_3_discrimination", "table5_fig5_all_signals", "unanimous_layer_fig3", "appendix_j_cost"} <= marked


def test_tables_are_warmed_only_for_two_sharing_pages_with_the_cache_on(cache_dir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    main = [(c.dataset, c.backbone) for c in load_release(RELEASE, verify=False).main_cells()]
    tasks = bb._warm_tasks(RELEASE, _entries(True, False, True), {"seed": 7})
    assert [(d, b) for _, d, b, _ in tasks] == main and {s for *_, s in tasks} == {7}
    assert bb._warm_tasks(RELEASE, _entries(True, False), {}) == []  # one page: it computes them itself
    monkeypatch.setenv("PROBEGUARD_CACHE", "0")
    assert bb._warm_tasks(RELEASE, _entries(True, True), {}) == []  # nothing to keep them in


def test_a_failing_warm_task_is_reported_not_raised(tmp_path: Path, cache_dir: Path) -> None:
    label, seconds, error = bb._warm_worker((str(tmp_path / "no-release"), "medqa", "Qwen/Qwen3-8B", 42))
    assert label == "medqa/Qwen/Qwen3-8B" and seconds >= 0 and error and "no-release" in error


def test_after_the_warm_task_the_pages_tables_come_without_reading_the_records(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cell0 = min(load_release(RELEASE, verify=False).main_cells(), key=lambda c: c.file("logs").stat().st_size)
    label, _, error = bb._warm_worker((str(RELEASE), cell0.dataset, cell0.backbone, 42))
    assert error is None, error
    cell = load_release(RELEASE).cell(cell0.dataset, cell0.backbone)
    scores, probe = T.cell_scores(cell), T.cell_probe_table(cell)
    cost, cert = T.cost_frame(cell), T.certification_inputs([cell])
    assert not {"logs", "probe", "nli", "self_report"} & set(cell.__dict__)  # no record was read
    fresh = load_release(RELEASE).cell(cell0.dataset, cell0.backbone)
    monkeypatch.setenv("PROBEGUARD_CACHE", "0")  # computed from the records
    for got, want in ((scores, T.cell_scores(fresh)), (probe, T.cell_probe_table(fresh)),
                      (cost, T.cost_frame(fresh)), (cert, T.certification_inputs([fresh]))):
        pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=True)
