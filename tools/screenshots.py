"""Screenshots of built book pages, offline, at laptop and phone width (README, docs/screenshots/).

    python tools/screenshots.py [--html _build/html] [--out docs/screenshots]

Headless Chromium (Debian's ``chromium``) through playwright; every request that leaves
``file://`` is aborted, so a page that needs the network shows it. One viewport-sized PNG per
page and width (palette-quantized to stay small).
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from PIL import Image

#: name: (page, element to scroll to the top of the shot, or None for the page's first screen)
PAGES: dict[str, tuple[str, str | None]] = {
    "landing": ("book/intro.html", None),
    "figure4": ("book/_generated/certification_fig4.html", "figure.probeguard-figure"),
    "departures": ("book/_generated/departures.html", None),
}
WIDTHS = {"1366": (1366, 768), "390": (390, 844)}
CHROMIUM = "/usr/bin/chromium"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--html", default="_build/html")
    ap.add_argument("--out", default="docs/screenshots")
    ap.add_argument("--menu", action="store_true", help="also a phone shot with the navigation drawer open")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    html, out = Path(args.html).resolve(), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    blocked: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        shots = [(name, rel, at, w, False) for name, (rel, at) in PAGES.items() for w in WIDTHS]
        if args.menu:
            shots.append(("menu", "book/intro.html", None, "390", True))
        for name, rel, at, w, menu in shots:
            ctx = browser.new_context(viewport={"width": WIDTHS[w][0], "height": WIDTHS[w][1]})
            ctx.route("**/*", lambda r: (blocked.append(r.request.url), r.abort())
                      if not r.request.url.startswith(("file:", "data:", "blob:")) else r.continue_())
            page = ctx.new_page()
            page.goto((html / rel).as_uri(), timeout=180_000)  # a loaded machine is slow, not wrong
            page.wait_for_timeout(2500)  # MathJax typesetting
            if at:  # the element at the top of the viewport (a little of what precedes it above)
                page.evaluate("(sel) => { const e = document.querySelector(sel);"
                              " window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 60); }", at)
                page.wait_for_timeout(1500)
            if menu:
                page.locator(".primary-toggle:visible").first.click()
                page.wait_for_timeout(700)
            png = Image.open(io.BytesIO(page.screenshot()))
            target = out / f"{name}-{w}.png"
            png.convert("RGB").quantize(colors=96).save(target, optimize=True)
            print(f"{target} {target.stat().st_size // 1024} KiB")
            ctx.close()
        browser.close()
    if blocked:
        print("requests that left file:// (blocked):", *sorted(set(blocked)), sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
