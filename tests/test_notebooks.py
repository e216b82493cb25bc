"""Every registered notebook runs under papermill with small parameters on a small simulated
release, writes the outputs it declares, and its headline numbers agree with its CSVs.
Plus the build driver's own behaviour (registry checks, failing notebooks, paths)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from book_fixtures import REPO, small_release

from probeguard_core import alpha_explorer
from probeguard_core.tables import audits, certification
from probeguard_core.book import build as bb
from probeguard_core.certify import repeated_splits, summarize
from probeguard_core.release import load_release

pytestmark = [pytest.mark.notebook, pytest.mark.slow]
ENTRIES = bb.load_registry(REPO)


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_release(tmp_path_factory.getbasetemp())


def _run(entry: bb.NotebookEntry, release: Path, out: Path) -> tuple[bb.NotebookResult, Path]:
    params = {"release": str(release), "output_dir": str(out / entry.name), **entry.test_params}
    res = bb.execute_notebook(REPO / entry.source, out / f"{entry.name}.ipynb", params, cwd=REPO)
    return res, out / entry.name


def _lookup(csv: Path, row: dict, column: str) -> float:
    df = pd.read_csv(csv)
    m = pd.Series(True, index=df.index)
    for k, v in row.items():
        col = df[k]
        m &= np.isclose(col.astype(float), float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) \
            else col.astype(str) == str(v)
    hits = df.loc[m, column]
    assert len(hits) == 1, f"{csv.name}: {len(hits)} rows match {row}"
    return float(hits.iloc[0])


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_notebook_runs_and_writes_its_outputs(entry: bb.NotebookEntry, release: Path, tmp_path: Path) -> None:
    res, out = _run(entry, release, tmp_path)
    assert res.ok, f"{entry.name} failed: {res.error}"
    missing = [f for f in entry.outputs if not (out / f).is_file()]
    assert not missing, f"{entry.name} did not write {missing}"
    for png in out.glob("*.png"):
        assert png.with_suffix(".svg").is_file(), f"{png.name} has no SVG twin"
        assert png.stat().st_size > 1000
    results = json.loads((out / "results.json").read_text())
    if not entry.no_checks:  # an exemption names its reason in notebooks/registry.yml
        assert results.get("checks"), f"{entry.name}: results.json has no consistency checks (nothing would be verified)"
    for chk in results.get("checks") or []:
        ours = results[chk["key"]]
        theirs = _lookup(out / chk["csv"], chk["row"], chk["column"])
        assert math.isclose(float(ours), theirs, rel_tol=1e-5, abs_tol=1e-9), (chk, ours, theirs)
    for csv in out.glob("*.csv"):
        # a page whose registry entry says why it may lack a check may also show an empty table
        assert len(pd.read_csv(csv)) > 0 or entry.no_checks, f"{csv.name} is empty"
    nb = nbformat.read(res.output, as_version=4)
    tags = [c.metadata.get("tags", []) for c in nb.cells]
    assert sum("parameters" in t for t in tags) == 1
    injected = [t for t in tags if "injected-parameters" in t]
    assert injected and all("remove-cell" in t for t in injected)
    outputs = json.dumps([c.get("outputs", []) for c in nb.cells])
    assert "probeguard-provenance" in outputs and "Simulated release" in outputs
    assert str(REPO) not in nbformat.writes(nb), f"{entry.name}: the executed notebook holds a build-machine path"
    shown_inputs = _inputs_shown(out)
    if shown_inputs and entry.name not in LISTS_INPUTS:  # issue 22 pt 4: marked where shown, not only on departures
        assert "given to the simulator as" in outputs and "probeguard-inputs" in outputs, (
            f"{entry.name} shows simulator inputs {shown_inputs} beside the paper but never says they are inputs")


#: Pages whose own tables already say, row by row, which numbers are inputs of the simulator.
LISTS_INPUTS = {"departures": "its 'role' column marks each input and names its params.yaml keys"}


def _inputs_shown(out: Path) -> list[str]:
    """The quantities of INPUT_QUANTITIES a page's CSVs show beside the paper (rows with ours and the paper's)."""
    from probeguard_core.tables.inputs import INPUT_QUANTITIES

    shown: set[str] = set()
    for csv in out.glob("*.csv"):
        df = pd.read_csv(csv)
        if {"quantity", "value", "paper"} <= set(df.columns):
            rows = df[pd.to_numeric(df["value"], errors="coerce").notna() & df["paper"].notna()]
            shown |= set(rows["quantity"].astype(str)) & set(INPUT_QUANTITIES)
    return sorted(shown)


def test_registry_agrees_with_notebooks_and_toc() -> None:
    """Every notebooks/*.md is registered and listed in _toc.yml as book/_generated/<name> (fails on a
    new, unregistered notebook: register it in notebooks/registry.yml and _toc.yml)."""
    bb.check_registry(REPO, strict=True)


def test_registry_refuses_a_chapter_field_and_toc_must_list_each_page(tmp_path: Path) -> None:
    """The registry has no ``chapter`` field (each page is its own toc entry), and the check names a
    registered notebook that ``_toc.yml`` does not list."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "registry.yml").write_text("- name: a\n  chapter: book/a.md\n")
    with pytest.raises(bb.BuildError, match=r"unknown field\(s\) \['chapter'\]"):
        bb.load_registry(tmp_path)
    (tmp_path / "notebooks" / "registry.yml").write_text("- name: a\n- name: b\n")
    for n in ("a", "b"):
        (tmp_path / "notebooks" / f"{n}.md").write_text(f"# Page {n}\n")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/_generated/a\n"
                                       "  - file: book/_generated/c\n")
    with pytest.raises(bb.BuildError) as err:
        bb.check_registry(tmp_path)
    assert "book/_generated/b is not listed" in str(err.value)
    assert "lists book/_generated/c but no notebook of that name is registered" in str(err.value)


def test_landing_page_links_only_the_pages_a_build_has(tmp_path: Path) -> None:
    """``{{ link.<name> }}``: a ``{doc}`` link to a page the build has, the page's title as plain text
    for one an ``--only`` build leaves out (no dead link on the landing page)."""
    links = bb.page_links(REPO)
    assert set(links) == {e.name for e in ENTRIES}
    assert links["ledger"] == "{doc}`/book/_generated/ledger`"
    some = bb.page_links(REPO, ["certification_fig4"])
    assert some["certification_fig4"] == "{doc}`/book/_generated/certification_fig4`"
    assert some["ledger"] == "*Which of the paper's claims hold on this release* (not in this build)"
    intro = (REPO / "book" / "intro.md").read_text(encoding="utf-8")
    assert "{{ link.ledger }}" in intro
    assert not re.search(r"\]\((?!https?:)[^)]*\)|\{doc\}", intro), "the landing page links a page by its path"


def test_same_release_gives_byte_identical_csvs(release: Path, tmp_path: Path) -> None:
    entry = next(e for e in ENTRIES if e.name == "certification_fig4")
    a = _run(entry, release, tmp_path / "a")[1]
    b = _run(entry, release, tmp_path / "b")[1]
    names = sorted(p.name for p in a.glob("*.csv"))
    assert names and names == sorted(p.name for p in b.glob("*.csv"))
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes(), n


def test_a_failing_notebook_is_named_with_its_error(tmp_path: Path) -> None:
    src = tmp_path / "broken.md"
    text = (REPO / "notebooks" / "table1_fig1.md").read_text()
    head = text[: text.index("```\n", text.index(":tags: [parameters")) + 4]  # up to the parameters cell
    src.write_text(head + "\n```{code-cell} ipython3\nraise ValueError('boom in the notebook')\n```\n")
    res = bb.execute_notebook(src, tmp_path / "broken.ipynb", {"release": "x", "output_dir": str(tmp_path)}, cwd=REPO)
    assert not res.ok and res.name == "broken"
    assert "ValueError: boom in the notebook" in res.error


def test_notebook_without_parameters_cell_is_rejected(tmp_path: Path) -> None:
    src = tmp_path / "noparams.md"
    src.write_text("---\njupytext:\n  text_representation:\n    extension: .md\n    format_name: myst\n"
                   "kernelspec:\n  display_name: Python 3\n  language: python\n  name: python3\n---\n\n"
                   "```{code-cell} ipython3\nx = 1\n```\n")
    res = bb.execute_notebook(src, tmp_path / "noparams.ipynb", {}, cwd=REPO)
    assert not res.ok and "no cell tagged 'parameters'" in res.error


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bb.main(["--release", str(tmp_path), "--only", "table1_fig1", "--no-html"]) == 2
    assert "has no manifest.json" in capsys.readouterr().err
    assert bb.main(["--release", str(tmp_path), "--params-json", "[1]"]) == 2
    with pytest.raises(ValueError, match="unknown notebook"):
        bb.run_notebooks(tmp_path, only=["nope"], root=REPO)


def test_repo_root_and_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROBEGUARD_REPO_ROOT", raising=False)
    monkeypatch.chdir(REPO / "notebooks")
    bb._root_from.cache_clear()
    assert bb.repo_root() == REPO
    assert bb.resolve("data/x") == REPO / "data" / "x"
    assert bb.resolve("/abs/x") == Path("/abs/x")


def test_filtered_toc_keeps_only_selected_notebooks() -> None:
    toc = {"root": "book/intro", "parts": [{"caption": "c", "chapters": [
        {"file": "book/_generated/a"}, {"file": "book/_generated/b"}, {"file": "book/m"}]}]}
    toc["parts"].append({"caption": "only a", "chapters": [{"file": "book/_generated/a"}]})
    got = bb._filtered_toc(toc, {"b"})
    assert len(got["parts"]) == 1  # the part left without pages is dropped
    assert got["parts"][0]["chapters"] == [{"file": "book/_generated/b"}, {"file": "book/m"}]


def test_alpha_explorer_matches_the_core(release: Path) -> None:
    rel = load_release(release)
    table = certification.certification_inputs([rel.cell("medqa", "Qwen/Qwen3-8B")])
    pre = alpha_explorer.precompute(table, alphas=[0.1, 0.2], n_splits=4, seed=7)
    ref = summarize(repeated_splits(table.score, table.error, table.stratum, alphas=[0.1, 0.2], n_splits=4, seed=7))
    got = pre[pre.series == "all · paper rule"].set_index("alpha")["coverage_mean"]
    want = ref[ref.stratum == "all"].set_index("alpha")["coverage_mean"]
    assert np.allclose(got.to_numpy(), want.to_numpy(), equal_nan=True)
    s1 = pre[pre.series == "S1 · z(κ)+z(RSE)"].set_index("alpha")["coverage_mean"]
    assert np.allclose(s1.to_numpy(), ref[ref.stratum == "S1"].set_index("alpha")["coverage_mean"].to_numpy(),
                       equal_nan=True)
    html = alpha_explorer.explorer_html(pre, initial=0.2)
    assert 'id="probeguard-alpha-explorer"' in html and 'data-alpha="0.20"' in html
    assert "<script type=\"module\">" in html and "https://" not in html.split("<script type=\"module\">")[0]
    with pytest.raises(ValueError, match="slider grid"):
        alpha_explorer.explorer_html(pre, initial=0.5)
    box = alpha_explorer.alpha_widget(table, n_splits=4, seed=7, initial=0.2)
    live = box.result[box.result.series == "all · paper rule"]["coverage_mean"].iloc[0]
    assert math.isclose(live, float(got.loc[0.2])) or (math.isnan(live) and math.isnan(float(got.loc[0.2])))
    box.slider.value = 0.1  # moving the slider recomputes through the core
    assert float(box.result["alpha"].iloc[0]) == 0.1


def test_violation_upper_bound_is_clopper_pearson() -> None:
    from statsmodels.stats.proportion import proportion_confint

    for k, n in ((0, 2000), (3, 2000), (50, 200)):
        # one-sided 95 % upper bound = upper end of the two-sided 90 % exact interval
        assert math.isclose(audits.violation_upper_bound(k, n), proportion_confint(k, n, alpha=0.10, method="beta")[1],
                            rel_tol=1e-9)
    assert audits.violation_upper_bound(5, 5) == 1.0


def test_landing_page_quotes_results_from_the_notebooks(tmp_path: Path) -> None:
    """``{{ ours.<notebook>.<key> }}`` in ``book/*.md`` reads that notebook's ``results.json``; a
    notebook not in the build reads a marker; a key it lacks is an error naming the page."""
    import json

    from probeguard_core.book import prose

    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "a.md").write_text("AUROC {{ ours.nb1.auc }} on {{ ours.nb1.backbone }}; "
                                            "{{ ours.nb2.x }}\n", encoding="utf-8")
    gen = tmp_path / "gen"
    (gen / "nb1").mkdir(parents=True)
    (gen / "nb1" / "results.json").write_text(json.dumps({"auc": 0.84886, "backbone": "Qwen/Qwen3-8B"}))
    subs = prose.results_substitutions(tmp_path, gen)
    assert subs == {"nb1": {"auc": "0.849", "backbone": "Qwen3-8B"}, "nb2": {"x": prose.NOT_RUN}}
    (tmp_path / "book" / "b.md").write_text("{{ ours.nb1.typo }}\n", encoding="utf-8")
    with pytest.raises(KeyError, match=r"book/b\.md.*ours\.nb1\.typo"):
        prose.results_substitutions(tmp_path, gen)


def _results_writes(nb: str, key: str) -> bool:
    """Whether notebook ``nb``'s results cell writes ``key`` (itself, ``key=...``, or through a
    builder's results, ``key=...`` / ``"key": ...``); read from the source: no build needed."""
    src = (REPO / "notebooks" / f"{nb}.md").read_text(encoding="utf-8")
    results_cell = src[src.rindex("out.results("):]
    builders = "".join(p.read_text(encoding="utf-8") for p in (REPO / "probeguard_core" / "tables").glob("*.py"))
    return bool(re.search(rf"\b{key}\s*=", results_cell) or (
        "**" in results_cell and re.search(rf'(\b{key}=|"{key}"\s*:)', builders)))


def test_every_number_the_landing_page_quotes_exists_in_its_notebooks_results() -> None:
    """``{{ ours.<notebook>.<key> }}`` in ``book/*.md`` names registered notebooks and keys that each
    notebook's results cell writes."""
    from probeguard_core.book import prose

    names = {e.name for e in ENTRIES}
    for md in sorted((REPO / "book").glob("*.md")):
        for nb, key in prose.REFERENCE.findall(md.read_text(encoding="utf-8")):
            assert nb in names, f"{md.name}: {{{{ ours.{nb}.{key} }}}} names no notebook of the registry"
            assert _results_writes(nb, key), f"{md.name}: {{{{ ours.{nb}.{key} }}}}: notebooks/{nb}.md writes no {key!r}"


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_about_this_page_quotes_what_the_page_glues(entry: bb.NotebookEntry) -> None:
    """Each page has one "About this page" section, after its first result; every
    ``{glue:md}`ours_<key>``` of its prose is glued by its ``page.quote(res, ...)`` and written by
    its ``out.results``."""
    src = (REPO / entry.source).read_text(encoding="utf-8")
    assert src.count("\n## About this page\n") == 1, f"{entry.name}: no (or two) 'About this page' sections"
    about = src.index("\n## About this page\n")
    first = re.search(r"tables\.(styled|wide_beside|long_beside|captioned)\(|dep\.display\(|Markdown\(tables\.", src)
    assert first and first.start() < about, f"{entry.name}: 'About this page' comes before the first result"
    quoted = re.findall(r"\{glue:md\}`ours_(\w+)`", src)
    glued = {k for call in re.findall(r"page\.quote\(res, ([^)]*)\)", src) for k in re.findall(r'"(\w+)"', call)}
    assert set(quoted) <= glued, f"{entry.name}: quoted but not glued: {sorted(set(quoted) - glued)}"
    for key in glued:
        assert _results_writes(entry.name, key), f"{entry.name}: page.quote({key!r}) but out.results writes no {key!r}"
