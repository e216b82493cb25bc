"""alpha for readers: certified coverage and realized risk as the target level moves (§4.4).

Two views of the same computation, :func:`probeguard_core.certify.repeated_splits`:

* :func:`precompute` runs the stratified Learn-then-Test rule over repeated calibration/test
  splits for every alpha from 0.01 to 0.30 (step 0.01), once per stratum and per score, and
  :func:`explorer_html` renders the result as an Altair chart with an alpha slider whose
  JavaScript (Vega, Vega-Lite, Vega-Embed, bundled by ``vl-convert-python``) is inlined, so the
  static book page works offline with no kernel. A readout table under the chart is updated
  from the precomputed rows when the slider moves; the container carries a stable ``id`` and
  ``data-*`` attributes (``data-alpha``; per cell ``data-series``, ``data-metric``,
  ``data-value``) that a browser test can read.
* :func:`alpha_widget` is an ipywidgets control for Jupyter that recomputes live through the
  core at the chosen alpha.
"""

from __future__ import annotations

import functools
import html
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core import SEED
from probeguard_core.certify import repeated_splits, summarize

__all__ = ["ALPHAS", "SCORES", "ScoreVariant", "alpha_chart", "alpha_widget", "explorer_html", "precompute"]

#: The slider's grid: 0.01, 0.02, ..., 0.30.
ALPHAS: tuple[float, ...] = tuple(round(0.01 * k, 2) for k in range(1, 31))
DEFAULT_ID = "probeguard-alpha-explorer"


@dataclass(frozen=True)
class ScoreVariant:
    """A score certified in one stratum: ``column`` of the certification table (§3.3)."""

    stratum: str
    name: str
    column: str

    @property
    def series(self) -> str:
        return f"{self.stratum} · {self.name}"


#: Per stratum and per score: the paper's scores (S1 z(kappa)+z(RSE), S2 a-bar), their parts
#: and the single-round control (first-round agreement, constant on S1).
SCORES: tuple[ScoreVariant, ...] = (
    ScoreVariant("S1", "z(κ)+z(RSE)", "score"),
    ScoreVariant("S1", "keep rate κ", "kappa"),
    ScoreVariant("S1", "RSE", "rse"),
    ScoreVariant("S1", "first-round agreement", "a1"),
    ScoreVariant("S2", "trajectory agreement ā", "score"),
    ScoreVariant("S2", "first-round agreement", "a1"),
)


def precompute(table: pd.DataFrame, alphas: Sequence[float] = ALPHAS, n_splits: int = 50, seed: int = SEED,
               variants: Sequence[ScoreVariant] = SCORES, delta: float = 0.05,
               extra_cal: pd.DataFrame | None = None) -> pd.DataFrame:
    """Certified coverage and realized test risk for every alpha, stratum and score (§4.4).

    ``table`` is :func:`probeguard_core.tables.certification.certification_inputs` (columns
    ``stratum``, ``score``, ``error``, ``kappa``, ``rse``, ``a1``). For each variant the stratum's score is
    replaced by the variant's column and :func:`certify.repeated_splits` (``method="stratified"``,
    Bonferroni over S1 and S2) runs over ``alphas``; the rows of that stratum are summarized by
    :func:`certify.summarize` (mean and sd over splits). A final series ``all · paper rule``
    gives the whole stream under the paper's scores (S3 abstains). A variant whose column is
    missing for some question of its stratum is skipped (it cannot be certified on the same
    population); so is the whole-stream series when the paper's score is (a release without
    probe or NLI records for its unanimous layer). Columns: ``series, stratum, score, alpha, coverage_mean, coverage_sd,
    risk_mean, risk_sd, n_certified, violations, n_splits``; sorted, deterministic.
    """
    need = {"stratum", "score", "error"}
    if not need <= set(table.columns):
        raise ValueError(f"precompute: table lacks column(s) {sorted(need - set(table.columns))}")
    alphas = [float(a) for a in alphas]
    strata = table["stratum"].to_numpy(dtype=str)
    errors = table["error"].to_numpy(dtype=bool)
    frames = []

    def run(scores: np.ndarray, xs: tuple | None) -> pd.DataFrame:
        df = repeated_splits(scores, errors, strata, alphas=alphas, n_splits=n_splits, seed=seed,
                             delta=delta, extra_cal=xs)
        return summarize(df)

    def extra(column: str, stratum: str) -> tuple | None:
        if extra_cal is None:
            return None
        s = extra_cal["score"].to_numpy(dtype=float).copy()
        m = extra_cal["stratum"].to_numpy(dtype=str) == stratum
        s[m] = extra_cal[column].to_numpy(dtype=float)[m]
        return (s, extra_cal["error"].to_numpy(dtype=bool), extra_cal["stratum"].to_numpy(dtype=str))

    for v in variants:
        if v.column not in table.columns:
            continue
        scores = table["score"].to_numpy(dtype=float).copy()
        in_s = strata == v.stratum
        scores[in_s] = table[v.column].to_numpy(dtype=float)[in_s]
        if np.isnan(scores[in_s]).any():
            continue
        # Each stratum is certified on its own at the fixed Bonferroni level delta / (|grid| m), and only
        # this stratum's rows are kept: another stratum's missing scores (a release without probe / NLI
        # records for S1) cannot change them, so they are set to 0 rather than stopping the variant.
        scores[~in_s & np.isnan(scores)] = 0.0
        summ = run(scores, extra(v.column, v.stratum))
        summ = summ[summ["stratum"] == v.stratum].assign(series=v.series, score=v.name)
        frames.append(summ)
    paper = table["score"].to_numpy(dtype=float)
    if not np.isnan(paper[np.isin(strata, ("S1", "S2"))]).any():  # else the paper rule cannot run on this release
        base = run(paper, extra("score", "S1"))
        frames.append(base[base["stratum"] == "all"].assign(series="all · paper rule", score="paper rule"))
    if not frames:
        raise ValueError("precompute: no score variant is defined for every question of its stratum")
    out = pd.concat(frames, ignore_index=True)
    out["alpha"] = out["alpha"].round(4)
    cols = ["series", "stratum", "score", "alpha", "coverage_mean", "coverage_sd", "risk_mean", "risk_sd",
            "n_certified", "violations", "n_splits"]
    order = {v.series: i for i, v in enumerate(variants)}
    out["_o"] = out["series"].map(lambda s: order.get(s, len(order)))
    return out.sort_values(["_o", "alpha"], kind="stable")[cols].reset_index(drop=True)


# --------------------------------------------------------------------------- static chart
#: Font size (CSS px) of the chart's legend and axis labels: legible at page width (issue 23 pt 4:
#: Vega's default legend text is about 9 px).
LEGIBLE_PX = 12


def alpha_chart(pre: pd.DataFrame, initial: float = 0.15, width: int = 260, height: int = 210) -> Any:
    """Altair chart: coverage and realized risk (means over splits) against alpha, one line per
    series, a slider over alpha (``alt.param`` named ``alpha`` bound to ``alt.binding_range``)
    with a rule and labelled points at the selected level; the risk panel shows the risk = alpha
    diagonal."""
    import altair as alt

    alpha = alt.param(name="alpha", value=float(initial),
                      bind=alt.binding_range(min=min(ALPHAS), max=max(ALPHAS), step=0.01, name="alpha "))
    long = pd.concat([
        pre.assign(metric="certified coverage", value=pre["coverage_mean"]),
        pre.assign(metric="realized test risk", value=pre["risk_mean"]),
    ])[["series", "alpha", "metric", "value"]]
    long = long.astype({"value": float}).replace({np.nan: None})
    color = alt.Color("series:N", title=None,
                      legend=alt.Legend(orient="bottom", columns=2, labelFontSize=LEGIBLE_PX, labelLimit=0),
                      scale=alt.Scale(domain=list(dict.fromkeys(pre["series"]))))
    at_alpha = "abs(datum.alpha - alpha) < 0.005"

    def panel(metric: str) -> Any:
        base = alt.Chart(long).transform_filter(alt.datum.metric == metric)
        x = alt.X("alpha:Q", title="target risk level α", scale=alt.Scale(domain=[0, 0.3]))
        y = alt.Y("value:Q", title=metric, scale=alt.Scale(domain=[0, 1] if metric.startswith("cert") else [0, 0.35]))
        lines = base.mark_line().encode(x=x, y=y, color=color)
        pts = base.mark_point(filled=True, size=60).encode(x=x, y=y, color=color,
                                                          tooltip=["series:N", "alpha:Q", alt.Tooltip("value:Q", format=".3f")]
                                                          ).transform_filter(at_alpha)
        rule = alt.Chart(pd.DataFrame({"one": [1]})).mark_rule(strokeDash=[4, 3], color="gray").encode(
            x=alt.X("a:Q")).transform_calculate(a="alpha")
        layers = [lines, pts, rule]
        if metric.startswith("realized"):
            diag = alt.Chart(pd.DataFrame({"alpha": [0.0, 0.3], "value": [0.0, 0.3]})).mark_line(
                color="black", strokeDash=[2, 2], opacity=0.6).encode(x="alpha:Q", y="value:Q")
            layers.append(diag)
        return alt.layer(*layers).properties(width=width, height=height, title=metric)

    return (alt.hconcat(panel("certified coverage"), panel("realized test risk")).add_params(alpha)
            .configure_axis(labelFontSize=LEGIBLE_PX, titleFontSize=LEGIBLE_PX + 1)
            .configure_title(fontSize=LEGIBLE_PX + 2))


def _fmt(v: Any) -> str:
    return "–" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{float(v):.3f}"


@functools.lru_cache(maxsize=1)
def _javascript_bundle() -> str:
    """Vega, Vega-Lite and Vega-Embed, inlined (``vl_convert.javascript_bundle``'s default snippet,
    which assigns ``window.vegaEmbed``): the same for every explorer, so it is built once per
    ``vl-convert`` version and kept in the artifact cache (about 2.5 s a build)."""
    import vl_convert as vlc

    from probeguard_core import cache

    return cache.cached_json("vega_bundle", {"vl_convert": vlc.__version__}, vlc.javascript_bundle,
                             encode=lambda js: js, decode=str)


def explorer_html(pre: pd.DataFrame, initial: float = 0.15, element_id: str = DEFAULT_ID,
                  full_document: bool = False, title: str = "Certified coverage and realized risk against α") -> str:
    """Self-contained HTML of the alpha explorer: chart + slider + readout, JavaScript inlined.

    The readout table lists, for the selected alpha, every series' mean certified coverage and
    mean realized risk (over splits), with ``data-series``, ``data-metric`` and ``data-value``
    (full precision; empty for no value) on each cell and ``data-alpha`` on the container. A
    ``<script type="application/json">`` holds the precomputed rows the readout is filled from.
    The chart is a numbered, captioned figure like every figure of the book (its number, caption
    and alt text: ``tables.figures.FIGURES["alpha_explorer"]``); ``title`` is the full document's
    ``<title>``.
    """
    from probeguard_core.tables.figures import FIGURES

    text = FIGURES["alpha_explorer"]
    initial = round(float(initial), 2)
    if initial not in ALPHAS:
        raise ValueError(f"initial alpha {initial} is not on the slider grid 0.01..0.30")
    spec = alpha_chart(pre, initial=initial).to_dict()
    rows = [
        {"series": r.series, "alpha": round(float(r.alpha), 2),
         "coverage": None if pd.isna(r.coverage_mean) else float(r.coverage_mean),
         "risk": None if pd.isna(r.risk_mean) else float(r.risk_mean),
         "n_certified": int(r.n_certified), "n_splits": int(r.n_splits)}
        for r in pre.itertuples(index=False)
    ]
    series = list(dict.fromkeys(pre["series"]))
    body = []
    for s in series:
        row = next(r for r in rows if r["series"] == s and r["alpha"] == initial)
        cells = "".join(
            f'<td data-series="{html.escape(s)}" data-metric="{m}" '
            f'data-value="{"" if row[m] is None else repr(row[m])}">{_fmt(row[m])}</td>'
            for m in ("coverage", "risk")
        ) + f'<td data-series="{html.escape(s)}" data-metric="n_certified" data-value="{row["n_certified"]}">' \
            f'{row["n_certified"]} / {row["n_splits"]}</td>'
        body.append(f"<tr><th scope=\"row\">{html.escape(s)}</th>{cells}</tr>")
    data_json = json.dumps(rows, sort_keys=True, allow_nan=False).replace("</", "<\\/")
    spec_json = json.dumps(spec, sort_keys=True).replace("</", "<\\/")
    snippet = (
        "const root = document.getElementById(" + json.dumps(element_id) + ");\n"
        "const rows = JSON.parse(root.querySelector('script.pg-data').textContent);\n"
        "const fmt = (v) => (v === null || v === undefined) ? '–' : v.toFixed(3);\n"
        "function update(a) {\n"
        "  const al = Math.round(a * 100) / 100;\n"
        "  root.dataset.alpha = al.toFixed(2);\n"
        "  root.querySelector('.pg-alpha').textContent = al.toFixed(2);\n"
        "  for (const td of root.querySelectorAll('td[data-series]')) {\n"
        "    const r = rows.find((x) => x.series === td.dataset.series && Math.abs(x.alpha - al) < 1e-9);\n"
        "    if (!r) continue;\n"
        "    const v = r[td.dataset.metric];\n"
        "    td.dataset.value = (v === null || v === undefined) ? '' : String(v);\n"
        "    td.textContent = td.dataset.metric === 'n_certified' ? `${v} / ${r.n_splits}` : fmt(v);\n"
        "  }\n"
        "}\n"
        "const spec = " + spec_json + ";\n"
        "vegaEmbed(root.querySelector('.pg-chart'), spec, {actions: false, renderer: 'svg'}).then((res) => {\n"
        "  res.view.addSignalListener('alpha', (_, v) => update(v));\n"
        "  update(res.view.signal('alpha'));\n"
        "  root.dataset.ready = 'true';\n"
        "}).catch((err) => { root.dataset.error = String(err); console.error(err); });\n"
    )
    bundle, code = (js.replace("</script", "<\\/script") for js in (_javascript_bundle(), snippet))
    frag = (
        f'<div id="{html.escape(element_id)}" class="probeguard-alpha-explorer" data-alpha="{initial:.2f}" '
        f'data-ready="false">\n'
        f'<figure class="probeguard-figure" id="fig-alpha-explorer">\n'
        f'<div class="pg-chart" role="img" aria-label="{html.escape(text.alt)}"></div>\n'
        f'<figcaption><strong>{html.escape(text.number)}.</strong> {html.escape(text.caption)} '
        f'Shown: α = <span class="pg-alpha">{initial:.2f}</span>.</figcaption>\n</figure>\n'
        f'<table class="pg-readout"><thead><tr><th>stratum · score</th><th>certified coverage</th>'
        f'<th>realized risk</th><th>splits certified</th></tr></thead>\n<tbody>{"".join(body)}</tbody></table>\n'
        f'<script type="application/json" class="pg-data">{data_json}</script>\n'
        # module scripts run in document order: the bundle defines window.vegaEmbed, then the snippet uses it
        f'<script type="module">{bundle}</script>\n'
        f'<script type="module">{code}</script>\n</div>\n'
    )
    if not full_document:
        return frag
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{html.escape(title)}</title></head>\n<body>\n{frag}</body></html>\n"
    )


# --------------------------------------------------------------------------- Jupyter widget
def alpha_widget(table: pd.DataFrame, n_splits: int = 50, seed: int = SEED, initial: float = 0.15,
                 variants: Sequence[ScoreVariant] = SCORES, delta: float = 0.05) -> Any:
    """An ipywidgets slider over alpha (0.01..0.30) that recomputes certified coverage and realized
    risk live through :func:`precompute` (hence :func:`certify.repeated_splits`) and shows the
    table for that alpha. Returns the widget box (display it in Jupyter)."""
    import ipywidgets as w
    from IPython.display import display

    slider = w.FloatSlider(value=initial, min=0.01, max=0.30, step=0.01, description="α", readout_format=".2f",
                           continuous_update=False)
    out = w.Output()

    def show(change: Any = None) -> None:
        a = round(float(slider.value), 2)
        res = precompute(table, alphas=[a], n_splits=n_splits, seed=seed, variants=variants, delta=delta)
        box.result = res
        with out:
            out.clear_output(wait=True)
            display(res[["series", "coverage_mean", "coverage_sd", "risk_mean", "risk_sd", "n_certified",
                         "violations"]].round(3))

    box = w.VBox([slider, out])
    box.slider = slider
    box.output = out
    slider.observe(show, names="value")
    show()
    return box
