"""A PDF of the whole book, printed from the same pages.

``python -m probeguard_core.book.pdf`` (also the last step of ``python -m
probeguard_core.book.build`` unless ``--no-pdf``):

1. ``jupyter-book build --builder singlehtml`` with the configuration (and table of contents)
   that the HTML build used (``_build/_config.generated.yml``: the release's provenance banner
   substituted), into ``_build/singlehtml``: every page of the book, in the book's order, in one
   HTML file;
2. Debian's Chromium prints it headless, offline (no host resolves), after MathJax has
   typeset the maths, to ``_build/html/probeguard-companion.pdf``, the file the landing page links.

Chromium is looked up as ``$PROBEGUARD_CHROMIUM``, then ``chromium`` / ``chromium-browser`` on
``PATH``; without one the PDF is not built and :class:`PDFError` says so.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from probeguard_core.fileio import write_text_atomic

__all__ = ["PDF_LINK", "PDF_NAME", "PDF_SLOT", "PDFError", "build_pdf", "find_chromium", "link_pdf", "main",
           "print_to_pdf", "singlehtml"]

#: The PDF's name in the HTML build (the landing page links it once it exists: :func:`link_pdf`).
PDF_NAME = "probeguard-companion.pdf"
#: Chromium flags for a headless, offline print: no first-run work, and no host resolves.
CHROMIUM_FLAGS: tuple[str, ...] = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
    "--disable-background-networking", "--disable-component-update", "--no-pdf-header-footer",
    "--host-resolver-rules=MAP * ~NOTFOUND", "--run-all-compositor-stages-before-draw",
)


class PDFError(RuntimeError):
    """The PDF could not be built: names the step and its error."""


def find_chromium() -> str | None:
    """The Chromium executable: ``$PROBEGUARD_CHROMIUM``, else ``chromium`` or ``chromium-browser``."""
    env = os.environ.get("PROBEGUARD_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def singlehtml(root: Path, config: Path | None = None, toc: Path | None = None, quiet: bool = True) -> Path:
    """Build the single-page HTML of the book into ``<root>/_build/singlehtml``; return its ``index.html``."""
    cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(root), "--builder", "singlehtml",
           "--keep-going"]
    if config is not None:
        cmd += ["--config", str(config)]
    if toc is not None:
        cmd += ["--toc", str(toc)]
    if quiet:
        cmd.append("-q")
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    index = root / "_build" / "singlehtml" / "index.html"
    if proc.returncode != 0 or not index.is_file():
        tail = (proc.stdout + proc.stderr)[-4000:]
        raise PDFError(f"single-page build failed (exit {proc.returncode}):\n{tail}")
    return _follow_redirect(index)


def _follow_redirect(index: Path) -> Path:
    """Jupyter Book's ``index.html`` only redirects (``<meta http-equiv="Refresh">``) to the root
    page, which in a single-page build holds the whole book but links its styles, scripts and
    images relative to the build's root: a copy of it at the root (``book.html``) is what prints."""
    m = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', index.read_text(encoding="utf-8"))
    if not m:
        return index
    target = (index.parent / m.group(1)).resolve()
    if not target.is_file():
        raise PDFError(f"{index} redirects to {m.group(1)}, which the single-page build did not write")
    page = index.parent / "book.html"
    page.write_text(target.read_text(encoding="utf-8"), encoding="utf-8")
    return page


def print_to_pdf(page: Path, out: Path, chromium: str | None = None, budget_ms: int = 30_000,
                 timeout_s: int = 300) -> Path:
    """Print ``page`` to ``out`` with headless Chromium (offline); ``budget_ms`` of virtual time
    lets MathJax typeset before the print."""
    chromium = chromium or find_chromium()
    if chromium is None:
        raise PDFError("Chromium not found (apt-get install chromium, or set PROBEGUARD_CHROMIUM); no PDF built")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="probeguard-pdf-") as profile:
        tmp = Path(profile) / out.name
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={budget_ms}",
               f"--print-to-pdf={tmp}", page.resolve().as_uri()]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise PDFError(f"{chromium} did not finish printing {page} within {timeout_s} s") from exc
        if proc.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            raise PDFError(f"{chromium} failed to print {page} (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
        if not tmp.read_bytes()[:5] == b"%PDF-":
            raise PDFError(f"{chromium} wrote {tmp}, which is not a PDF")
        shutil.move(str(tmp), out)  # the finished file only: a failed print never leaves half a PDF
    return out


def build_pdf(root: Path, html_dir: Path | None = None, *, toc: Path | None = None, chromium: str | None = None,
              quiet: bool = True) -> Path:
    """The whole book as ``<html_dir>/probeguard-companion.pdf`` (default ``<root>/_build/html``),
    with the configuration the HTML build wrote (``_build/_config.generated.yml``, else
    ``_config.yml``) and ``toc`` (default ``_toc.yml``: the whole book)."""
    root = Path(root)
    chromium = chromium or find_chromium()
    if chromium is None:
        raise PDFError("Chromium not found (apt-get install chromium, or set PROBEGUARD_CHROMIUM); no PDF built")
    build = root / "_build"
    config = build / "_config.generated.yml"
    page = singlehtml(root, config if config.is_file() else None, toc, quiet=quiet)
    html = Path(html_dir or build / "html")
    out = print_to_pdf(page, html / PDF_NAME, chromium)
    link_pdf(html)
    return out


#: The landing page's empty slot (``book/intro.md``) that :func:`link_pdf` fills once the PDF exists.
PDF_SLOT = '<p class="probeguard-pdf-slot"></p>'
#: What fills it: the link to the PDF, from ``book/intro.html``.
PDF_LINK = ('<p class="probeguard-pdf-slot"><strong>Read it offline as one file:</strong> '
            f'<a class="reference download probeguard-pdf" href="../{PDF_NAME}">the whole book as a PDF</a> '
            '(the same pages, printed from the single-page build).</p>')


def link_pdf(html_dir: Path) -> bool:
    """Put the PDF link on the landing page (``<html_dir>/book/intro.html``) when, and only when,
    ``<html_dir>/probeguard-companion.pdf`` exists: a build without Chromium shows no dead link
    (issue 23, point 2). Returns whether the link is on the page."""
    html_dir = Path(html_dir)
    intro = html_dir / "book" / "intro.html"
    if not intro.is_file() or not (html_dir / PDF_NAME).is_file():
        return False
    text = intro.read_text(encoding="utf-8")
    if PDF_SLOT in text:
        write_text_atomic(intro, text.replace(PDF_SLOT, PDF_LINK, 1))
    return PDF_LINK in text or PDF_SLOT in text


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m probeguard_core.book.pdf", description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=".", help="repository root (default: the current folder)")
    ap.add_argument("--html", default=None, help="HTML build to put the PDF in (default: <root>/_build/html)")
    ap.add_argument("--toc", default=None, help="table of contents (default: _toc.yml, the whole book)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        out = build_pdf(Path(args.root).resolve(), Path(args.html) if args.html else None,
                        toc=Path(args.toc) if args.toc else None)
    except PDFError as exc:
        print(f"book.pdf: error: {exc}", file=sys.stderr)
        return 2
    print(f"pdf: {time.perf_counter() - t0:.1f} s -> {out} ({out.stat().st_size / 1e6:.1f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
