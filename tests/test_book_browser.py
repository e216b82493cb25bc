"""The built book in a real browser: headless Chromium (Debian's ``chromium``) via playwright.

A small book (the certification notebook and its chapter, small parameters, a 5 % simulated
release) is built once per session into a scratch copy of the book sources. The alpha slider
of the static page is moved with the network blocked (the page must work offline, with no
kernel), and the readout must show the precomputed values written to ``alpha_explorer.csv``.

Skipped when ``/usr/bin/chromium`` is absent, unless ``PROBEGUARD_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from book_fixtures import book_copy, small_release

from probeguard_core import book_build as bb

pytestmark = [pytest.mark.browser, pytest.mark.slow]
CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
NAME = "certification_fig4"
#: The largest Qwen3-8B cell of a 5 % release: enough questions that some alpha certifies.
DATASET = "medmcqa"
#: Remote assets the book theme references that an offline page may fail to load (math typesetting).
ALLOWED_REMOTE = ("https://cdn.jsdelivr.net/npm/mathjax@",)

if not CHROMIUM.exists():
    if os.environ.get("PROBEGUARD_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{CHROMIUM} is missing and PROBEGUARD_REQUIRE_BROWSER=1 (apt-get install chromium)",
                    pytrace=False)
    pytest.skip(f"{CHROMIUM} not found (apt-get install chromium); set PROBEGUARD_REQUIRE_BROWSER=1 to fail instead",
                allow_module_level=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    release = small_release(tmp_path_factory.getbasetemp())
    root = book_copy(tmp_path_factory.mktemp("book"))
    old = os.environ.get("PROBEGUARD_REPO_ROOT")
    os.environ["PROBEGUARD_REPO_ROOT"] = str(root)
    bb._root_from.cache_clear()
    try:
        [res] = bb.run_notebooks(release, jobs=1, only=[NAME], params={"n_splits": 3, "dataset": DATASET}, root=root)
        assert res.ok, f"{NAME} failed: {res.error}"
        html = bb.build_book(release, root=root, only=[NAME])
    finally:
        if old is None:
            os.environ.pop("PROBEGUARD_REPO_ROOT", None)
        else:
            os.environ["PROBEGUARD_REPO_ROOT"] = old
        bb._root_from.cache_clear()
    return {"html": html, "outputs": root / "book" / "_generated" / NAME}


@pytest.fixture(scope="module")
def browser() -> Any:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


def _open(browser: Any, path: Path) -> tuple[Any, dict[str, list[str]]]:
    page = browser.new_page()
    log: dict[str, list[str]] = {"console_errors": [], "page_errors": [], "remote": [], "failed": []}
    page.on("console", lambda m: m.type == "error" and log["console_errors"].append(m.text))
    page.on("pageerror", lambda e: log["page_errors"].append(str(e)))
    page.on("requestfailed", lambda r: log["failed"].append(r.url))

    def route(r: Any) -> None:  # offline: no request leaves the machine
        if r.request.url.startswith(("http://", "https://")):
            log["remote"].append(r.request.url)
            r.abort()
        else:
            r.continue_()

    page.route("**/*", route)
    page.goto(path.as_uri())
    return page, log


def _assert_clean(log: dict[str, list[str]]) -> None:
    assert not log["page_errors"], log["page_errors"]
    unexpected = [u for u in log["remote"] if not u.startswith(ALLOWED_REMOTE)]
    assert not unexpected, f"page requests remote resources: {unexpected}"
    failed_local = [u for u in log["failed"] if not u.startswith(("http://", "https://"))]
    assert not failed_local, failed_local
    # the only console errors allowed are the blocked remote loads counted above
    other = [m for m in log["console_errors"] if "Failed to load resource" not in m]
    assert not other, other
    assert len(log["console_errors"]) <= len(log["remote"])


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
    page.close()


def test_pages_carry_the_provenance_banner(built: dict[str, Path], browser: Any) -> None:
    for rel in ("book/certification.html", f"book/_generated/{NAME}.html", "book/intro.html"):
        page, log = _open(browser, built["html"] / rel)
        banner = page.locator(".probeguard-provenance").first
        assert "Simulated release" in banner.inner_text(), rel
        _assert_clean(log)
        page.close()
