"""Every navigation entry has its own title (issue 23, point 1): no two entries of ``_toc.yml``
share a title, so the sidebar never shows the same words for two pages (it did for the chapter
"Deploying: recalibration and drift" and its notebook, when a prose chapter introduced each
notebook). A page's title is the toc's ``title`` when given, else the first heading of its source:
``book/<x>.md`` (the landing and method pages), or ``notebooks/<x>.md`` for an executed notebook
``book/_generated/<x>``."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def _entries(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if "file" in node or "root" in node:
            yield node
        for v in node.values():
            yield from _entries(v)
    elif isinstance(node, list):
        for v in node:
            yield from _entries(v)


def _title(entry: dict[str, Any]) -> str:
    if entry.get("title"):
        return str(entry["title"])
    file = str(entry.get("file") or entry.get("root"))
    name = Path(file).name
    source = REPO / "notebooks" / f"{name}.md" if "/_generated/" in f"/{file}" else REPO / f"{file}.md"
    m = re.search(r"^# (.+)$", source.read_text(encoding="utf-8"), flags=re.MULTILINE)
    assert m, f"{source}: no '# ' heading, so its navigation entry has no title"
    return m.group(1).strip()


def test_no_two_navigation_entries_share_a_title() -> None:
    toc = yaml.safe_load((REPO / "_toc.yml").read_text(encoding="utf-8"))
    titles = [_title(e) for e in _entries(toc)]
    assert len(titles) > 20  # every page was read
    shared = {t: n for t, n in Counter(" ".join(t.lower().split()) for t in titles).items() if n > 1}
    assert not shared, f"navigation titles used by more than one entry: {shared}"
