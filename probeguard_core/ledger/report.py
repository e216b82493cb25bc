"""The ledger's outputs (issue 22, points 3-4): ``claims.csv`` / ``claims.json``, the verdict of
each claim over its cells, the scorecard of the book's landing page and the verdict lines under a
result page's caption.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from probeguard_core.fileio import jsonable
from probeguard_core.paper import display_label
from probeguard_core.ledger.registry import load_claims
from probeguard_core.ledger.verdict import EQUIVALENCE_MARGIN, VERDICTS
from probeguard_core.tables.departures import MECHANISMS, mechanism_anchor

__all__ = ["DEPARTURES_HREF", "LINE_WORDS", "claim_verdicts", "ledger_files", "page_lines", "page_verdicts",
           "page_verdicts_html", "scorecard", "scorecard_sentence", "verdict_counts"]

#: How a verdict reads under a caption (``undetermined`` is followed by the size, ``untestable``
#: by the reason).
LINE_WORDS: dict[str, str] = {"holds": "holds", "fails": "does not hold",
                              "undetermined": "cannot be decided at this size",
                              "untestable": "cannot be tested here"}


def claim_verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """One verdict per claim over its cells: ``untestable`` when no cell can be tested, ``fails``
    when any tested cell fails, ``holds`` when every tested cell holds, else ``undetermined``.
    Columns ``claim, section, page, verdict, n_cells, n_tested``, in the ledger's order."""
    rows = []
    for claim, g in table.groupby("claim", sort=False):
        v = g["verdict"]
        tested = v[v != "untestable"]
        verdict = ("untestable" if tested.empty else "fails" if (tested == "fails").any()
                   else "holds" if (tested == "holds").all() else "undetermined")
        rows.append({"claim": claim, "section": g["section"].iloc[0], "page": g["page"].iloc[0], "verdict": verdict,
                     "n_cells": len(g), "n_tested": len(tested)})
    return pd.DataFrame(rows, columns=["claim", "section", "page", "verdict", "n_cells", "n_tested"])


def scorecard(table: pd.DataFrame) -> dict[str, int]:
    """Counts of :func:`claim_verdicts`: ``claims``, ``testable`` and one count per verdict."""
    v = claim_verdicts(table)["verdict"]
    out = {"claims": int(len(v)), "testable": int((v != "untestable").sum())}
    out.update({k: int((v == k).sum()) for k in VERDICTS})
    return out


def scorecard_sentence(card: Mapping[str, int]) -> str:
    """The landing page's sentence (issue 22): "On this release, N of M testable claims hold, K
    fail, U cannot be decided at this size" (and how many the release cannot test)."""
    s = (f"On this release, {card['holds']} of {card['testable']} testable claims of the paper hold, "
         f"{card['fails']} fail, {card['undetermined']} cannot be decided at this size")
    if card["untestable"]:
        s += f"; {card['untestable']} of the {card['claims']} cannot be tested (the release lacks what they need)"
    return s + "."


def _num(x: float, percent: bool) -> str:
    if not math.isfinite(x):
        return "–"
    return f"{100 * x:.1f}\u00a0%" if percent else f"{x:.3f}"  # a no-break space: "%" never wraps alone


def _size(n: int, interval: str) -> str:
    unit = "split tests" if interval.startswith("Clopper") else "questions"
    return f"{n:,} {unit}"


def page_lines(table: pd.DataFrame, page: str) -> list[tuple[str, str]]:
    """``(verdict, line)`` per tested claim and cell of ``page`` (the notebook name), in words a
    reader understands (:data:`LINE_WORDS`), e.g. "On this release the paper's claim holds:
    <quantity> is 0.705, 95 % interval 0.671 to 0.739 (<backbone> / <dataset>)."; an undetermined row
    says over how many questions, an untestable row says why. Rates, coverages and shares read as
    percentages."""
    rows = table[table["page"] == page]
    lines = []
    for r in rows.itertuples(index=False):
        where = " / ".join(x for x in (display_label("backbone", r.backbone) if r.backbone else "",
                                       display_label("dataset", r.dataset) if r.dataset else "", r.detail) if x)
        percent = any(w in r.quantity for w in ("coverage", "risk", "share", "flip", "error rate"))
        if r.verdict == "untestable":
            lines.append((r.verdict, f"On this release the paper's claim {LINE_WORDS[r.verdict]}: {r.reason} "
                                     f"({r.quantity}; {where})."))
            continue
        words = LINE_WORDS[r.verdict] + (f" ({_size(int(r.n), r.interval)})" if r.verdict == "undetermined" else "")
        lines.append((r.verdict, f"On this release the paper's claim {words}: {r.quantity} is {_num(r.value, percent)}, "
                                 f"95 % interval {_num(r.ci_low, percent)} to {_num(r.ci_high, percent)} ({where})."))
    return lines


#: Where a ``fails`` line on a simulated release points: the departures page, which names the
#: simulator mechanism behind each number (a sibling of every result page in the built book).
DEPARTURES_HREF = "departures.html"


#: A page with more verdict lines than this shows them folded under their summary line, so its
#: result stays on the first screen (issue 23 pt 1).
OPEN_VERDICT_LINES = 1


def verdict_counts(verdicts: list[str]) -> str:
    """The summary line's counts: "2 hold, 1 does not hold, 3 cannot be decided at this size"."""
    verbs = {"holds": ("holds", "hold"), "fails": ("does not hold", "do not hold"),
             "undetermined": ("cannot be decided at this size",) * 2, "untestable": ("cannot be tested here",) * 2}
    return ", ".join(f"{n} {verbs[v][n != 1]}" for v in LINE_WORDS if (n := verdicts.count(v)))


def page_verdicts_html(table: pd.DataFrame, page: str, simulated: bool) -> str:
    """The verdict lines of ``page`` as the HTML block shown under a result page's banner (empty
    when the page tests no claim): a summary line (the counts, :func:`verdict_counts`, and a link to
    the ledger page) over one line per claim, folded when there are more than
    :data:`OPEN_VERDICT_LINES`; each line names the claim's section, and on a simulated release a
    ``fails`` line links its claim's simulator mechanism on the departures page
    (:data:`DEPARTURES_HREF` and the mechanism's anchor)."""
    lines = page_lines(table, page)
    if not lines:
        return ""
    sections = dict(zip(table["claim"], table["section"]))
    mechanisms = {c.id: c.mechanism for c in load_claims()}
    items = []
    for (v, text), claim in zip(lines, table.loc[table["page"] == page, "claim"]):
        extra = (f' <a href="{DEPARTURES_HREF}#{mechanism_anchor(mechanisms[claim])}">why: the simulator mechanism '
                 f"“{html.escape(MECHANISMS[mechanisms[claim]][0])}”</a>" if v == "fails" and simulated else "")
        items.append(f'<li class="probeguard-verdict probeguard-verdict-{v}" data-claim="{html.escape(claim)}">'
                     f"{html.escape(text)} <small>(the paper, {html.escape(sections[claim])})</small>{extra}</li>")
    shown = " open" if len(items) <= OPEN_VERDICT_LINES else ""
    return (f'<details class="probeguard-verdicts"{shown}><summary><strong>The paper\'s claims this page tests</strong>: '
            f'{verdict_counts([v for v, _ in lines])} (<a href="ledger.html">the whole ledger</a>)</summary><ul>'
            + "".join(items) + "</ul></details>")


def page_verdicts(release: Any, page: str, n_splits: int | None = None) -> pd.DataFrame:
    """The ledger rows of the claims ``page`` tests, evaluated on ``release``
    (:func:`evaluate.evaluate_release` restricted to them)."""
    from probeguard_core.ledger.evaluate import N_SPLITS, evaluate_release

    claims = [c for c in load_claims() if c.page == page]
    return evaluate_release(release, claims, n_splits=N_SPLITS if n_splits is None else n_splits)


def ledger_files(table: pd.DataFrame, release: str, out: str | Path) -> dict[Path, bytes]:
    """``claims.csv`` and ``claims.json`` of a ledger (bytes, written as one set by
    :func:`probeguard_core.fileio.write_files_atomically`): the
    rows (values rounded to 6 digits, so a re-run is byte-identical), and in the JSON the release,
    the scorecard, each claim's verdict and the equivalence margin of the "at chance" rule."""
    out = Path(out)
    t = table.copy()
    for c in ("value", "ci_low", "ci_high"):
        t[c] = t[c].astype(float).round(6)
    csv = t.to_csv(index=False, lineterminator="\n").encode("utf-8")
    doc: dict[str, Any] = {
        "release": release, "scorecard": scorecard(table), "equivalence_margin": EQUIVALENCE_MARGIN,
        "claims": claim_verdicts(table).to_dict(orient="records"),
        "rows": t.to_dict(orient="records"),
    }
    js = (json.dumps(jsonable(doc), ensure_ascii=False, indent=1, allow_nan=False) + "\n").encode("utf-8")
    return {out / "claims.csv": csv, out / "claims.json": js}
