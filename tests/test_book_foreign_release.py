"""The whole book renders from releases the book's authors did not write (issue 4 acceptance:
"rendering from a different release folder changes the numbers").

Three foreign releases (``tests/foreign_release.py``: DESIGN 2.7 manifests with provenance
"real" and no ``cells`` list; a backbone, a benchmark and missing artifacts the paper never
had) go through :func:`probeguard_core.book.build.run_notebooks` with every registered
notebook at its small test parameters, and the first one through the full ``jupyter-book``
build (warnings as errors). Every notebook must succeed and write its registered outputs, say
"real" and the release's name in its provenance banner, show a visible note where an input
is absent, and show numbers that differ from the same notebook run on the shipped simulated
release (its MedQA and MMLU-Pro medicine cells of Qwen3-8B, the ones the foreign releases are
made from: ``foreign_release.shipped_reference``).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import pandas as pd
import pytest
from book_fixtures import REPO, book_copy, once_per_session
from foreign_release import FOREIGN, SHIPPED, shipped_reference

from probeguard_core.book import build as bb
from probeguard_core.release import load_release

pytestmark = [pytest.mark.notebook, pytest.mark.slow]
#: ``PROBEGUARD_TEST_ONLY_NOTEBOOKS=a,b`` restricts the runs to those notebooks (a quick check of
#: this module's machinery with ``-k``; the full suite runs every registered notebook).
_ONLY = [n for n in os.environ.get("PROBEGUARD_TEST_ONLY_NOTEBOOKS", "").split(",") if n]
ENTRIES = [e for e in bb.load_registry(REPO) if not _ONLY or e.name in _ONLY]
PER_NOTEBOOK = {e.name: dict(e.test_params) for e in ENTRIES}
#: The reference run's parameters: the cells the foreign releases resemble, which are also the only
#: cells of its release (foreign_release.shipped_reference: the shipped release restricted to them).
REFERENCE = {"dataset": "medqa", "backbone": "Qwen/Qwen3-8B", "datasets": ["medqa", "mmlu_pro_med"],
             "backbones": ["Qwen/Qwen3-8B"], "table3_datasets": ["medqa"], "pooled_datasets": ["medqa", "mmlu_pro_med"]}
#: results.json keys that echo a parameter or name the cell, rather than report something of the release.
PARAMETER_KEYS = {"alpha", "n_splits", "n_draws", "delta", "n_boot", "checks", "backbone", "dataset", "datasets",
                  "simulated_backbone"}


def _with_root(root: Path) -> Any:
    class _Ctx:
        def __enter__(self) -> None:
            self.old = os.environ.get("PROBEGUARD_REPO_ROOT")
            os.environ["PROBEGUARD_REPO_ROOT"] = str(root)
            bb._root_from.cache_clear()

        def __exit__(self, *exc: Any) -> None:
            if self.old is None:
                os.environ.pop("PROBEGUARD_REPO_ROOT", None)
            else:
                os.environ["PROBEGUARD_REPO_ROOT"] = self.old
            bb._root_from.cache_clear()

    return _Ctx()


#: The foreign release that also goes through the full ``jupyter-book build``.
HTML_RELEASE = "mistral_medqa"


def _group(*names: str) -> list[Any]:
    """``names`` as parameters, each in the xdist group of its release (``--dist loadgroup``)."""
    return [pytest.param(n, marks=pytest.mark.xdist_group(f"release-{n}")) for n in names]


def _reading(gen: Path) -> dict[str, dict[str, Any]]:
    """:data:`PER_NOTEBOOK` with every RUN_LAST page reading this run's outputs (``gen``), not the
    fixture its small standalone test reads: its numbers must come from this release's pages."""
    return PER_NOTEBOOK | {n: PER_NOTEBOOK[n] | {"generated": str(gen)} for n in bb.RUN_LAST if n in PER_NOTEBOOK}


def _make_run(name: str, folder: Path) -> dict[str, Any]:
    """Run every notebook on one release (``shipped`` = the reference) into ``folder``."""
    root = book_copy(folder / "book")
    out: dict[str, Any] = {"html": None}
    with _with_root(root):
        if name == "shipped":
            rel, gen = shipped_reference(folder / "releases"), folder / "gen"
            res = bb.run_notebooks(rel, jobs=2, params=REFERENCE, per_notebook=_reading(gen), generated=gen, root=root,
                                   only=_ONLY or None)
        else:
            rel = FOREIGN[name](folder / "releases")
            gen = root / bb.GENERATED if name == HTML_RELEASE else folder / "gen"  # that one feeds the HTML build
            res = bb.run_notebooks(rel, jobs=2, per_notebook=_reading(gen), generated=gen, root=root,
                                   only=_ONLY or None)
            if name == HTML_RELEASE and all(r.ok for r in res) and not _ONLY:  # a subset cannot fill the toc
                out["html"] = str(bb.build_book(rel, root=root))
    out |= {"release": str(rel), "generated": str(gen),
            "results": [{"name": r.name, "ok": r.ok, "wall_s": r.wall_s, "output": str(r.output), "error": r.error}
                        for r in res]}
    return out


class _Runs:
    """``runs[name]``: the notebooks of one release, run once per test session.

    Each release is its own unit of work (made by the first xdist worker that asks, under a
    file lock, and reused by the others), so no single fixture runs all 60 notebooks: with
    ``--dist loadgroup`` the releases' groups run on different workers.
    """

    def __init__(self, base: Path):
        self.base = base
        self.memo: dict[str, dict[str, Any]] = {}

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name not in self.memo:
            with once_per_session(self.base, f"foreign-book-{name}") as (folder, must):
                if must:
                    folder.mkdir(parents=True)
                    try:
                        data = _make_run(name, folder)
                    except Exception as exc:  # recorded once, reported by every test that needs it
                        data = {"error": f"{type(exc).__name__}: {exc}"}
                    (folder / "run.json").write_text(json.dumps(data), encoding="utf-8")
            data = json.loads((folder / "run.json").read_text(encoding="utf-8"))
            if "error" in data:
                pytest.fail(f"running the notebooks on {name} failed: {data['error']}")
            run = {"release": Path(data["release"]), "generated": Path(data["generated"]),
                   "results": [bb.NotebookResult(r["name"], r["ok"], r["wall_s"], Path(r["output"]), r["error"])
                               for r in data["results"]]}
            if data["html"]:
                run["html"] = Path(data["html"])
            self.memo[name] = run
        return self.memo[name]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> _Runs:
    return _Runs(tmp_path_factory.getbasetemp())


def _results(run: dict[str, Any], name: str) -> dict[str, Any]:
    return json.loads((run["generated"] / name / "results.json").read_text())


def _numbers(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Flatten results.json to its headline values {key: number, question id or None} (the notes
    saying what is missing, booleans and lists are left out)."""
    flat: dict[str, Any] = {}
    for k, v in d.items():
        if k in PARAMETER_KEYS or k.endswith("_missing"):
            continue
        if isinstance(v, dict):
            flat.update(_numbers(v, f"{prefix}{k}."))
        elif v is None or isinstance(v, str) or (isinstance(v, (int, float)) and not isinstance(v, bool)):
            flat[prefix + k] = v
    return flat


def _differs(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    if isinstance(a, str) or isinstance(b, str):
        return str(a) != str(b)
    return not math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.xdist_group("release-shipped")
def test_reference_run_on_the_shipped_release(runs: _Runs) -> None:
    failed = [f"{r.name}: {r.error}" for r in runs["shipped"]["results"] if not r.ok]
    assert not failed, failed


@pytest.mark.parametrize("name", _group(*FOREIGN))
def test_every_notebook_succeeds_and_writes_its_outputs(runs: _Runs, name: str) -> None:
    run = runs[name]
    failed = [f"{r.name}: {r.error}" for r in run["results"] if not r.ok]
    assert not failed, f"{name}: {failed}"
    for e in ENTRIES:
        folder = run["generated"] / e.name
        missing = [f for f in e.outputs if not (folder / f).is_file()]
        assert not missing, f"{name}/{e.name} did not write {missing}"
        for png in folder.glob("*.png"):
            assert png.with_suffix(".svg").is_file(), f"{name}/{e.name}: {png.name} has no SVG twin"
        for csv in folder.glob("*.csv"):
            df = pd.read_csv(csv)  # an absent input gives a header-only table, never a missing file
            assert len(df.columns) > 0, f"{name}/{e.name}: {csv.name} has no columns"


@pytest.mark.parametrize("name", _group(*FOREIGN))
def test_provenance_banner_names_the_real_release(runs: _Runs, name: str) -> None:
    run = runs[name]
    rel = load_release(run["release"])
    assert rel.provenance == "real" and "cells" not in rel.manifest
    for r in run["results"]:
        nb = nbformat.read(r.output, as_version=4)
        shown = json.dumps([c.get("outputs", []) for c in nb.cells], ensure_ascii=False)
        assert 'data-provenance=\\"real\\"' in shown, f"{name}/{r.name}: banner does not say real"
        assert f"Release: {rel.name}" in shown and "(real;" in shown, f"{name}/{r.name}: banner lacks the release name"
        assert "Simulated release" not in shown, f"{name}/{r.name}: says simulated"


#: Reference pages that document the code (prompt files, feature registry, algorithms, settings):
#: the same on every release by design, so they are not expected to change with it.
RELEASE_INDEPENDENT = {"appendix_a_prompts", "appendix_b_table4", "appendix_d_algorithms", "appendix_l_table9"}


@pytest.mark.parametrize("name", _group(*FOREIGN))
def test_numbers_come_from_the_release(runs: _Runs, name: str) -> None:
    """Per notebook, some headline value of results.json differs from the shipped release's (a
    number, a chosen question, or a number the release cannot give)."""
    for e in (e for e in ENTRIES if e.name not in RELEASE_INDEPENDENT):
        ours = _numbers(_results(runs[name], e.name))
        ref = _numbers(_results(runs["shipped"], e.name))
        common = sorted(set(ours) & set(ref))
        assert common, f"{name}/{e.name}: no headline number in common with the shipped release"
        assert any(_differs(ours[k], ref[k]) for k in common), \
            f"{name}/{e.name}: every headline number equals the shipped release's"


@pytest.mark.xdist_group("release-two_datasets")
def test_a_complete_foreign_release_changes_numbers_not_just_gaps(runs: _Runs) -> None:
    """The release with every artifact: in each notebook, a value both releases report differs
    (not merely one that this release cannot give)."""
    name = "two_datasets"
    for e in (e for e in ENTRIES if e.name not in RELEASE_INDEPENDENT):
        ours, ref = _numbers(_results(runs[name], e.name)), _numbers(_results(runs["shipped"], e.name))
        both = sorted(k for k in set(ours) & set(ref) if ours[k] is not None and ref[k] is not None)
        assert any(_differs(ours[k], ref[k]) for k in both), \
            f"{name}/{e.name}: no reported value differs from the shipped release ({both})"


@pytest.mark.parametrize("name", _group(*FOREIGN))
def test_results_agree_with_their_tables(runs: _Runs, name: str) -> None:
    for e in ENTRIES:
        folder = runs[name]["generated"] / e.name
        results = _results(runs[name], e.name)
        for chk in results.get("checks", []):
            df = pd.read_csv(folder / chk["csv"])
            m = pd.Series(True, index=df.index)
            for k, v in chk["row"].items():
                m &= (np.isclose(df[k].astype(float), float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool)
                      else df[k].astype(str) == str(v))
            assert m.sum() == 1, (name, e.name, chk)
            ours, theirs = results[chk["key"]], float(df.loc[m, chk["column"]].iloc[0])
            if ours is None:  # a number the release cannot give: null in results.json, empty in the CSV
                assert math.isnan(theirs), (name, e.name, chk, theirs)
            else:
                assert math.isclose(float(ours), theirs, rel_tol=1e-5, abs_tol=1e-9), (name, e.name, chk)


def _page(runs: _Runs, name: str, notebook: str) -> str:
    r = next(r for r in runs[name]["results"] if r.name == notebook)
    nb = nbformat.read(r.output, as_version=4)
    return json.dumps([c.get("outputs", []) for c in nb.cells], ensure_ascii=False)


@pytest.mark.parametrize(("name", "notebook", "text"), [
    pytest.param(*row, marks=pytest.mark.xdist_group(f"release-{row[0]}")) for row in [
    ("pubmedqa_logs_only", "table6_probe_controls", "no counter-evidence probe records for pubmedqa"),
    ("pubmedqa_logs_only", "table1_fig1", "no probe records for pubmedqa"),
    ("pubmedqa_logs_only", "hard_vs_soft_rse", "no NLI records for pubmedqa"),
    ("pubmedqa_logs_only", "unanimous_layer_fig3", "Figure 3 needs them"),
    ("pubmedqa_logs_only", "certification_fig4", "without a counter-evidence probe record"),
    ("pubmedqa_logs_only", "table2_3_discrimination", "single backbone"),
    ("mistral_medqa", "table8_specialty", "no specialty labels"),
    ("mistral_medqa", "appendix_j_cost", "no cost fields"),
    ("mistral_medqa", "table6_probe_controls", "no control-arm probe records"),
    ("mistral_medqa", "whatif_simulator", "no generative model for mistralai/Mistral-7B-Instruct-v0.3"),
    ("mistral_medqa", "certification_fig4", "pooled domains (§4.4) need two or more"),
    ("two_datasets", "certification_fig4", "no augment cell"),
]])
def test_absent_inputs_show_a_visible_note(runs: _Runs, name: str, notebook: str, text: str) -> None:
    page = _page(runs, name, notebook)
    assert "probeguard-missing" in page and text in page, f"{name}/{notebook}: no note containing {text!r}"


@pytest.mark.xdist_group("release-pubmedqa_logs_only")
def test_paper_column_is_empty_for_what_the_paper_never_ran(runs: _Runs) -> None:
    t2 = pd.read_csv(runs["mistral_medqa"]["generated"] / "table2_3_discrimination" / "table2.csv")
    assert set(t2["backbone"]) == {"mistralai/Mistral-7B-Instruct-v0.3"} and t2["paper"].isna().all()
    t5 = pd.read_csv(runs["pubmedqa_logs_only"]["generated"] / "table5_fig5_all_signals" / "table5.csv")
    assert set(t5["dataset"]) == {"pubmedqa"} and t5["paper"].isna().all()
    # a benchmark the paper has, under a backbone it has, keeps the paper's value beside ours
    t7 = pd.read_csv(runs["two_datasets"]["generated"] / "table7_ablation" / "table7.csv")
    assert set(t7["dataset"]) == {"medqa", "mmlu_pro_med"}


@pytest.mark.xdist_group(f"release-{HTML_RELEASE}")
def test_the_whole_book_is_built_from_a_foreign_release(runs: _Runs) -> None:
    run = runs[HTML_RELEASE]
    assert "html" in run, "the notebooks failed, so the HTML build did not run"
    html = run["html"]
    assert (html / "index.html").is_file()
    page = (html / "book" / "_generated" / "table1_fig1.html").read_text(encoding="utf-8")
    assert "lab-x-mistral-medqa-2025" in page and "Simulated release" not in page
    landing = (html / "book" / "intro.html").read_text(encoding="utf-8")
    assert "Release: lab-x-mistral-medqa-2025" in landing


# --------------------------------------------------------------------------- the helpers, without notebooks
@pytest.fixture(scope="module")
def logs_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return FOREIGN["pubmedqa_logs_only"](tmp_path_factory.mktemp("units"))


def test_paper_lookup_of_a_backbone_or_benchmark_the_paper_never_ran() -> None:
    from probeguard_core.paper import beside_paper, reported

    with pytest.raises(ValueError, match="not in the reported table"):
        reported(backbone="mistralai/Mistral-7B-Instruct-v0.3")  # a typo still raises by default
    assert reported(missing_ok=True, source="§1", backbone="mistralai/Mistral-7B-Instruct-v0.3").empty
    assert len(reported(missing_ok=True, source="§1", dataset=["pubmedqa", "medqa"], backbone="Qwen/Qwen3-8B")) > 0
    ours = pd.DataFrame({"quantity": ["n_unanimous"], "value": [10.0]})
    got = beside_paper(ours, on=["quantity"], source="§1", backbone="mistralai/Mistral-7B-Instruct-v0.3", dataset="medqa")
    assert got["paper"].isna().all() and got["diff"].isna().all()
    known = beside_paper(ours, on=["quantity"], source="§1", backbone="Qwen/Qwen3-8B", dataset="medqa")
    assert known["paper"].notna().all()
    with pytest.raises(ValueError, match="unknown filter"):
        beside_paper(ours, on=["quantity"], source="§1", backbne="Qwen/Qwen3-8B")


def test_defaults_select_from_the_release(logs_only: Path) -> None:
    from probeguard_core.tables import picking

    shipped = load_release(SHIPPED, verify=False)
    assert picking.pick_backbone(shipped) == "Qwen/Qwen3-8B"
    assert picking.pick_dataset(shipped, None, "Qwen/Qwen3-8B") == "medqa"
    assert picking.pick_datasets(shipped, None, "Qwen/Qwen3-8B", design=["medqa", "mmlu_pro_med", "medmcqa"]) == \
        ["medqa", "mmlu_pro_med", "medmcqa"]
    assert picking.pick_backbones(shipped)[0] == "Qwen/Qwen3-8B" and len(picking.pick_backbones(shipped)) == 3
    rel = load_release(logs_only)
    assert picking.pick_backbone(rel) == "Qwen/Qwen3-8B" and picking.pick_dataset(rel, None, "Qwen/Qwen3-8B") == "pubmedqa"
    # a benchmark the paper never used is kept by the paper's design of a table
    assert picking.pick_datasets(rel, None, "Qwen/Qwen3-8B", design=["medqa", "mmlu_pro_med"]) == ["pubmedqa"]
    assert picking.pick_datasets(rel, ["medqa"], "Qwen/Qwen3-8B") == []
    with pytest.raises(ValueError, match="dataset='medqa'"):
        picking.pick_dataset(rel, "medqa", "Qwen/Qwen3-8B")
    with pytest.raises(ValueError, match="backbone='x/y'"):
        picking.pick_backbone(rel, "x/y")


def test_certification_says_why_it_cannot_run_without_probe_records(logs_only: Path) -> None:
    from probeguard_core import alpha_explorer
    from probeguard_core.tables import certification

    cell = load_release(logs_only).cells[0]
    table = certification.certification_inputs([cell])
    n1 = int((table.stratum == "S1").sum())
    why = certification.uncertifiable(table)
    assert why is not None and f"{n1} unanimous questions without a counter-evidence probe record" in why
    arms = certification.certification_arms(table, None, [0.15], n_splits=2)
    assert set(arms["arm"]) == {"stratified_ltt_a1"}  # the paper's rule is left out, never run on a subset
    pre = alpha_explorer.precompute(table, alphas=[0.1, 0.2], n_splits=2)
    assert "all · paper rule" not in set(pre["series"]) and "S2 · trajectory agreement ā" in set(pre["series"])
    shipped = certification.certification_inputs([load_release(SHIPPED, verify=False).cell("medqa", "Qwen/Qwen3-8B")])
    assert certification.uncertifiable(shipped) is None


def test_empty_table_and_placeholder_figure() -> None:
    from probeguard_core.tables import display
    from probeguard_core.paper import beside_paper

    t = display.empty_table(["backbone", "quantity", "value"])
    assert list(t.columns) == ["backbone", "quantity", "value"] and t.empty and t["value"].dtype == float
    assert beside_paper(t, on=["backbone", "quantity"], source="§1").empty  # the paper column fits an empty table
    fig = display.placeholder_figure("this release has no probe records for X; Table 6 needs them")
    assert "Table 6 needs them" in "".join(t.get_text() for t in fig.axes[0].texts)
    html = display.note("no <probe> records").data
    assert "probeguard-missing" in html and "&lt;probe&gt;" in html


def test_build_starts_the_heaviest_notebooks_first_and_pins_kernel_threads(monkeypatch: pytest.MonkeyPatch,
                                                                           tmp_path: Path) -> None:
    order: list[str] = []

    def fake_worker(args: tuple[str, str, dict[str, Any], str]) -> bb.NotebookResult:
        order.append(Path(args[0]).stem)
        return bb.NotebookResult(Path(args[0]).stem, True, 0.0, Path(args[1]))

    monkeypatch.setattr(bb, "_worker", fake_worker)
    res = bb.run_notebooks(SHIPPED, jobs=1, root=REPO, generated=tmp_path)
    weights = {e.name: e.weight for e in ENTRIES}
    first = [n for n in weights if n not in bb.RUN_LAST]  # pages that read the others' outputs run last
    assert order == sorted(first, key=lambda n: -weights[n]) + [n for n in bb.RUN_LAST if n in weights]
    assert [r.name for r in res] == [e.name for e in ENTRIES]  # results stay in registry order
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "4")
    with bb._kernel_env():
        assert os.environ["OMP_NUM_THREADS"] == "1" and os.environ["OPENBLAS_NUM_THREADS"] == "1"
        assert os.environ["MKL_NUM_THREADS"] == "4"  # the user's setting wins
    assert "OMP_NUM_THREADS" not in os.environ and "OPENBLAS_NUM_THREADS" not in os.environ
    assert os.environ["MKL_NUM_THREADS"] == "4"


def test_registry_weight_must_be_seconds(tmp_path: Path) -> None:
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "registry.yml").write_text("- name: a\n  weight: -1\n")
    with pytest.raises(bb.BuildError, match="weight must be a non-negative number"):
        bb.load_registry(tmp_path)
