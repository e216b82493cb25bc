"""The book's site features, a Sphinx extension (registered in ``_config.yml``).

* **Downloads.** Every notebook page ``book/_generated/<name>`` gets a "Files of this page"
  box linking the CSV tables, SVG/PNG figures and ``results.json`` its notebook wrote to
  ``book/_generated/<name>/``; after the build those files are copied next to the page
  (``<outdir>/book/_generated/<name>/``), so every link resolves in the HTML build, offline.
* **Icon fonts offline.** Chromium refuses fonts that a ``file://`` page loads from a file (the
  CORS rule for ``file://``), so the theme's Font Awesome ``@font-face`` fonts are inlined into its
  stylesheet as ``data:`` URIs after the build, and the pages' ``<link rel="preload" as="font"
  crossorigin>`` hints (a CORS request, refused from ``file://``) are dropped: the book works
  from a folder or a zip.
* **Departures link.** The provenance banner of every page links the page "This release
  beside the paper" (``book/_generated/departures``) when the build has it.

Nothing here loads anything from outside the build.
"""

from __future__ import annotations

import base64
import html
import re
import shutil
from pathlib import Path
from typing import Any

GENERATED = "book/_generated/"
#: The page that lists where a release departs from the paper (notebooks/departures.md).
DEPARTURES = "book/_generated/departures"
#: Files of a notebook's output folder that are offered for download, in this order.
DOWNLOAD_SUFFIXES: tuple[str, ...] = (".csv", ".svg", ".png", ".json", ".html")
_KIND = {".csv": "table (CSV)", ".svg": "figure (SVG)", ".png": "figure (PNG)", ".json": "headline numbers (JSON)",
         ".html": "interactive chart (HTML)"}


def output_files(srcdir: str | Path, pagename: str) -> list[Path]:
    """The downloadable files a notebook page's notebook wrote, sorted by kind then name."""
    if not pagename.startswith(GENERATED):
        return []
    folder = Path(srcdir) / pagename
    if not folder.is_dir():
        return []
    files = [p for p in folder.iterdir() if p.is_file() and p.suffix in DOWNLOAD_SUFFIXES]
    return sorted(files, key=lambda p: (DOWNLOAD_SUFFIXES.index(p.suffix), p.name))


def downloads_html(pagename: str, files: list[Path]) -> str:
    """The "Files of this page" box: relative links from ``<pagename>.html`` to its folder."""
    stem = pagename.rsplit("/", 1)[-1]
    items = "".join(
        f'<li><a class="reference download" href="{html.escape(stem)}/{html.escape(p.name)}" download>'
        f"<code>{html.escape(p.name)}</code></a> <span class=\"pg-kind\">{_KIND[p.suffix]}</span></li>"
        for p in files
    )
    return (
        '<div class="admonition note probeguard-downloads">'
        '<p class="admonition-title">Files of this page</p>'
        "<p>What the notebook wrote, unrounded (tables in long form):</p>"
        f"<ul>{items}</ul></div>"
    )


def _banner_link(app: Any, pagename: str, body: str) -> str:
    marker = body.find("probeguard-provenance")
    if marker < 0 or pagename == DEPARTURES or DEPARTURES not in app.env.all_docs:
        return body
    end = body.find("</div>", marker)
    if end < 0:
        return body
    href = app.builder.get_relative_uri(pagename, DEPARTURES)
    link = (f'<p class="probeguard-departures-link"><a class="reference internal" href="{href}">'
            "Where this release departs from the paper, and which numbers are the simulator's inputs</a></p>")
    return body[:end] + link + body[end:]


def _page_context(app: Any, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    body = context.get("body")
    if not isinstance(body, str):
        return
    body = _banner_link(app, pagename, body)
    files = output_files(app.srcdir, pagename)
    if files:
        body += downloads_html(pagename, files)
        app.env.probeguard_downloads = getattr(app.env, "probeguard_downloads", set()) | {pagename}
    context["body"] = body


def _copy_downloads(app: Any, exc: Exception | None) -> None:
    if exc is not None or app.builder.format != "html":
        return
    for pagename in sorted(getattr(app.env, "probeguard_downloads", set())):
        dest = Path(app.outdir) / pagename
        dest.mkdir(parents=True, exist_ok=True)
        for p in output_files(app.srcdir, pagename):
            shutil.copy2(p, dest / p.name)


_FONT_URL = re.compile(r"url\((?:\.\./webfonts/)([\w.-]+\.woff2)\)")


def inline_fonts(css: Path) -> int:
    """Replace the ``url(../webfonts/<name>.woff2)`` of a Font Awesome stylesheet by ``data:``
    URIs (the fonts next to it); return how many were inlined. A font file that is missing is
    left as a link (and the browser test reports the failed request)."""
    text = css.read_text(encoding="utf-8")
    fonts = css.parent.parent / "webfonts"
    count = 0

    def data_uri(m: re.Match[str]) -> str:
        nonlocal count
        font = fonts / m.group(1)
        if not font.is_file():
            return m.group(0)
        count += 1
        return f"url(data:font/woff2;base64,{base64.b64encode(font.read_bytes()).decode('ascii')})"

    new = _FONT_URL.sub(data_uri, text)
    if new != text:
        css.write_text(new, encoding="utf-8")
    return count


_FONT_PRELOAD = re.compile(r'[ \t]*<link rel="preload" as="font"[^>]*crossorigin[^>]*>\n?')


def drop_font_preloads(page: Path) -> bool:
    """Remove the font preload hints of one HTML page; True when it had any."""
    text = page.read_text(encoding="utf-8")
    new = _FONT_PRELOAD.sub("", text)
    if new != text:
        page.write_text(new, encoding="utf-8")
    return new != text


def _inline_theme_fonts(app: Any, exc: Exception | None) -> None:
    if exc is not None or app.builder.format != "html":
        return
    for css in sorted((Path(app.outdir) / "_static" / "vendor").glob("fontawesome/*/css/*.css")):
        inline_fonts(css)
    for page in sorted(Path(app.outdir).rglob("*.html")):
        drop_font_preloads(page)


def setup(app: Any) -> dict[str, Any]:
    app.connect("html-page-context", _page_context, priority=950)
    app.connect("build-finished", _copy_downloads)
    app.connect("build-finished", _inline_theme_fonts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
