"""Self-contained HTML report of a deployment certificate (§3.3, §5.3, Appendix I).

The report shows, per stratum, the calibration risk-coverage curve with 95% Wilson bands
(§4.1), the certified threshold and coverage, the Learn-then-Test grid (Eq. 6, Algorithm 2),
what the rule answers and what it refers to a clinician, the assumption the guarantee rests
on (Assumption 1), and the sha256 of every input.  Charts are inline SVG: the page loads no
script, stylesheet, font or image from anywhere (a Content-Security-Policy forbids it).

All numbers come from the certificate and from :mod:`probeguard_core.metrics`
(``risk_coverage``, ``wilson_interval``); this module only lays them out.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core import metrics
from probeguard_core.deploy.output import atomic_write_text

__all__ = ["render_report", "risk_coverage_svg"]

_TEMPLATE = "report.html.j2"
# plot geometry (SVG user units)
_W, _H = 560, 300
_ML, _MR, _MT, _MB = 56, 16, 14, 42


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "—"
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(float(v)):
            return "—"
        return f"{float(v):.{digits}g}"
    return str(v)


def _pct(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return f"{100.0 * float(v):.1f}%"


def risk_coverage_svg(
    scores: Sequence[float],
    correct: Sequence[bool],
    alpha: float,
    certified_coverage: float | None,
    title: str,
) -> str:
    """Inline SVG of a tie-aware risk-coverage curve with its pointwise 95% Wilson band.

    Curve: :func:`probeguard_core.metrics.risk_coverage`; band: :func:`metrics.wilson_interval`
    of (errors, answered) at every point.  A dashed line marks the target ``alpha`` and a
    vertical line the certified calibration coverage (none when the stratum certifies nothing).
    """
    s = np.asarray(scores, dtype=float)
    c = np.asarray(correct, dtype=bool)
    rc = metrics.risk_coverage(s, c)
    cov = rc["coverage"].to_numpy()
    risk = rc["risk"].to_numpy()
    n_ans = rc["n_answered"].to_numpy()
    errs = np.rint(risk * n_ans).astype(int)
    band = [metrics.wilson_interval(int(k), int(n)) for k, n in zip(errs, n_ans)]
    lo = np.array([b[0] for b in band])
    hi = np.array([b[1] for b in band])

    pw, ph = _W - _ML - _MR, _H - _MT - _MB

    def x(v: float) -> float:
        return _ML + pw * float(v)

    def y(v: float) -> float:
        return _MT + ph * (1.0 - float(v))

    def pts(xs: np.ndarray, ys: np.ndarray) -> str:
        return " ".join(f"{x(a):.2f},{y(b):.2f}" for a, b in zip(xs, ys))

    # risk-coverage as a step-free polyline from the first point; band as a closed polygon
    band_poly = pts(cov, hi) + " " + pts(cov[::-1], lo[::-1])
    parts = [
        (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" '
        f'role="img" aria-label="{_esc(title)}">'),
        f"<title>{_esc(title)}</title>",
        f'<rect x="{_ML}" y="{_MT}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#999"/>',
    ]
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{x(t):.2f}" y1="{_MT + ph}" x2="{x(t):.2f}" y2="{_MT + ph + 4}" stroke="#555"/>')
        parts.append(f'<text x="{x(t):.2f}" y="{_MT + ph + 16}" font-size="11" text-anchor="middle">{t:g}</text>')
        parts.append(f'<line x1="{_ML - 4}" y1="{y(t):.2f}" x2="{_ML}" y2="{y(t):.2f}" stroke="#555"/>')
        parts.append(f'<text x="{_ML - 7}" y="{y(t) + 4:.2f}" font-size="11" text-anchor="end">{t:g}</text>')
    parts.append(f'<text x="{_ML + pw / 2:.1f}" y="{_H - 6}" font-size="12" text-anchor="middle">coverage (share answered)</text>')
    parts.append(
        f'<text x="14" y="{_MT + ph / 2:.1f}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 14 {_MT + ph / 2:.1f})">selective risk</text>'
    )
    parts.append(f'<polygon class="wilson-band" points="{band_poly}" fill="#9ecae1" fill-opacity="0.45" stroke="none"/>')
    if len(cov) == 1:
        parts.append(f'<circle class="rc-curve" cx="{x(cov[0]):.2f}" cy="{y(risk[0]):.2f}" r="3" fill="#08519c"/>')
    else:
        parts.append(f'<polyline class="rc-curve" points="{pts(cov, risk)}" fill="none" stroke="#08519c" stroke-width="1.6"/>')
    parts.append(
        f'<line class="alpha-line" x1="{_ML}" y1="{y(alpha):.2f}" x2="{_ML + pw}" y2="{y(alpha):.2f}" '
        f'stroke="#c0392b" stroke-dasharray="6 4"/>'
    )
    parts.append(f'<text x="{_ML + pw - 4}" y="{y(alpha) - 4:.2f}" font-size="11" text-anchor="end" fill="#c0392b">α = {alpha:g}</text>')
    if certified_coverage is not None and certified_coverage > 0:
        parts.append(
            f'<line class="certified-line" x1="{x(certified_coverage):.2f}" y1="{_MT}" x2="{x(certified_coverage):.2f}" '
            f'y2="{_MT + ph}" stroke="#238b45" stroke-width="1.4"/>'
        )
        right = certified_coverage > 0.7  # keep the label inside the plot
        parts.append(
            f'<text x="{x(certified_coverage) + (-4 if right else 4):.2f}" y="{_MT + 12}" font-size="11" '
            f'text-anchor="{"end" if right else "start"}" fill="#238b45">certified {certified_coverage:.3f}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _esc(text: str) -> str:
    return (
        str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def _votes_text(votes: Mapping[str, int]) -> str:
    """``A 5 · B 3 · null 0`` with zero counts left out (except when every count is zero)."""
    parts = [f"{k} {v}" for k, v in votes.items() if v]
    return " · ".join(parts) if parts else "no votes"


def render_report(
    cert: Mapping[str, Any],
    table: pd.DataFrame,
    path: str | os.PathLike[str] | None = None,
    dossiers: Sequence[Mapping[str, Any]] | None = None,
) -> str:
    """Render the HTML report of ``cert`` (the ``certificate.json`` object) and return it.

    ``table`` is the calibration data's per-question table,
    :func:`probeguard_core.deploy.apply.calibration_table` (the decisions plus ``correct``);
    ``dossiers`` the referral dossiers (:func:`probeguard_core.deploy.dossier.build_dossiers`), shown
    as one collapsible entry per referred question with a qid index.  Every string from the
    inputs is HTML-escaped (Jinja autoescape).  With ``path`` the page is also written there
    atomically.
    """
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("probeguard_core.deploy", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["fmt"] = _fmt
    env.filters["pct"] = _pct
    env.filters["votes"] = _votes_text
    alpha = float(cert["alpha"])

    strata_views = []
    for st in cert["strata"]:
        rows = table[table["stratum"] == st["name"]]
        view: dict[str, Any] = {"st": st, "svg": None, "answered": None, "referred": None}
        n_ans = int((rows["decision"] == "answer").sum())
        n_ref = int(len(rows) - n_ans)
        ans_err = int((~rows.loc[rows["decision"] == "answer", "correct"].astype(bool)).sum())
        ref_err = int((~rows.loc[rows["decision"] != "answer", "correct"].astype(bool)).sum())
        view["answered"] = {"n": n_ans, "errors": ans_err, "risk": ans_err / n_ans if n_ans else None,
                            "wilson": metrics.wilson_interval(ans_err, n_ans) if n_ans else None}
        view["referred"] = {"n": n_ref, "errors": ref_err, "risk": ref_err / n_ref if n_ref else None,
                            "wilson": metrics.wilson_interval(ref_err, n_ref) if n_ref else None}
        scored = rows[np.isfinite(rows["score"].astype(float))]
        if st.get("scored") and len(scored) > 0:
            view["svg"] = risk_coverage_svg(
                scored["score"].astype(float).to_numpy(),
                scored["correct"].astype(bool).to_numpy(),
                alpha,
                st.get("coverage") if st.get("threshold") is not None else None,
                f"Risk-coverage, stratum {st['name']}",
            )
        strata_views.append(view)

    n_total = len(table)
    n_answer = int((table["decision"] == "answer").sum())
    ans = table[table["decision"] == "answer"]
    overall_err = int((~ans["correct"].astype(bool)).sum())
    questions = table.sort_values(["stratum", "decision", "score", "qid"], ascending=[True, True, False, True],
                                  na_position="last")
    html = env.get_template(_TEMPLATE).render(
        cert=cert,
        strata=strata_views,
        n_total=n_total,
        n_answer=n_answer,
        overall_err=overall_err,
        overall_wilson=metrics.wilson_interval(overall_err, n_answer) if n_answer else None,
        questions=questions.to_dict("records"),
        has_unspecified=any(st.get("specialty") == "unspecified" for st in cert["strata"]),
        dossiers=list(dossiers) if dossiers is not None else None,
    )
    if path is not None:
        atomic_write_text(Path(path), html)
    return html
