"""Launch targets that really open: binder/ installs in a clean environment from its own files,
and every Binder / Colab launch URL of the book is built from the one repository setting
(``repository:`` in _config.yml) and names a file that is in the repository. A small Jupyter
Book build shows the header buttons carry exactly those URLs, the repository button this
project's repository, and the download button the executed notebook."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

import nbformat
import pytest
import yaml

from probeguard_core.book import sphinx_ext
from probeguard_core.book import twins as tw

REPO = Path(__file__).resolve().parent.parent
BINDER = REPO / "binder"
#: pip's words when it could not reach a package index at all (as opposed to a resolution conflict)
NETWORK_ERRORS = ("NewConnectionError", "Network is unreachable", "Temporary failure in name resolution",
                  "Name or service not known", "Connection refused", "Max retries exceeded")


def _tracked_files() -> set[str] | None:
    """The files git tracks in this checkout, or ``None`` outside a git checkout (an sdist)."""
    if not (REPO / ".git").exists() or shutil.which("git") is None:
        return None
    # safe.directory: CI checks out as another user than the container's root
    proc = subprocess.run(["git", "-c", f"safe.directory={REPO}", "ls-files", "-z"], cwd=REPO,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"git ls-files failed: {proc.stderr}"
    return set(proc.stdout.split("\0")) - {""}


def _in_repository(path: str, tracked: set[str] | None) -> bool:
    """``path`` is a file of the repository (tracked by git where this is a git checkout)."""
    return (REPO / path).is_file() and (tracked is None or path in tracked)


# --------------------------------------------------------------------------- binder/
def test_binder_runtime_is_the_python_the_package_requires() -> None:
    runtime = (BINDER / "runtime.txt").read_text(encoding="utf-8").strip()
    m = re.fullmatch(r"python-(3\.\d+)", runtime)
    assert m, f"binder/runtime.txt: {runtime!r} is not python-3.X"
    requires = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert requires == ">=3.11" and m.group(1) == "3.11"


def test_binder_requirements_are_the_book_extra_pinned_by_the_lock() -> None:
    lines = [ln.strip() for ln in (BINDER / "requirements.txt").read_text(encoding="utf-8").splitlines()
             if ln.strip() and not ln.lstrip().startswith("#")]
    assert "-c ../requirements/lock.txt" in lines
    assert (BINDER / "../requirements/lock.txt").resolve() == REPO / "requirements" / "lock.txt"
    assert "-e .[book]" in lines


@pytest.mark.slow
def test_binder_requirements_resolve_in_a_clean_environment(tmp_path: Path) -> None:
    """``pip install --dry-run -r binder/requirements.txt`` into a new, empty virtual environment,
    from the repository root (where repo2docker runs it), against this machine's package sources."""
    venv = tmp_path / "clean"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    report = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--dry-run",
           "--ignore-installed", "--quiet", "--retries", "1", "--timeout", "30", "--report", str(report),
           "-r", "binder/requirements.txt"]
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env, timeout=900, check=False)
    out = proc.stdout + proc.stderr
    if proc.returncode != 0 and any(marker in out for marker in NETWORK_ERRORS):
        pytest.skip("no package index is reachable from here, so binder/requirements.txt cannot be resolved "
                    "(pip: " + next(m for m in NETWORK_ERRORS if m in out) + ")")
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{out[-4000:]}"
    resolved = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
                for i in json.loads(report.read_text(encoding="utf-8"))["install"]}
    locked = {}
    for line in (REPO / "requirements" / "lock.txt").read_text(encoding="utf-8").splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            locked[name.lower().replace("_", "-")] = version
    assert "probeguard-core" in resolved and "jupyter-book" in resolved and "papermill" in resolved
    assert resolved["jupyter-book"].startswith("1."), "Jupyter Book 1.x (jupyter-book<2)"
    unpinned = sorted(n for n in resolved if n not in locked and n not in ("probeguard-core", "pip", "setuptools", "wheel"))
    assert not unpinned, f"binder/ installs packages the lock does not pin: {unpinned}"
    drift = {n: (v, locked[n]) for n, v in resolved.items() if n in locked and v != locked[n]}
    assert not drift, f"binder/ resolves other versions than the lock: {drift}"
    assert "torch" not in resolved and "vllm" not in resolved, "the book extra needs neither torch nor vLLM"


# --------------------------------------------------------------------------- launch URLs
def test_the_repository_setting_is_this_project_not_the_papers() -> None:
    repo = sphinx_ext.repository(REPO)
    paper_code = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]["Paper-code"]
    assert repo.url != paper_code.rstrip("/"), "the book's buttons must point at this project, not the paper's code"
    assert repo.url == f"https://github.com/{repo.owner}/{repo.name}" and repo.branch == "main"
    # the notebook twins' install cell clones that same repository
    first = nbformat.read(REPO / sphinx_ext.launch_path("table1_fig1"), as_version=4).cells[0]
    assert f"git clone --depth 1 {repo.url}\n" in first.source


def test_every_launch_url_opens_a_file_of_this_repository() -> None:
    repo = sphinx_ext.repository(REPO)
    urls = sphinx_ext.all_launch_urls(REPO)
    tracked = _tracked_files()
    registry = yaml.safe_load((REPO / "notebooks" / "registry.yml").read_text(encoding="utf-8"))
    entries = registry if isinstance(registry, list) else registry["notebooks"]
    assert len(urls) >= 15 and set(urls) == {e["name"] for e in entries}, "every registered notebook is a page"
    for name, buttons in urls.items():
        assert set(buttons) == {"Binder", "Colab"}, name
        binder = urlsplit(buttons["Binder"])
        assert binder.path == f"/v2/gh/{repo.owner}/{repo.name}/{repo.branch}", buttons["Binder"]
        (path,) = parse_qs(binder.query)["labpath"]
        colab = urlsplit(buttons["Colab"]).path
        prefix = f"/github/{repo.owner}/{repo.name}/blob/{repo.branch}/"
        assert colab.startswith(prefix), buttons["Colab"]
        for target in (unquote(path), unquote(colab[len(prefix):])):
            assert target == f"{tw.TWINS.as_posix()}/{name}.ipynb"
            assert _in_repository(target, tracked), f"{name}: its launch URL opens {target}, which is not in the repository"


@pytest.mark.parametrize("url", ["https://gitlab.com/a/b", "http://github.com/a/b", "https://github.com/a",
                                 "https://github.com/a/b/tree/main", ""])
def test_a_repository_url_that_cannot_launch_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="repository.url"):
        sphinx_ext.Repository(url=url)


def test_the_cli_prints_what_the_publish_workflow_reads(capsys: pytest.CaptureFixture[str]) -> None:
    repo = sphinx_ext.repository(REPO)
    assert sphinx_ext.main(["--repository-url"]) == 0
    assert capsys.readouterr().out == repo.url + "\n"
    assert sphinx_ext.main(["--pages-url"]) == 0
    assert capsys.readouterr().out == repo.pages_url + "\n"
    assert sphinx_ext.main(["--launch-urls"]) == 0
    rows = [ln.split("\t") for ln in capsys.readouterr().out.splitlines()]
    assert len(rows) == 2 * len(sphinx_ext.all_launch_urls(REPO)) and all(len(r) == 3 for r in rows)


def test_pages_url_of_a_project_and_of_a_user_site() -> None:
    assert sphinx_ext.Repository("https://github.com/Org/book").pages_url == "https://org.github.io/book/"
    assert sphinx_ext.Repository("https://github.com/org/org.github.io").pages_url == "https://org.github.io/"


def test_launch_providers_the_twins_cannot_serve_are_refused() -> None:
    repo = sphinx_ext.Repository("https://github.com/a/b")
    with pytest.raises(ValueError, match="jupyterhub_url"):
        sphinx_ext.launch_urls("x", repo, {"jupyterhub_url": "https://hub.example"})


# --------------------------------------------------------------------------- the header buttons in HTML
class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append({k: v or "" for k, v in attrs})


def _mini_book(root: Path, name: str) -> None:
    """One executed notebook page at book/_generated/<name>, with the real repository and
    launch-button settings and the book's Sphinx extension."""
    real = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    config = {
        "title": "launch buttons",
        "only_build_toc_files": True,
        "execute": {"execute_notebooks": "off"},
        "repository": real["repository"],
        "launch_buttons": real["launch_buttons"],
        "html": {"use_repository_button": True},
        "sphinx": {"extra_extensions": ["probeguard_core.book.sphinx_ext"]},
    }
    (root / "_config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    (root / "_toc.yml").write_text(f"format: jb-book\nroot: intro\nchapters:\n  - file: book/_generated/{name}\n",
                                   encoding="utf-8")
    (root / "intro.md").write_text("# Intro\n", encoding="utf-8")
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    cell = nbformat.v4.new_code_cell("print(6 * 7)", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nb.cells = [nbformat.v4.new_markdown_cell("# An executed notebook"), cell]
    (root / "book" / "_generated").mkdir(parents=True)
    nbformat.write(nb, root / "book" / "_generated" / f"{name}.ipynb")


@pytest.mark.slow
def test_built_header_buttons_launch_the_twin_and_download_the_executed_notebook(tmp_path: Path) -> None:
    name = "table1_fig1"
    _mini_book(tmp_path, name)
    jb = Path(sys.executable).parent / "jupyter-book"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([str(jb), "build", str(tmp_path), "-W", "-q"], cwd=tmp_path, capture_output=True,
                          text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    page = tmp_path / "_build" / "html" / "book" / "_generated" / f"{name}.html"
    parser = _Links()
    parser.feed(page.read_text(encoding="utf-8"))
    by_label = {a.get("title") or a.get("data-bs-original-title", ""): a["href"] for a in parser.links if "href" in a}
    expected = sphinx_ext.launch_urls(name, sphinx_ext.repository(REPO),
                                      yaml.safe_load((REPO / "_config.yml").read_text())["launch_buttons"])
    hrefs = {a["href"] for a in parser.links if "href" in a}
    assert set(expected.values()) <= hrefs, f"launch buttons: expected {expected}, page has {sorted(hrefs)}"
    assert sphinx_ext.repository(REPO).url in hrefs, "the repository button"
    download = [h for label, h in by_label.items() if "executed notebook" in label.lower()]
    assert len(download) == 1, by_label
    served = (page.parent / download[0]).resolve()
    assert served.is_file(), f"the download button links {download[0]}, which the build does not contain"
    executed = nbformat.read(served, as_version=4)
    assert executed.cells[1].outputs[0]["text"] == "42\n", "the download serves the executed notebook"
