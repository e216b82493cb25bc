"""A small Sphinx extension for the book (registered in ``_config.yml``).

* Removes duplicate ``<script>`` entries: sphinx-thebe registers its inline configuration
  (``const THEBE_JS_URL = ...``) once per environment read, and a second copy is a JavaScript
  error (a ``const`` declared twice) on every page.
* Launch and download buttons of the executed notebooks (``book/_generated/<name>.ipynb``,
  built, not committed), all from the book's one repository setting (``repository:`` in
  ``_config.yml``; :func:`repository`):

  - the launch buttons (Binder, Colab) open the committed, unexecuted twin
    ``notebooks/ipynb/<name>.ipynb`` of the source ``notebooks/<name>.md``
    (:mod:`probeguard_core.book.twins`) in that repository (:func:`launch_urls`): Colab cannot
    open a jupytext ``.md``, and the twin's first cell tells the reader how to install the
    repository (Binder installs it from ``binder/requirements.txt``);
  - the download button keeps serving the page's own source, the executed notebook, which
    Sphinx copies to ``_sources/book/_generated/<name>.ipynb`` (only the launch group is
    rewritten).

``python -m probeguard_core.book.sphinx_ext --repository-url`` prints the repository setting,
``--pages-url`` where GitHub Pages serves the book of that repository, ``--launch-urls`` every
notebook's launch URLs (what the publish workflow and the README's Publishing section use).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

GENERATED = "book/_generated/"
#: Where the unexecuted twins live (kept equal to book.twins.TWINS; a test checks it).
TWINS = "notebooks/ipynb"


def _dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    files = context.get("script_files")

    if not files:
        return
    seen: set[tuple[str, str]] = set()
    keep = []
    for js in files:
        key = (str(getattr(js, "filename", js) or ""), str(getattr(js, "attributes", {}).get("body", "")))
        if key in seen:
            continue
        seen.add(key)
        keep.append(js)
    files[:] = keep


def launch_path(name: str) -> str:
    """The repository path the launch buttons of notebook ``name`` open: its ``.ipynb`` twin."""
    return f"{TWINS}/{name}.ipynb"


# --------------------------------------------------------------------------- the repository setting
@dataclass(frozen=True)
class Repository:
    """This project's repository on GitHub: ``repository.url`` / ``repository.branch`` of
    ``_config.yml``, the one place the launch buttons, the repository button, the notebook twins'
    install cell and the publish workflow read it from."""

    url: str
    branch: str = "main"

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        path = [p for p in parts.path.split("/") if p]
        if parts.scheme != "https" or parts.netloc != "github.com" or len(path) != 2 or parts.query:
            raise ValueError(
                f"_config.yml: repository.url: {self.url!r} is not https://github.com/<owner>/<name> "
                "(Binder's gh provider and Colab open GitHub repositories only)"
            )
        if not self.branch or any(c.isspace() for c in self.branch):
            raise ValueError(f"_config.yml: repository.branch: {self.branch!r} is not a branch name")

    @property
    def owner(self) -> str:
        return urlsplit(self.url).path.strip("/").split("/")[0]

    @property
    def name(self) -> str:
        return urlsplit(self.url).path.strip("/").split("/")[1]

    @property
    def pages_url(self) -> str:
        """Where GitHub Pages serves this repository's book (a ``<owner>.github.io`` repository
        is served at the root)."""
        host = f"https://{self.owner.lower()}.github.io"
        return f"{host}/" if self.name.lower() == f"{self.owner.lower()}.github.io" else f"{host}/{self.name}/"


def repository(root: Path | None = None) -> Repository:
    """The book's repository setting, read from ``<root>/_config.yml``."""
    import yaml

    from probeguard_core.book.paths import repo_root

    path = (root or repo_root()) / "_config.yml"
    config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    repo = config.get("repository") or {}
    if not repo.get("url"):
        raise ValueError(f"{path}: repository.url is not set")
    return Repository(url=str(repo["url"]).rstrip("/"), branch=str(repo.get("branch") or "main"))


def launch_urls(name: str, repo: Repository, launch_buttons: Mapping[str, Any]) -> dict[str, str]:
    """The launch buttons of notebook ``name``: button text -> URL, each opening its twin
    :func:`launch_path` on ``repo.branch`` of ``repo`` with the providers configured in
    ``launch_buttons`` (the ``launch_buttons:`` keys of ``_config.yml``)."""
    path = launch_path(name)
    urls: dict[str, str] = {}
    binder = str(launch_buttons.get("binderhub_url") or "").rstrip("/")
    if binder:
        interface = launch_buttons.get("notebook_interface", "classic")
        if interface not in ("classic", "jupyterlab"):
            raise ValueError(f"_config.yml: launch_buttons.notebook_interface: {interface!r} is not classic or jupyterlab")
        query = f"labpath={quote(path)}" if interface == "jupyterlab" else f"urlpath={quote('tree/' + path)}"
        urls["Binder"] = f"{binder}/v2/gh/{repo.owner}/{repo.name}/{quote(repo.branch, safe='')}?{query}"
    colab = str(launch_buttons.get("colab_url") or "").rstrip("/")
    if colab:
        urls["Colab"] = f"{colab}/github/{repo.owner}/{repo.name}/blob/{repo.branch}/{path}"
    unsupported = sorted(k for k in ("jupyterhub_url", "deepnote_url", "jupyterlite_url") if launch_buttons.get(k))
    if unsupported:
        raise ValueError(f"_config.yml: launch_buttons: {', '.join(unsupported)} have no twin-aware launch URL here")
    return urls


def _launch_buttons(app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """Point the launch group of an executed notebook's header at its twin; nothing else (the
    download group serves the executed notebook itself)."""
    if not pagename.startswith(GENERATED):
        return
    opts = app.config.html_theme_options
    repo = Repository(url=str(opts.get("repository_url", "")).rstrip("/"),
                      branch=str(opts.get("repository_branch") or "main"))
    urls = launch_urls(pagename[len(GENERATED):], repo, opts.get("launch_buttons") or {})
    for group in context.get("header_buttons") or []:
        if not isinstance(group, dict):
            continue
        if group.get("label") == "launch-buttons":
            for button in group.get("buttons", []):
                if button.get("type") == "link":
                    if button.get("text") not in urls:
                        raise ValueError(f"{pagename}: launch button {button.get('text')!r} has no launch URL")
                    button["url"] = urls[button["text"]]
        elif group.get("label") == "download-buttons":
            for button in group.get("buttons", []):
                if button.get("label") == "download-source-button":
                    button["tooltip"] = "Download the executed notebook"



def _toc_files(node: Any) -> list[str]:
    """Every ``file:`` of a ``_toc.yml``, in order."""
    if isinstance(node, dict):
        own = [str(node["file"])] if "file" in node else []
        return own + [f for key, value in node.items() if key != "file" for f in _toc_files(value)]
    if isinstance(node, list):
        return [f for item in node for f in _toc_files(item)]
    return []


def all_launch_urls(root: Path | None = None) -> dict[str, dict[str, str]]:
    """Launch URLs of every executed notebook in ``_toc.yml`` (``book/_generated/<name>``)."""
    import yaml

    from probeguard_core.book.paths import repo_root

    root = root or repo_root()
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")) or {}
    toc = yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8"))
    names = [f[len(GENERATED):] for f in _toc_files(toc) if f.startswith(GENERATED)]
    if not names:
        raise ValueError(f"{root / '_toc.yml'}: no {GENERATED}<name> page")
    repo = repository(root)
    return {n: launch_urls(n, repo, config.get("launch_buttons") or {}) for n in names}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probeguard_core.book.sphinx_ext",
                                 description="Print the book's repository setting and what is built from it.")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--repository-url", action="store_true", help="repository.url of _config.yml")
    group.add_argument("--pages-url", action="store_true", help="where GitHub Pages serves that repository's book")
    group.add_argument("--launch-urls", action="store_true", help="every notebook's launch URLs, tab-separated")
    args = ap.parse_args(argv)
    try:
        repo = repository()
        if args.repository_url:
            print(repo.url)
        elif args.pages_url:
            print(repo.pages_url)
        else:
            for name, urls in all_launch_urls().items():
                for text, url in urls.items():
                    print(f"{name}\t{text}\t{url}")
    except (OSError, ValueError) as exc:
        print(f"sphinx_ext: error: {exc}", file=sys.stderr)
        return 2
    return 0


def setup(app: Any) -> dict[str, Any]:
    # after sphinx-book-theme (priority 500) has filled the header buttons and scripts
    app.connect("html-page-context", _dedupe_scripts, priority=10_000)
    app.connect("html-page-context", _launch_buttons, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":
    raise SystemExit(main())
