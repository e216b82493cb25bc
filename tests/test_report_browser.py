"""The certify report opens in headless Chromium with no console errors (issue 6 acceptance).

``probeguard certify`` runs on the shipped release's MedQA cell
(``data/simulated-v1/medqa/qwen3-8b``; a synthetic cell when the release is absent) and the
report is loaded from disk with the Playwright sync API.  The page must log no console error,
raise no page error, and request nothing but itself (it is self-contained: inline SVG, inline
CSS, a Content-Security-Policy that forbids every external load).

Skipped when ``/usr/bin/chromium`` is absent, unless ``PROBEGUARD_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_cli_certify import build_cell

from probeguard_core.cli import main

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
RELEASE_CELL = Path(__file__).resolve().parents[1] / "data" / "simulated-v1" / "medqa" / "qwen3-8b"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def _require_browser() -> None:
    if CHROMIUM.exists():
        return
    msg = f"headless Chromium not installed at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("PROBEGUARD_REQUIRE_BROWSER") == "1":
        pytest.fail(msg + "; PROBEGUARD_REQUIRE_BROWSER=1 makes this a failure")
    pytest.skip(msg + "; set PROBEGUARD_REQUIRE_BROWSER=1 to fail instead")


def _cell_files(tmp: Path) -> tuple[dict[str, Path], str]:
    files = {k: RELEASE_CELL / f"{k}.jsonl.gz" for k in ("logs", "probe", "nli")}
    if all(p.exists() for p in files.values()):
        return files, "release"
    return build_cell(tmp / "cell"), "synthetic"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    tmp = tmp_path_factory.mktemp("report")
    files, source = _cell_files(tmp)
    out = tmp / "out"
    argv = ["certify", "--logs", files["logs"], "--probe", files["probe"], "--nli", files["nli"],
            "--alpha", "0.15", "--out", out]
    assert main([str(a) for a in argv]) == 0
    return out / "report.html", json.loads((out / "certificate.json").read_text()), source


def _open(path: Path) -> tuple[dict[str, Any], list[tuple[str, str]], list[str], list[str]]:
    from playwright.sync_api import sync_playwright

    console: list[tuple[str, str]] = []
    page_errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.on("console", lambda m: console.append((m.type, m.text)))
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.on("requestfailed", lambda r: page_errors.append(f"request failed: {r.url}"))
            page.goto(path.as_uri(), wait_until="load")
            page.wait_for_timeout(300)  # let late console messages arrive
            info = page.evaluate(
                """() => ({
                    title: document.title,
                    svgs: document.querySelectorAll('svg').length,
                    curves: document.querySelectorAll('svg .rc-curve').length,
                    bands: document.querySelectorAll('svg .wilson-band').length,
                    assumption: document.querySelector('#assumption').innerText,
                    summary: document.querySelector('#summary').innerText,
                    inputs: Array.from(document.querySelectorAll('#inputs tr')).slice(1)
                                 .map(r => r.cells[2].innerText.trim()),
                    strataRows: document.querySelectorAll('#strata-table tr').length - 1,
                    scripts: document.querySelectorAll('script').length,
                    external: Array.from(document.querySelectorAll('[src],link[href]'))
                                 .map(e => e.getAttribute('src') || e.getAttribute('href')),
                })"""
            )
        finally:
            browser.close()
    return info, console, page_errors, requests


def test_report_opens_without_console_errors(report: tuple[Path, dict[str, Any], str]) -> None:
    _require_browser()
    path, cert, source = report
    info, console, page_errors, requests = _open(path)
    errors = [(t, m) for t, m in console if t in ("error", "assert")]
    assert not errors, errors
    assert not page_errors, page_errors
    # self-contained: the only request is the page itself
    assert requests == [path.as_uri()], requests
    assert info["scripts"] == 0 and all(u.startswith("data:") for u in info["external"]), info["external"]
    # content: one chart (curve + Wilson band) per scored certified stratum, the assumption, inputs' sha256
    scored = [s for s in cert["strata"] if s["scored"]]
    assert info["svgs"] == info["curves"] == info["bands"] == len(scored) >= 1
    assert "Assumption 1" in info["assumption"] and "i.i.d." in info["assumption"]
    assert info["inputs"] == [f["sha256"] for f in cert["inputs"]]
    assert info["strataRows"] == len(cert["strata"])
    assert f"answers {cert['n_answered']}" in info["summary"]
    assert "medqa" in info["title"]
    if source == "release":
        assert any(s["status"] == "certified" for s in cert["strata"]), "the release MedQA cell certifies nothing"
