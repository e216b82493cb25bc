"""A small Sphinx extension for the book (registered in ``_config.yml``).

* Removes duplicate ``<script>`` entries: sphinx-thebe registers its inline configuration
  (``const THEBE_JS_URL = ...``) once per environment read, and a second copy is a JavaScript
  error (a ``const`` declared twice) on every page.
* Points the launch buttons (Colab, Binder) of executed notebooks
  (``book/_generated/<name>.ipynb``, built, not committed) at the committed, unexecuted twin
  ``notebooks/ipynb/<name>.ipynb`` of their source ``notebooks/<name>.md``
  (:mod:`probeguard_core.book.twins`): Colab cannot open a jupytext ``.md``, and the twin's
  first cell tells the reader how to install the repository (Binder installs it from
  ``binder/requirements.txt``).
"""

from __future__ import annotations

from typing import Any

GENERATED = "book/_generated/"
#: Where the unexecuted twins live (kept equal to notebook_twins.TWINS; a test checks it).
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


def _launch_to_source(app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    if not pagename.startswith(GENERATED):
        return
    name = pagename[len(GENERATED):]
    old, new = f"{GENERATED}{name}.ipynb", launch_path(name)
    for group in context.get("header_buttons", []) or []:
        for button in group.get("buttons", []) if isinstance(group, dict) else []:
            if isinstance(button, dict) and "url" in button:
                button["url"] = button["url"].replace("./" + old, new).replace(old, new)


def setup(app: Any) -> dict[str, Any]:
    # after sphinx-book-theme (priority 500) has filled the header buttons and scripts
    app.connect("html-page-context", _dedupe_scripts, priority=10_000)
    app.connect("html-page-context", _launch_to_source, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
