"""The α explorer's chart reads like the book's other figures (issue 23 pt 4): a numbered caption,
alt text, and legend / axis text of at least 11 px. The numbers themselves: test_notebooks."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from probeguard_core import alpha_explorer
from probeguard_core.tables.figures import FIGURES


def _pre() -> pd.DataFrame:
    """A precomputed frame of two series over the slider grid (shape of alpha_explorer.precompute)."""
    alphas = np.round(np.array(alpha_explorer.ALPHAS, dtype=float), 2)
    rows = [{"series": s, "stratum": s.split(" ")[0], "score": "paper rule", "alpha": a,
             "coverage_mean": min(1.0, k * a), "coverage_sd": 0.0, "risk_mean": 0.8 * a, "risk_sd": 0.0,
             "n_certified": 3, "violations": 0, "n_splits": 4}
            for k, s in ((2.0, "all · paper rule"), (3.0, "S1 · z(κ)+z(RSE)")) for a in alphas]
    return pd.DataFrame(rows)


def test_alpha_chart_text_is_legible() -> None:
    spec = alpha_explorer.alpha_chart(_pre()).to_dict()
    legends = [v["legend"] for c in spec["hconcat"] for layer in c["layer"]
               for v in layer.get("encoding", {}).values() if isinstance(v, dict) and v.get("legend")]
    assert legends, "the chart has no legend"
    assert all(leg["labelFontSize"] >= 11 for leg in legends)
    assert spec["config"]["axis"]["labelFontSize"] >= 11 and spec["config"]["axis"]["titleFontSize"] >= 11
    assert spec["config"]["title"]["fontSize"] >= 11


def test_explorer_chart_has_a_numbered_caption() -> None:
    html = alpha_explorer.explorer_html(_pre(), initial=0.2)
    text = FIGURES["alpha_explorer"]
    fig = re.search(r'<figure class="probeguard-figure" id="fig-alpha-explorer">(.*?)</figure>', html, re.S)
    assert fig, "the chart is not a figure"
    assert '<div class="pg-chart" role="img" aria-label="' in fig.group(1)
    cap = re.search(r"<figcaption><strong>(Figure [\w.]+)\.</strong>(.*?)</figcaption>", fig.group(1), re.S)
    assert cap and cap.group(1) == text.number
    assert 'α = <span class="pg-alpha">0.20</span>' in cap.group(2)
    numbers = [f.number for f in FIGURES.values()]
    assert numbers.count(text.number) == 1, "two figures share a number"
