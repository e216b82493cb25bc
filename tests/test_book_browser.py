"""The built book in a real browser: headless Chromium (Debian's ``chromium``) via playwright.

Two sites are checked:

* **a small book** built once per session into a scratch copy of the book sources (the
  certification and discrimination notebooks, the ledger and departures pages, the landing and
  method pages; small
  parameters, a 5 % simulated release), with its PDF; always;
* **a full build**, when ``PROBEGUARD_BOOK_HTML`` names its ``_build/html`` (after
  ``python -m probeguard_core.book.build --release data/simulated-v1``): every page of the book.

Every page is opened at a laptop (1366 x 768) and a phone (390 x 844) width with the network
blocked: a request that leaves ``file://`` fails the test. On every page: every internal link
and download resolves, maths is typeset (no raw ``\\(`` left), no table is wider than its column
(a phone may scroll a table inside its own scroll box), every figure has a caption and alt text
that is not a file name. The menu button opens the navigation drawer on a phone and hides the
sidebar on a laptop; no empty top bar carries a second search box; dark mode keeps the paper
and Δ columns readable (contrast >= 4.5:1).

Pages a-layer is rewriting (tables that fit, figure captions; issue 9 items 3-4) and the header's
``.ipynb`` download button (issue 9 item 8, f-publish) still fail some checks: they are listed in
:data:`KNOWN_FAILING`, the one place the lead edits after merging, and run as strict xfails (a
page that starts to pass fails the run until it is removed there).

Skipped when ``/usr/bin/chromium`` is absent, unless ``PROBEGUARD_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pandas as pd
import pytest
import yaml
from book_fixtures import REPO, book_copy, small_release

from probeguard_core.book import build as bb

pytestmark = [pytest.mark.browser, pytest.mark.slow]
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
NAME = "certification_fig4"
SMALL_BOOK = (NAME, "table2_3_discrimination", "ledger", "departures")
#: The largest Qwen3-8B cell of a 5 % release: enough questions that some alpha certifies.
DATASET = "medmcqa"
WIDTHS = {"laptop": (1366, 768), "phone": (390, 844)}
FULL = os.environ.get("PROBEGUARD_BOOK_HTML")

#: Pages (html paths under the build) that fail a check today, by check. They belong to issue 9
#: items 3-4 (a-layer). After merging a-layer, the lead empties the sets its pages now pass
#: (a listed page that passes fails the run: strict xfail).
KNOWN_FAILING: dict[str, set[str]] = {
    # issue 9 item 3: tables wider than the 821-px article column at 1366 px (none since s3-book:
    # headers and row labels wrap, Appendix J / K headers in words)
    "table_fits:laptop": set(),
    "table_fits:phone": set(),
    # issue 9 item 4: figures without a caption or with a file name as alt text (none since
    # s3-book: every figure goes through tables.captioned)
    "figures_captioned": set(),
    # issue 23 pt 3: a page wider than the phone window (none since s9-style2: book/method.html's
    # bibliography entry with a bare URL now breaks, custom.css div.citation)
    "cut_off:laptop": set(),
    "cut_off:phone": set(),
    # f-publish, issue 9 item 8: the header's .ipynb download points at a twin that is not in the build
    "header_buttons": set(),  # f-publish: the download button serves the executed notebook
}

if not CHROMIUM.exists():
    if os.environ.get("PROBEGUARD_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{CHROMIUM} is missing and PROBEGUARD_REQUIRE_BROWSER=1 (apt-get install chromium)",
                    pytrace=False)
    pytest.skip(f"{CHROMIUM} not found (apt-get install chromium); set PROBEGUARD_REQUIRE_BROWSER=1 to fail instead",
                allow_module_level=True)


def _toc_pages(only: tuple[str, ...] | None = None) -> list[str]:
    """The pages of the book (html paths under the build), from ``_toc.yml``: every page, or those
    of a build of ``only`` these notebooks (the toc the build itself writes, ``_filtered_toc``)."""
    toc = yaml.safe_load((REPO / "_toc.yml").read_text(encoding="utf-8"))
    if only is not None:
        toc = bb._filtered_toc(toc, set(only))
    files = [toc["root"], *bb._toc_files(toc)]
    return [f.removesuffix(".md").removesuffix(".ipynb") + ".html" for f in files]


#: The pages each site has: the small book's are those its filtered toc keeps (no check is generated
#: for a page the small build does not contain); a full build has every page of ``_toc.yml``.
SITE_PAGES: dict[str, list[str]] = {"small": _toc_pages(SMALL_BOOK), **({"full": _toc_pages()} if FULL else {})}


# --------------------------------------------------------------------------- builds
@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The small book (and its PDF), built into a scratch copy of the sources."""
    from probeguard_core.book import pdf

    release = small_release(tmp_path_factory.getbasetemp())
    root = book_copy(tmp_path_factory.mktemp("book"))
    old = os.environ.get("PROBEGUARD_REPO_ROOT")
    os.environ["PROBEGUARD_REPO_ROOT"] = str(root)
    bb._root_from.cache_clear()
    try:
        results = bb.run_notebooks(release, jobs=1, only=list(SMALL_BOOK[:3]), params={"n_splits": 3},
                                   root=root, per_notebook={NAME: {"dataset": DATASET}})
        # the departures page reads what the other notebooks wrote, so it runs after them
        results += bb.run_notebooks(release, jobs=1, only=[SMALL_BOOK[3]], root=root)
        for res in results:
            assert res.ok, f"{res.name} failed: {res.error}"
        html = bb.build_book(release, root=root, only=list(SMALL_BOOK))
        pdf.build_pdf(root, html, toc=root / "_build" / "_toc.generated.yml")
    finally:
        if old is None:
            os.environ.pop("PROBEGUARD_REPO_ROOT", None)
        else:
            os.environ["PROBEGUARD_REPO_ROOT"] = old
        bb._root_from.cache_clear()
    return {"html": html, "outputs": root / "book" / "_generated" / NAME, "root": root}


def _sites(built: dict[str, Path]) -> dict[str, Path]:
    sites = {"small": built["html"]}
    if FULL:
        sites["full"] = Path(FULL).resolve()
    return sites


@pytest.fixture(scope="module")
def browser() -> Any:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def _open(browser: Any, path: Path, width: tuple[int, int] = WIDTHS["laptop"],
          dark: bool = False) -> tuple[Any, dict[str, list[str]]]:
    context = browser.new_context(viewport={"width": width[0], "height": width[1]})
    if dark:  # the theme reads its mode from localStorage before the first paint
        context.add_init_script("localStorage.setItem('mode', 'dark'); localStorage.setItem('theme', 'dark');")
    page = context.new_page()
    log: dict[str, list[str]] = {"console_errors": [], "page_errors": [], "remote": [], "failed": []}
    page.on("console", lambda m: m.type == "error" and log["console_errors"].append(m.text))
    page.on("pageerror", lambda e: log["page_errors"].append(str(e)))
    page.on("requestfailed", lambda r: log["failed"].append(r.url))

    def route(r: Any) -> None:  # offline: no request may leave file://
        if not r.request.url.startswith(("file://", "data:", "blob:", "about:")):
            log["remote"].append(r.request.url)
            r.abort()
        else:
            r.continue_()

    context.route("**/*", route)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    # maths: wait until MathJax (when the page loads it) has typeset everything
    page.wait_for_function("!window.MathJax || (window.MathJax.startup && window.MathJax.startup.promise"
                           " && (window.__pgTypeset = window.__pgTypeset || window.MathJax.startup.promise"
                           ".then(() => { window.__pgDone = true; })) && window.__pgDone === true)",
                           timeout=30_000)
    return page, log


def _assert_clean(log: dict[str, list[str]]) -> None:
    assert not log["remote"], f"page requests resources outside file://: {log['remote']}"
    assert not log["page_errors"], log["page_errors"]
    assert not log["failed"], f"local requests failed: {log['failed']}"
    assert not log["console_errors"], log["console_errors"]


# --------------------------------------------------------------------------- one visit per page and width
_PROBE = r"""() => {
  const art = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const colW = art.getBoundingClientRect().width;
  const links = [...document.querySelectorAll('a[href]')].map(a => ({href: a.getAttribute('href'),
      button: !!a.closest('.article-header-buttons, .header-article-items__end, .dropdown-download-buttons')}));
  const scrollBox = el => { for (let p = el.parentElement; p && p !== art; p = p.parentElement) {
      const ox = getComputedStyle(p).overflowX; if ((ox === 'auto' || ox === 'scroll') && p.getBoundingClientRect().width <= colW + 1) return true; }
      return false; };
  const tables = [...art.querySelectorAll('table')].filter(t => t.offsetParent !== null).map(t => ({
      width: Math.round(t.getBoundingClientRect().width), col: Math.round(colW), scrolls: scrollBox(t),
      head: (t.querySelector('caption') || t.querySelector('th') || t).innerText.slice(0, 60)}));
  const figures = [...art.querySelectorAll('img')].filter(i => !i.closest('.headerbtn, .navbar-brand, .sidebar-primary-items__start, .probeguard-downloads')).map(i => {
      const fig = i.closest('figure');
      const cap = fig ? fig.querySelector('figcaption') : null;
      const raster = !/^data:image\/svg|\.svg(\?|#|$)/.test(i.getAttribute('src') || '');
      return {src: (i.getAttribute('src') || '').slice(-80), alt: i.getAttribute('alt') || '',
              caption: cap ? cap.innerText.trim() : '', raster: raster, natural: i.naturalWidth,
              shown: Math.round(i.getBoundingClientRect().width)}; });
  // cut off: a table or pre block whose content runs past what is shown, with no scroll cue (the
  // edge shadows of custom.css: a gradient background on the box that scrolls)
  const cue = b => /gradient/.test(getComputedStyle(b).backgroundImage) && /auto|scroll/.test(getComputedStyle(b).overflowX);
  const artRight = art.getBoundingClientRect().right;
  const cut = [...art.querySelectorAll('table, pre')].filter(e => e.offsetParent !== null && !e.parentElement.closest('table, pre')).map(e => {
      let box = null;
      for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
        if (getComputedStyle(p).overflowX !== 'visible') { box = p; break; } }
      const self = e.scrollWidth > e.clientWidth + 1 && !cue(e);
      const inBox = box && box.scrollWidth > box.clientWidth + 1 && !cue(box);
      const past = !box && e.getBoundingClientRect().right > artRight + 1;
      return (self || inBox || past) ? {tag: e.tagName, width: e.scrollWidth, shown: box ? box.clientWidth : e.clientWidth,
                                        head: (e.innerText || '').slice(0, 60)} : null; }).filter(x => x);
  const text = art.innerText;
  return {links, tables, figures, cut, pageWidth: document.documentElement.scrollWidth,
          viewport: document.documentElement.clientWidth, rawMath: /\\\(|\\\[|\$\$/.test(text),
          mathNodes: art.querySelectorAll('.math').length, typeset: art.querySelectorAll('mjx-container').length};
}"""


@pytest.fixture(scope="module")
def visits(built: dict[str, Path], browser: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every page of every site at both widths, opened once: what the checks read."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for site, html in _sites(built).items():
        for rel in SITE_PAGES[site]:
            path = html / rel
            if not path.is_file():
                continue  # _info fails the checks of a page the build should have
            for wname, wh in WIDTHS.items():
                page, log = _open(browser, path, wh)
                info = page.evaluate(_PROBE)
                info["log"] = log
                page.context.close()
                out[(site, rel, wname)] = info
    return out


def _page_params() -> list[Any]:
    return [pytest.param(site, rel, w, id=f"{site}:{rel.removeprefix('book/').removesuffix('.html')}:{w}")
            for site, pages in SITE_PAGES.items() for rel in pages for w in WIDTHS]


def _info(visits: dict[tuple[str, str, str], dict[str, Any]], site: str, rel: str, width: str) -> dict[str, Any]:
    key = (site, rel, width)
    if key not in visits:
        pytest.fail(f"{rel} is in the {site} build's table of contents but not in the build", pytrace=False)
    return visits[key]


def _known(request: pytest.FixtureRequest, check: str, rel: str) -> None:
    """Mark a page listed in :data:`KNOWN_FAILING` as a strict xfail: the check still runs."""
    if rel in KNOWN_FAILING[check]:
        request.applymarker(pytest.mark.xfail(
            strict=True, reason=f"{rel}: known to fail {check!r} until a-layer's issue 9 items 3-4 land (KNOWN_FAILING)"))


def _resolve_link(html: Path, rel: str, href: str) -> Path | None:
    """The local file an ``href`` of page ``rel`` points at, or None for an outside / in-page link."""
    parts = urlsplit(href)
    if parts.scheme in ("http", "https", "mailto", "javascript", "data") or parts.netloc:
        return None
    if not parts.path:
        return None  # an in-page anchor
    return (html / rel).parent.joinpath(unquote(parts.path)).resolve()


# --------------------------------------------------------------------------- per-page checks
@pytest.mark.parametrize(("site", "rel", "width"), _page_params())
def test_page_is_offline_and_clean(visits: Any, site: str, rel: str, width: str) -> None:
    _assert_clean(_info(visits, site, rel, width)["log"])


@pytest.mark.parametrize(("site", "rel", "width"), _page_params())
def test_links_and_downloads_resolve(built: dict[str, Path], visits: Any, site: str, rel: str, width: str) -> None:
    info = _info(visits, site, rel, width)
    html = _sites(built)[site]
    bad = [a["href"] for a in info["links"] if not a["button"] and _missing(html, rel, a["href"])]
    assert not bad, f"{rel}: links to files missing from the build: {bad}"


@pytest.mark.parametrize(("site", "rel", "width"), [p for p in _page_params() if p.values[2] == "laptop"])
def test_header_buttons_resolve(request: pytest.FixtureRequest, built: dict[str, Path], visits: Any, site: str,
                                rel: str, width: str) -> None:
    """The article header's buttons (the .ipynb / .md downloads): issue 9 item 8, f-publish."""
    info = _info(visits, site, rel, width)
    _known(request, "header_buttons", rel)
    html = _sites(built)[site]
    bad = [a["href"] for a in info["links"] if a["button"] and _missing(html, rel, a["href"])]
    assert not bad, f"{rel}: header buttons link files missing from the build: {bad}"


def _missing(html: Path, rel: str, href: str) -> bool:
    target = _resolve_link(html, rel, href)
    return target is not None and not target.exists()


@pytest.mark.parametrize(("site", "rel", "width"), _page_params())
def test_maths_is_typeset(visits: Any, site: str, rel: str, width: str) -> None:
    info = _info(visits, site, rel, width)
    assert not info["rawMath"], f"{rel}: raw TeX delimiters left in the text (maths not typeset offline)"
    if info["mathNodes"]:
        assert info["typeset"] > 0, f"{rel}: {info['mathNodes']} maths nodes and nothing typeset by MathJax"


@pytest.mark.parametrize(("site", "rel", "width"), _page_params())
def test_tables_fit_their_column(request: pytest.FixtureRequest, visits: Any, site: str, rel: str, width: str) -> None:
    info = _info(visits, site, rel, width)
    _known(request, f"table_fits:{width}", rel)
    if width == "laptop":
        wide = [t for t in info["tables"] if t["width"] > t["col"] + 1]
    else:  # a phone may scroll a table sideways, inside its own scroll box that fits the column
        wide = [t for t in info["tables"] if t["width"] > t["col"] + 1 and not t["scrolls"]]
    assert not wide, f"{rel} at {width}: tables wider than the {info['tables'][0]['col'] if info['tables'] else '?'}-px column: {wide}"


@pytest.mark.parametrize(("site", "rel", "width"), [p for p in _page_params() if p.values[2] == "laptop"])
def test_figures_have_captions_and_alt_text(request: pytest.FixtureRequest, visits: Any, site: str, rel: str,
                                           width: str) -> None:
    info = _info(visits, site, rel, width)
    _known(request, "figures_captioned", rel)
    bad = [f for f in info["figures"]
           if not f["caption"] or not f["alt"].strip() or re.search(r"\.(png|svg|jpe?g)\b|^[\w./-]+$", f["alt"].strip())]
    assert not bad, f"{rel}: figures without a caption or with a file name as alt text: {bad}"


@pytest.mark.parametrize(("site", "rel", "width"), _page_params())
def test_nothing_is_cut_off(request: pytest.FixtureRequest, visits: Any, site: str, rel: str, width: str) -> None:
    """Issue 23 pt 3: no page is wider than the window (390 px on a phone), and no table or code /
    prompt block runs past what is shown unless its box scrolls with a visible cue."""
    info = _info(visits, site, rel, width)
    _known(request, f"cut_off:{width}", rel)
    assert info["pageWidth"] <= info["viewport"], (
        f"{rel} at {width}: the page is {info['pageWidth']} px wide in a {info['viewport']}-px window")
    assert not info["cut"], f"{rel} at {width}: tables / pre blocks cut off without a scroll cue: {info['cut']}"


@pytest.mark.parametrize(("site", "rel", "width"), _page_params())
def test_raster_figures_are_sharp_on_hidpi(visits: Any, site: str, rel: str, width: str) -> None:
    """A PNG / JPEG figure has at least 2 image pixels per CSS pixel it is shown at (issue 23 pt 4)."""
    info = _info(visits, site, rel, width)
    soft = [{k: f[k] for k in ("src", "natural", "shown")} for f in info["figures"]
            if f["raster"] and f["shown"] > 0 and f["natural"] < 2 * f["shown"]]
    assert not soft, f"{rel} at {width}: raster figures under 2x their CSS width (soft on a HiDPI screen): {soft}"


# --------------------------------------------------------------------------- navigation
def _sidebar_box(page: Any) -> dict[str, float]:
    return page.evaluate("""() => { const s = document.querySelector('#pst-primary-sidebar, .bd-sidebar-primary');
        const r = s.getBoundingClientRect(); const cs = getComputedStyle(s);
        const shown = cs.display !== 'none' && cs.visibility !== 'hidden' && r.width > 100 && r.right > 100 && r.left < innerWidth - 100;
        return {left: r.left, width: r.width, shown: shown}; }""")


def _click_menu(page: Any) -> None:
    buttons = page.locator(".primary-toggle:visible")
    assert buttons.count() >= 1, "no visible menu (primary sidebar toggle) button"
    buttons.first.click()
    page.wait_for_timeout(600)  # the drawer / collapse transition


#: The first table or figure of a page's article (a table, an image, an SVG chart, a Vega chart), its
#: top from the top of the page in CSS px; the banner, the verdict lines, the parameters and the
#: theme's icons are not results.
_FIRST_RESULT = r"""() => {
  const art = document.querySelector('article.bd-article') || document.querySelector('main');
  const skip = '.probeguard-provenance, .probeguard-verdicts, .probeguard-parameters, button, .headerbtn, .probeguard-downloads';
  const tops = [...art.querySelectorAll('table, img, svg, .vega-embed')]
    .filter(e => !e.closest(skip)).map(e => [e, e.getBoundingClientRect()])
    .filter(([e, r]) => r.width >= 60 && r.height >= 30)
    .map(([e, r]) => ({tag: e.tagName.toLowerCase(), top: Math.round(r.top + window.scrollY)}));
  tops.sort((a, b) => a.top - b.top);
  return tops[0] || null;
}"""
#: The sidebar's entries that are prose, not results: the landing page and the method page.
PROSE_PAGES = {"book/intro.html", "book/method.html"}


def _sidebar_entries(html: Path, browser: Any) -> list[str]:
    """The pages the sidebar of ``html``'s landing page lists (html paths under the build)."""
    page, _ = _open(browser, html / "book/intro.html", WIDTHS["laptop"])
    hrefs = page.locator(".bd-sidebar-primary a.reference.internal").evaluate_all(
        "els => els.map(e => e.getAttribute('href'))")
    page.context.close()
    out = []
    for h in hrefs:
        target = _resolve_link(html, "book/intro.html", h)
        if target is not None:
            rel = target.relative_to(html.resolve()).as_posix()
            if rel not in out:
                out.append(rel)
    return out


@pytest.mark.parametrize("site", ["small", *(["full"] if FULL else [])])
def test_nav_entry_opens_on_its_result(built: dict[str, Path], browser: Any, site: str) -> None:
    """Issue 23 pt 1: every navigation entry but the landing and method pages opens on its result: at
    1366 x 768 a table or figure starts within the first screen (768 px from the page's top), under
    the banner, not behind a chevron or a page of prose."""
    html = _sites(built)[site]
    entries = _sidebar_entries(html, browser)
    results = [e for e in entries if e not in PROSE_PAGES]
    assert all(e.startswith("book/_generated/") for e in results), (
        f"sidebar entries that are neither a notebook page nor the landing / method page: "
        f"{[e for e in results if not e.startswith('book/_generated/')]}")
    want = {p for p in SITE_PAGES[site] if p.startswith("book/_generated/")}
    assert set(results) == want, f"the sidebar lists {sorted(results)}, the toc {sorted(want)}"
    late = {}
    for rel in results:
        page, log = _open(browser, html / rel, WIDTHS["laptop"])
        first = page.evaluate(_FIRST_RESULT)
        page.context.close()
        if first is None or first["top"] > WIDTHS["laptop"][1]:
            late[rel] = first
    assert not late, f"pages whose first table or figure is not on the first 768-px screen: {late}"


@pytest.mark.parametrize("rel", ["book/intro.html", f"book/_generated/{NAME}.html"])
def test_menu_opens_the_drawer_on_a_phone(built: dict[str, Path], browser: Any, rel: str) -> None:
    page, log = _open(browser, built["html"] / rel, WIDTHS["phone"])
    assert not _sidebar_box(page)["shown"], "the sidebar covers the page before the menu is opened"
    _click_menu(page)
    box = _sidebar_box(page)
    assert box["shown"], f"the menu button did not open the navigation drawer: {box}"
    links = page.locator("#pst-primary-sidebar a.reference.internal:visible, .bd-sidebar-primary nav a:visible")
    assert links.count() >= 3, "the drawer opened without the book's navigation links"
    _assert_clean(log)
    page.context.close()


@pytest.mark.parametrize("rel", ["book/intro.html", f"book/_generated/{NAME}.html"])
def test_menu_hides_the_sidebar_on_a_laptop(built: dict[str, Path], browser: Any, rel: str) -> None:
    page, log = _open(browser, built["html"] / rel, WIDTHS["laptop"])
    assert _sidebar_box(page)["shown"], "the sidebar is not shown on a laptop"
    _click_menu(page)
    assert not _sidebar_box(page)["shown"], "the menu button did not hide the sidebar on a laptop"
    _click_menu(page)
    assert _sidebar_box(page)["shown"], "a second click did not bring the sidebar back"
    _assert_clean(log)
    page.context.close()


@pytest.mark.parametrize("width", list(WIDTHS))
def test_no_empty_top_bar_with_a_second_search_box(built: dict[str, Path], browser: Any, width: str) -> None:
    page, _ = _open(browser, built["html"] / "book/intro.html", WIDTHS[width])
    bar = page.evaluate("""() => { const h = document.querySelector('header.bd-header, .bd-header');
        if (!h) return 0; const r = h.getBoundingClientRect();
        return getComputedStyle(h).display === 'none' ? 0 : r.height; }""")
    assert bar < 8, f"a {bar:.0f}-px top bar sits above the layout"
    searches = page.locator("input[type=search]:visible, .search-button:visible, form.bd-search:visible").count()
    assert searches <= 1, f"{searches} search boxes are visible"
    page.context.close()


# --------------------------------------------------------------------------- dark mode, maths, apparatus
def _contrast(fg: str, bg: str) -> float:
    def lum(css: str) -> float:
        r, g, b = (int(v) / 255 for v in re.findall(r"[\d.]+", css)[:3])
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    hi, lo = sorted((lum(fg), lum(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_paper_and_delta_columns_are_readable(built: dict[str, Path], browser: Any, mode: str) -> None:
    page, _ = _open(browser, built["html"] / f"book/_generated/{NAME}.html", WIDTHS["laptop"], dark=mode == "dark")
    assert page.evaluate("document.documentElement.dataset.theme") == mode
    pairs = page.evaluate("""() => [...document.querySelectorAll('td.pg-paper, td.pg-diff')].slice(0, 40).map(td => {
        let el = td, bg = 'rgba(0, 0, 0, 0)';
        while (el) { const c = getComputedStyle(el).backgroundColor; if (!/rgba\\(.*, 0\\)$/.test(c) && c !== 'transparent') { bg = c; break; } el = el.parentElement; }
        return [getComputedStyle(td).color, bg]; })""")
    assert pairs, "no paper / Δ cells on the certification page"
    worst = min(_contrast(fg, bg) for fg, bg in pairs)
    assert worst >= 4.5, f"{mode} mode: the paper / Δ columns have a contrast of {worst:.2f}:1 (< 4.5:1)"
    page.context.close()


def test_method_equations_carry_the_papers_numbers(built: dict[str, Path], browser: Any) -> None:
    page, log = _open(browser, built["html"] / "book/method.html")
    numbers = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('div.math[id], .math-wrapper[id], [id^=equation-]')]
        .map(e => [e.id, (e.querySelector('.eqno') || e).innerText.match(/\\((\\d+)\\)/)?.[1] || '']))""")
    want = {"eq-decision": "1", "eq-first-round": "2", "eq-rse": "3", "eq-keep-rate": "4", "eq-guarantee": "5",
            "eq-binomial": "6", "eq-trajectory": "7", "eq-flips": "8", "eq-minority": "9", "eq-doc-repeat": "10",
            "eq-entropy": "11"}
    got = {k.removeprefix("equation-"): v for k, v in numbers.items()}
    assert {k: got.get(k) for k in want} == want
    refs = page.locator("a[href^='#equation-']")
    assert refs.count() >= 4, "the prose cross-references too few equations"
    assert "(7)" in page.locator("a[href='#equation-eq-trajectory']").first.inner_text()
    cites = page.locator("a[href*='id'][class*='reference']").filter(has_text=re.compile(r"Angelopoulos|Kuhn|Wu"))
    assert cites.count() >= 3, "the method page cites too few references"
    entries = page.locator("div.citation, dl.citation > dt, .bibliography dt")
    assert entries.count() >= 10, "the bibliography lists too few entries"
    assert "??" not in page.locator("article").inner_text()
    _assert_clean(log)
    page.context.close()


def test_landing_page_has_cite_box_and_pdf(built: dict[str, Path], browser: Any) -> None:
    page, log = _open(browser, built["html"] / "book/intro.html")
    cite = page.locator(".probeguard-cite")
    assert cite.count() == 1 and "@misc{wang2026unanimously" in cite.inner_text()
    href = page.locator("a.probeguard-pdf").get_attribute("href")
    pdf = _resolve_link(built["html"], "book/intro.html", href)
    assert pdf is not None and pdf.is_file() and pdf.read_bytes()[:5] == b"%PDF-"
    assert pdf.stat().st_size > 50_000, "the PDF is too small to hold the book"
    _assert_clean(log)
    page.context.close()


def test_banner_links_the_departures_page(built: dict[str, Path], browser: Any) -> None:
    for rel in ("book/intro.html", f"book/_generated/{NAME}.html"):
        page, _ = _open(browser, built["html"] / rel)
        link = page.locator(".probeguard-provenance a").filter(has_text="departs from the paper")
        assert link.count() >= 1, f"{rel}: the banner does not link the departures page"
        target = _resolve_link(built["html"], rel, link.first.get_attribute("href"))
        assert target is not None and target.name == "departures.html" and target.is_file()
        page.context.close()


def test_downloads_box_links_every_output(built: dict[str, Path], browser: Any) -> None:
    page, _ = _open(browser, built["html"] / f"book/_generated/{NAME}.html")
    hrefs = page.locator(".probeguard-downloads a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    names = {h.split("/")[-1] for h in hrefs}
    for want in ("alpha_sweep.csv", "figure4.svg", "results.json", "pooled.csv"):
        assert want in names, f"the downloads box lacks {want}: {sorted(names)}"
    for h in hrefs:
        target = _resolve_link(built["html"], f"book/_generated/{NAME}.html", h)
        assert target is not None and target.is_file(), h
    assert json.loads((built["html"] / "book/_generated" / NAME / "results.json").read_text())
    page.context.close()


def _departures_rows(html: Path) -> pd.DataFrame:
    return pd.read_csv(html / "book/_generated/departures/departures.csv")


def test_departures_page_lists_the_key_departures(built: dict[str, Path], browser: Any) -> None:
    """The small book's departures page: sorted by departure, roles and caveats shown."""
    page, log = _open(browser, built["html"] / "book/_generated/departures.html")
    text = page.locator("article").inner_text()
    for phrase in ("This release beside the paper", "input of the simulator", "emerged", "cannot"):
        assert phrase in text, f"the departures page lacks {phrase!r}"
    rows = _departures_rows(built["html"])
    assert list(rows["departure"]) == sorted(rows["departure"], reverse=True), "rows are not sorted by departure"
    assert set(rows["role"]) <= {"input", "emerged"} and "emerged" in set(rows["role"])
    key = rows[(rows.quantity == "auroc") & (rows.signal == "sequence_logprob") & (rows.dataset == "medqa")]
    assert len(key) >= 1 and math.isclose(float(key.paper.iloc[0]), 0.400)
    pooled = rows[(rows.dataset == "pooled") & (rows.quantity == "certified_coverage")]
    assert len(pooled) >= 1 and (pooled.paper == 0).all()
    _assert_clean(log)
    page.close()


@pytest.mark.skipif(not FULL, reason="needs a full build: set PROBEGUARD_BOOK_HTML=_build/html")
def test_full_departures_page_lists_the_issue_numbers(browser: Any) -> None:
    """On the shipped release: 0.738 vs 0.400 (sequence log-prob), 81 % vs nothing (pooled
    domains), 0.848 vs 0.696 (process score), each on the page as ours | paper | Δ."""
    html = Path(FULL).resolve()
    rows = _departures_rows(html)

    def one(**k: Any) -> pd.Series:
        m = pd.Series(True, index=rows.index)
        for c, v in k.items():
            m &= rows[c] == v
        assert m.any(), f"no departures row {k}"
        return rows[m].iloc[0]

    seq = one(quantity="auroc", signal="sequence_logprob", dataset="medqa", source="Table 2")
    assert (round(seq.value, 3), seq.paper) == (0.738, 0.4)
    proc = one(quantity="auroc", signal="process_score", dataset="medqa", source="Table 2")
    # the issue quotes 0.848 (truncated); the release's value is 0.84887, shown as 0.849
    assert abs(proc.value - 0.848) < 0.0015 and proc.paper == 0.696
    pooled = rows[(rows.dataset == "pooled") & (rows.quantity == "certified_coverage")]
    assert pooled.value.max() >= 0.5 and (pooled.paper == 0).all()
    page, log = _open(browser, html / "book/_generated/departures.html")
    text = page.locator("article").inner_text()
    for token in (f"{seq.value:.3f}", "0.400", f"{proc.value:.3f}", "0.696"):
        assert token in text, token
    _assert_clean(log)
    page.context.close()


# --------------------------------------------------------------------------- the alpha slider (issue 6)
def _readout(page: Any) -> dict[tuple[str, str], str]:
    cells = page.locator("#probeguard-alpha-explorer td[data-series]")
    return {(cells.nth(i).get_attribute("data-series"), cells.nth(i).get_attribute("data-metric")):
            cells.nth(i).get_attribute("data-value") for i in range(cells.count())}


def _expected(pre: pd.DataFrame, alpha: float) -> dict[tuple[str, str], float]:
    rows = pre[(pre.alpha - alpha).abs() < 1e-9]
    out = {}
    for r in rows.itertuples():
        out[(r.series, "coverage")] = r.coverage_mean
        out[(r.series, "risk")] = r.risk_mean
        out[(r.series, "n_certified")] = float(r.n_certified)
    return out


def _same(shown: dict[tuple[str, str], str], want: dict[tuple[str, str], float]) -> None:
    assert set(shown) == set(want)
    for k, v in want.items():
        if isinstance(v, float) and math.isnan(v):
            assert shown[k] == "", (k, shown[k])
        else:
            assert math.isclose(float(shown[k]), v, rel_tol=1e-5, abs_tol=1e-9), (k, shown[k], v)


def test_slider_moves_readout_to_precomputed_values(built: dict[str, Path], browser: Any) -> None:
    pre = pd.read_csv(built["outputs"] / "alpha_explorer.csv")
    page, log = _open(browser, built["html"] / "book" / "_generated" / f"{NAME}.html")
    root = page.locator("#probeguard-alpha-explorer")
    page.wait_for_function("document.getElementById('probeguard-alpha-explorer').dataset.ready === 'true'",
                           timeout=30_000)
    assert root.locator(".pg-chart svg .mark-line path").count() > 0, "the Vega chart did not render"
    # issue 23 pt 4: a numbered caption, and legend / axis text of at least 11 px as shown
    assert root.locator("figure figcaption").inner_text().startswith("Figure R.1.")
    sizes = page.evaluate("""() => [...document.querySelectorAll(
        '#probeguard-alpha-explorer .pg-chart svg g.role-legend text, #probeguard-alpha-explorer .pg-chart svg g.role-axis text')]
        .map(t => { const svg = t.ownerSVGElement, box = svg.viewBox.baseVal;
                    const k = svg.getBoundingClientRect().width / (box && box.width ? box.width : svg.width.baseVal.value);
                    return parseFloat(getComputedStyle(t).fontSize) * k; })""")
    assert sizes and min(sizes) >= 11, f"the explorer's legend / axis text is {min(sizes or [0]):.1f} px (< 11)"
    assert root.get_attribute("data-alpha") == "0.15"
    _same(_readout(page), _expected(pre, 0.15))
    assert _expected(pre, 0.05) != _expected(pre, 0.30), "precondition: the release certifies nothing anywhere"
    seen = []
    for alpha in (0.05, 0.30, 0.25):
        root.locator("input[type=range]").fill(f"{alpha}")
        page.wait_for_function(f"document.getElementById('probeguard-alpha-explorer').dataset.alpha === '{alpha:.2f}'",
                               timeout=10_000)
        assert root.locator(".pg-alpha").inner_text() == f"{alpha:.2f}"
        shown = _readout(page)
        _same(shown, _expected(pre, alpha))
        seen.append(shown)
    assert seen[0] != seen[1], "the readout did not change between alpha = 0.05 and 0.30"
    _assert_clean(log)
    page.context.close()


def test_pages_carry_the_provenance_banner(built: dict[str, Path], browser: Any) -> None:
    for rel in (f"book/_generated/{NAME}.html", "book/intro.html"):
        page, log = _open(browser, built["html"] / rel)
        banner = page.locator(".probeguard-provenance").first
        assert "Simulated release" in banner.inner_text(), rel
        _assert_clean(log)
        page.context.close()


# --------------------------------------------------------------------------- the claims ledger (issue 22)
def _claims_of(page_name: str) -> set[str]:
    from probeguard_core.ledger import load_claims

    return {c.id for c in load_claims() if c.page == page_name}


def test_landing_page_shows_the_scorecard(built: dict[str, Path], browser: Any) -> None:
    page, log = _open(browser, built["html"] / "book/intro.html")
    text = page.locator("main").inner_text()
    assert re.search(r"On this release, \d+ of \d+ testable claims of the paper hold, \d+ fail, \d+ cannot be decided",
                     text), "the landing page has no scorecard"
    claim = text.find("A system can be unanimously wrong, returning the same incorrect answer")
    assert -1 < claim < text.find("This book was built on") < text.find("On this release, "), \
        "the landing page does not open with the paper's claim and this release's summary before the scorecard"
    link = page.locator("a").filter(has_text="claims hold on this release").first  # smart quotes: paper’s
    target = _resolve_link(built["html"], "book/intro.html", link.get_attribute("href"))
    assert target is not None and target.is_file()
    _assert_clean(log)
    page.context.close()


@pytest.mark.parametrize("site", ["small", *(["full"] if FULL else [])])
def test_result_pages_show_a_verdict_line_per_claim(built: dict[str, Path], browser: Any, site: str) -> None:
    """Every result page that tests a claim shows one line per claim it tests, under its banner (folded
    under a summary line of the counts when there are many), each reading holds / does not hold / cannot be decided / cannot be tested with its value."""
    root = _sites(built)[site]
    names = [e.name for e in bb.load_registry() if _claims_of(e.name)]
    shown = [n for n in names if (root / f"book/_generated/{n}.html").is_file()]
    assert site != "small" or {"table2_3_discrimination", NAME} <= set(shown)
    assert site != "full" or shown == names, "a page that tests a claim is missing from the full build"
    for name in shown:
        rel = f"book/_generated/{name}.html"
        page, _ = _open(browser, root / rel)
        block = page.locator(".probeguard-verdicts")
        assert block.count() == 1, f"{rel}: no verdict block"
        summary = block.locator("summary")
        assert re.match(r"The paper.s claims this page tests: \d+ ", summary.inner_text()), rel
        if block.get_attribute("open") is None:  # more lines than OPEN_VERDICT_LINES: folded under the summary
            summary.locator("strong").click()
        lines = block.locator("li[data-claim]")
        assert {lines.nth(i).get_attribute("data-claim") for i in range(lines.count())} == _claims_of(name), rel
        for i in range(lines.count()):
            assert re.match(r"On this release the paper's claim (holds|does not hold|cannot be decided at this size "
                            r"\(\d[\d,]* (questions|split tests)\)|cannot be tested here): ",
                            lines.nth(i).inner_text()), rel
        page.context.close()

