"""Deployment monitoring: an anytime-valid drift alarm per certified stratum, and recalibration (§5.3).

A certificate (Eq. 5) promises that, with probability >= 1 - delta over the calibration draw,
the error rate among the questions each certified stratum answers is at most alpha -- as long
as deployment questions come from the calibration distribution (Assumption 1).  As newly
labelled questions arrive, :func:`monitor` tracks, for every stratum that holds a threshold,
the errors among the questions it answered, and tests H0: risk <= alpha after *every*
question with an e-process, so that looking after each batch does not inflate false alarms.

The test (written once here): the one-sided **beta-binomial mixture martingale** of Howard,
Ramdas, McAuliffe and Sekhon (2021), "Time-uniform, nonparametric, nonasymptotic confidence
sequences", Ann. Statist. 49(2), 1055-1080 (conjugate mixture; Robbins 1970).  With S_n errors
among n answered questions and a Beta(a, b) prior truncated to [alpha, 1],

    M_n(alpha) = int_alpha^1 (p/alpha)^S_n ((1-p)/(1-alpha))^(n-S_n) dBeta(p; a, b) / P_Beta(p >= alpha)
               = B(a+S_n, b+n-S_n) sf_Beta(alpha; a+S_n, b+n-S_n) / (B(a, b) sf_Beta(alpha; a, b))
                 / (alpha^S_n (1-alpha)^(n-S_n)).

For every true risk p0 <= alpha each (p/alpha)^S ((1-p)/(1-alpha))^F with p >= alpha is a
non-negative supermartingale with mean <= 1, hence so is the mixture, and Ville's inequality
gives P(exists n: M_n >= 1/level) <= level.  The alarm fires the first time M_n(alpha) >=
1/level; the timeline shows the matching lower confidence bound LCB_n = inf{p0 : M_n(p0) <
1/level} (a confidence sequence: the risk is above it at every n at once with probability
>= 1 - level), which then lies above alpha.  A union-bound Hoeffding sequence would be valid
too but far looser.  No PyPI library installs here for this (``confseq`` ships no wheel and
needs a C++ toolchain), so it is written once, vectorized, below.

Recalibration (:func:`recalibrate`): the same Learn-then-Test (:func:`certify.certify_logs`, the
old certificate's alpha, delta, grid and stratification) on the most recent ``window``
labelled questions, with the data it used recorded in the new certificate's
``recalibration`` field.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from probeguard_core import certify as C
from probeguard_core import logs as L
from probeguard_core.deploy.apply import apply_certificate
from probeguard_core.deploy.certificate import DeploymentCertificate, validate_certificate
from probeguard_core.deploy.certify import certify_logs
from probeguard_core.deploy.errors import DeployError
from probeguard_core.deploy.inputs import Inputs, load_inputs
from probeguard_core.features import is_correct
from probeguard_core.fileio import jsonable

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_PRIOR_STRENGTH",
    "MonitorResult",
    "StreamBatch",
    "confidence_lower_bound",
    "log_evalue",
    "monitor",
    "recalibrate",
    "stream_experiment",
    "timeline_figure",
    "timeline_html",
    "timeline_png",
    "window_inputs",
]

DEFAULT_LEVEL = 0.05
#: a + b of the Beta prior, centred on alpha (a = alpha * r, b = (1 - alpha) * r).
DEFAULT_PRIOR_STRENGTH = 10.0
MONITOR_SCHEMA_VERSION = 1
METHOD = ("one-sided beta-binomial mixture martingale (Howard et al. 2021, Ann. Statist. 49(2)); "
          "alarm when M_n(alpha) >= 1/level (Ville's inequality)")


# ---------------------------------------------------------------------------------- the test
def _prior(p0: np.ndarray, strength: float) -> tuple[np.ndarray, np.ndarray]:
    return p0 * strength, (1.0 - p0) * strength


def log_evalue(errors: np.ndarray | int, n: np.ndarray | int, p0: np.ndarray | float,
               prior_strength: float = DEFAULT_PRIOR_STRENGTH) -> np.ndarray:
    """log M_n(p0) of the one-sided beta-binomial mixture for H0: risk <= p0 (vectorized).

    ``errors`` = S_n and ``n`` = answered questions so far; ``p0`` in (0, 1).  The prior is
    Beta(p0 r, (1 - p0) r) truncated to [p0, 1], r = ``prior_strength``.  log M_0 = 0.

    >>> float(log_evalue(0, 0, 0.1))
    0.0
    >>> bool(log_evalue(30, 60, 0.1) > math.log(20))  # half wrong where 10% is promised
    True
    """
    S = np.asarray(errors, dtype=float)
    N = np.asarray(n, dtype=float)
    p = np.asarray(p0, dtype=float)
    F = N - S
    a, b = _prior(p, prior_strength)
    num = special.betaln(a + S, b + F) + stats.beta.logsf(p, a + S, b + F)
    den = special.betaln(a, b) + stats.beta.logsf(p, a, b)
    return num - den - S * np.log(p) - F * np.log1p(-p)


def confidence_lower_bound(errors: np.ndarray, n: np.ndarray, level: float = DEFAULT_LEVEL,
                           prior_strength: float = DEFAULT_PRIOR_STRENGTH, iters: int = 48) -> np.ndarray:
    """LCB_n = inf{p0 : M_n(p0) < 1/level} for every n at once (bisection, vectorized); 0 before any data."""
    S = np.asarray(errors, dtype=float)
    N = np.asarray(n, dtype=float)
    thr = math.log(1.0 / level)
    lo = np.full(S.shape, 1e-9)
    hi = np.where(N > 0, np.clip(S / np.maximum(N, 1), 1e-9, 1 - 1e-9), 1e-9)  # never rejected at the MLE
    rejected_lo = log_evalue(S, N, lo, prior_strength) >= thr
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        rej = log_evalue(S, N, mid, prior_strength) >= thr
        lo = np.where(rej, mid, lo)
        hi = np.where(rej, hi, mid)
    return np.where(rejected_lo & (N > 0), lo, 0.0)


# ---------------------------------------------------------------------------------- the stream
@dataclass
class StreamBatch:
    """One batch of newly labelled questions, in time order (a logs file and its records)."""

    label: str
    logs: list[L.QuestionLog]
    probe: list[L.ProbeRecord] | None = None
    nli: list[L.NLIRecord] | None = None
    sha256: str | None = None


@dataclass
class MonitorResult:
    """Per certified stratum: the answered questions in stream order with S_n, n, log M_n, LCB_n."""

    alpha: float
    level: float
    prior_strength: float
    certificate_sha256: str | None
    batches: list[dict[str, Any]]
    series: pd.DataFrame  # stratum, position, batch, qid, error, n, errors, log_e, lcb
    n_questions: int
    strata: list[str]
    alarms: dict[str, dict[str, Any]] = field(default_factory=dict)

    def summary(self) -> pd.DataFrame:
        """One row per certified stratum: answered, errors, risk, last LCB, alarm position and excess."""
        rows = []
        for s in self.strata:
            part = self.series[self.series["stratum"] == s]
            last = part.iloc[-1] if len(part) else None
            al = self.alarms.get(s)
            rows.append({
                "stratum": s, "answered": len(part), "errors": int(part["error"].sum()) if len(part) else 0,
                "risk": float(part["error"].mean()) if len(part) else math.nan,
                "lcb_last": float(last["lcb"]) if last is not None else 0.0, "alpha": self.alpha,
                "alarm": al is not None, "alarm_position": al["position"] if al else None,
                "alarm_answered": al["n_answered"] if al else None, "alarm_excess": al["excess"] if al else None,
            })
        return pd.DataFrame(rows)

    def to_json(self) -> dict[str, Any]:
        """``monitor.json``: settings, batches, per-stratum totals and alarms."""
        return jsonable({
            "schema_version": MONITOR_SCHEMA_VERSION, "method": METHOD, "alpha": self.alpha, "level": self.level,
            "prior": {"family": "Beta(alpha r, (1 - alpha) r) truncated to [alpha, 1]", "r": self.prior_strength},
            "certificate_sha256": self.certificate_sha256, "n_questions": self.n_questions, "batches": self.batches,
            "strata": self.summary().to_dict("records"), "alarms": self.alarms,
        })

    def alarm_lines(self) -> list[str]:
        """One line per alarmed stratum naming it, when, and by how much."""
        out = []
        for s, al in self.alarms.items():
            out.append(f"ALARM stratum {s}: at question {al['position']} of the stream (batch {al['batch']} "
                       f"{al['batch_label']}, qid {al['qid']}), after {al['n_answered']} answered with "
                       f"{al['n_errors']} errors: observed risk {al['risk']:.4f} ({al['risk'] - self.alpha:+.4f} over "
                       f"alpha); risk lower bound {al['lcb']:.4f} > alpha {self.alpha:g} by {al['excess']:.4f} "
                       f"(e-value {al['e_value']:.3g} >= 1/level = {1 / self.level:g})")
        return out


def _answered_errors(cert: Mapping[str, Any], batch: StreamBatch) -> pd.DataFrame:
    table = apply_certificate(cert, batch.logs, batch.probe, batch.nli)
    table["error"] = [not is_correct(log) for log in batch.logs]
    return table


def monitor(cert: Mapping[str, Any], batches: Sequence[StreamBatch], *, level: float = DEFAULT_LEVEL,
            prior_strength: float = DEFAULT_PRIOR_STRENGTH) -> MonitorResult:
    """Run the anytime-valid test of H0: risk <= alpha on every certified stratum over ``batches``.

    Gold labels are the new logs' ``gold`` fields (the clinician's confirmation or correction).
    An alarm is raised the first time M_n(alpha) >= 1/level; it records the stratum, the stream
    position, batch and qid, the counts, LCB_n and its excess over alpha.
    """
    cert = validate_certificate(cert)
    level = C.check_level("level", level, DeployError)
    if not prior_strength > 0 or not math.isfinite(prior_strength):
        raise DeployError(f"prior_strength must be a positive number, got {prior_strength!r}")
    if not batches:
        raise DeployError("no batches to monitor")
    alpha = float(cert["alpha"])
    strata = [s["name"] for s in cert["strata"] if s["threshold"] is not None]
    frames, info, offset = [], [], 0
    for b_i, batch in enumerate(batches, start=1):
        t = _answered_errors(cert, batch)
        t["position"] = offset + np.arange(1, len(t) + 1)
        t["batch"] = b_i
        t["batch_label"] = batch.label
        offset += len(t)
        frames.append(t)
        info.append({"batch": b_i, "label": batch.label, "sha256": batch.sha256, "n_questions": len(t),
                     "n_answered": int((t["decision"] == "answer").sum())})
    allq = pd.concat(frames, ignore_index=True)
    ans = allq[(allq["decision"] == "answer") & allq["stratum"].isin(strata)].copy()
    parts = []
    alarms: dict[str, dict[str, Any]] = {}
    thr = math.log(1.0 / level)
    for s in strata:
        p = ans[ans["stratum"] == s][["stratum", "position", "batch", "batch_label", "qid", "error"]].copy()
        p["n"] = np.arange(1, len(p) + 1)
        p["errors"] = np.cumsum(p["error"].to_numpy(dtype=int))
        p["log_e"] = log_evalue(p["errors"].to_numpy(), p["n"].to_numpy(), alpha, prior_strength) if len(p) else []
        p["lcb"] = confidence_lower_bound(p["errors"].to_numpy(), p["n"].to_numpy(), level, prior_strength) if len(p) else []
        hit = np.flatnonzero(p["log_e"].to_numpy() >= thr)
        if hit.size:
            r = p.iloc[int(hit[0])]
            alarms[s] = {"stratum": s, "position": int(r["position"]), "batch": int(r["batch"]),
                         "batch_label": str(r["batch_label"]), "qid": str(r["qid"]), "n_answered": int(r["n"]),
                         "n_errors": int(r["errors"]), "risk": int(r["errors"]) / int(r["n"]),
                         "lcb": float(r["lcb"]), "excess": float(r["lcb"]) - alpha,
                         "e_value": float(math.exp(min(float(r["log_e"]), 700.0)))}
        parts.append(p)
    series = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["stratum", "position", "batch", "batch_label", "qid", "error", "n", "errors", "log_e", "lcb"])
    return MonitorResult(alpha, level, float(prior_strength), cert.get("content_sha256"), info, series,
                         len(allq), strata, alarms)


def window_inputs(batches: Sequence[StreamBatch], window: int) -> tuple[Inputs, dict[str, Any]]:
    """The most recent ``window`` labelled questions of ``batches`` with their records, and what was used."""
    if not (isinstance(window, int) and not isinstance(window, bool) and window >= 1):
        raise DeployError(f"window must be a positive integer, got {window!r}")
    tagged = [(b, log) for b in batches for log in b.logs]
    if not tagged:
        raise DeployError("no labelled questions to recalibrate on")
    used = tagged[-window:]
    qids = {log.qid for _, log in used}
    logs = [log for _, log in used]
    probe = [r for b in batches for r in (b.probe or []) if r.qid in qids] if any(b.probe for b in batches) else None
    nli = [r for b in batches for r in (b.nli or []) if r.qid in qids] if any(b.nli for b in batches) else None
    per_batch: dict[str, int] = {}
    for b, _ in used:
        per_batch[b.label] = per_batch.get(b.label, 0) + 1
    record = {
        "window": window, "n_questions": len(logs), "first_qid": logs[0].qid, "last_qid": logs[-1].qid,
        "batches": [{"label": b.label, "sha256": b.sha256, "n_used": per_batch[b.label]}
                    for b in batches if b.label in per_batch],
    }
    files = [{"role": "logs", "path": b.label, "sha256": b.sha256 or ""} for b in batches if b.label in per_batch]
    return Inputs(logs, probe, nli, files), record


def recalibrate(cert: Mapping[str, Any], batches: Sequence[StreamBatch], window: int, *,
                created_by: str | None = None, reason: str = "requested"
                ) -> tuple[DeploymentCertificate, Inputs]:
    """A fresh certificate from the most recent ``window`` labelled questions of ``batches``.

    Same Learn-then-Test as the original (its alpha, delta, grid, stratification and dataset
    rule); the new certificate's ``recalibration`` field records the reason, the window, the
    questions used (first and last qid, per batch counts and sha256) and the certificate it
    replaces.  Returns the certificate and the window's inputs (for its report and dossiers).
    """
    cert = validate_certificate(cert)
    inputs, record = window_inputs(batches, window)
    record = {"reason": reason, **record, "replaces_certificate_sha256": cert.get("content_sha256")}
    new = certify_logs(
        inputs, alpha=cert["alpha"], delta=cert["delta"], stratify_by=cert["stratify_by"],
        allow_mixed_datasets=bool(cert.get("allow_mixed_datasets", False)), grid=cert["grid"],
        created_by=created_by or "probeguard_core.deploy.monitor.recalibrate", recalibration=record,
    )
    return new, inputs


# ---------------------------------------------------------------------------------- timeline
_COLORS = ("#08519c", "#d94801", "#238b45", "#6a51a3", "#8c6d31", "#636363")


def timeline_html(result: MonitorResult, title: str = "ProbeGuard monitor") -> str:
    """Self-contained HTML (inline SVG, no script, same CSP as the report): LCB_n per stratum against alpha."""
    import markupsafe

    esc = markupsafe.escape
    W, H, ml, mr, mt, mb = 720, 320, 58, 16, 14, 44
    pw, ph = W - ml - mr, H - mt - mb
    xmax = max(1, result.n_questions)
    s = result.series
    ymax = max(0.05, float(np.nanmax(s["lcb"])) if len(s) else 0.0, result.alpha * 2,
               float(s.groupby("stratum")["error"].mean().max()) if len(s) else 0.0)
    ymax = min(1.0, ymax * 1.1)

    def x(v: float) -> float:
        return ml + pw * v / xmax

    def y(v: float) -> float:
        return mt + ph * (1 - min(float(v), ymax) / ymax)  # clipped to the frame

    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" role="img" '
             f'aria-label="{esc(title)}: risk lower bound per stratum over the stream"><title>{esc(title)}</title>'),
             f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="#fafafa" stroke="#999"/>']
    pos = 0
    for b in result.batches[:-1]:
        pos += b["n_questions"]
        parts.append(f'<line x1="{x(pos):.1f}" y1="{mt}" x2="{x(pos):.1f}" y2="{mt + ph}" stroke="#ddd"/>')
    for k in range(5):
        v = ymax * k / 4
        parts.append(f'<text x="{ml - 6}" y="{y(v) + 4:.1f}" font-size="11" text-anchor="end">{v:.2f}</text>')
    for k in range(5):
        v = xmax * k / 4
        parts.append(f'<text x="{x(v):.1f}" y="{mt + ph + 16}" font-size="11" text-anchor="middle">{v:.0f}</text>')
    parts.append(f'<text x="{ml + pw / 2}" y="{H - 8}" font-size="12" text-anchor="middle">questions streamed</text>')
    parts.append(f'<text x="14" y="{mt + ph / 2}" font-size="12" text-anchor="middle" '
                 f'transform="rotate(-90 14 {mt + ph / 2})">risk among answered</text>')
    parts.append(f'<line x1="{ml}" y1="{y(result.alpha):.1f}" x2="{ml + pw}" y2="{y(result.alpha):.1f}" '
                 f'stroke="#c0392b" stroke-dasharray="6 4"/><text x="{ml + pw - 4}" y="{y(result.alpha) - 4:.1f}" '
                 f'font-size="11" text-anchor="end" fill="#c0392b">α = {result.alpha:g}</text>')
    legend = []
    for i, st in enumerate(result.strata):
        c = _COLORS[i % len(_COLORS)]
        p = s[s["stratum"] == st]
        if len(p):
            pts = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in zip(p["position"], p["lcb"]))
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1.8"/>')
            run = p["errors"] / p["n"]
            pts = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in zip(p["position"], run))
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="1" stroke-opacity=".45"/>')
        al = result.alarms.get(st)
        if al:
            parts.append(f'<circle cx="{x(al["position"]):.1f}" cy="{y(al["lcb"]):.1f}" r="5" fill="none" '
                         f'stroke="#c0392b" stroke-width="2"/>')
        legend.append(f'<li><span style="color:{c}">■</span> {esc(st)}: lower confidence bound (thick), '
                      f'running risk (thin){" — alarm at question " + str(al["position"]) if al else ", no alarm"}</li>')
    parts.append("</svg>")
    rows = "".join(f"<li>{esc(line)}</li>" for line in result.alarm_lines()) or "<li>No alarm.</li>"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><link rel=\"icon\" href=\"data:,\">"
        f"<title>{esc(title)}</title><style>body{{font-family:system-ui,sans-serif;max-width:760px;margin:1.5rem auto;"
        "padding:0 1rem;color:#222}} svg{{width:100%;height:auto}} li{{margin:.2rem 0}}</style></head><body>"
        f"<h1>{esc(title)}</h1><p>Anytime-valid test of H0: risk ≤ α = {result.alpha:g} per certified stratum "
        f"(level {result.level:g}; {esc(METHOD)}). {result.n_questions} questions in {len(result.batches)} batches "
        "(grey lines: batch boundaries).</p>"
        + "".join(parts) + f"<ul>{''.join(legend)}</ul><h2>Alarms</h2><ul>{rows}</ul></body></html>\n"
    )


def timeline_figure(result: MonitorResult, ax: Any = None, title: str | None = None) -> Any:
    """Matplotlib figure of the timeline (LCB_n and running risk per stratum, alpha, alarms)."""
    import matplotlib

    if ax is None:
        matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = (plt.subplots(figsize=(7.5, 3.4)) if ax is None else (ax.figure, ax))
    s = result.series
    for i, st in enumerate(result.strata):
        p = s[s["stratum"] == st]
        c = _COLORS[i % len(_COLORS)]
        ax.plot(p["position"], p["lcb"], color=c, lw=1.8, label=f"{st}: lower confidence bound")
        ax.plot(p["position"], p["errors"] / p["n"], color=c, lw=0.9, alpha=0.45, label=f"{st}: running risk")
        al = result.alarms.get(st)
        if al:
            ax.plot([al["position"]], [al["lcb"]], "o", mfc="none", mec="#c0392b", ms=9, mew=2,
                    label=f"{st}: alarm at question {al['position']}")
    ax.axhline(result.alpha, color="#c0392b", ls="--", lw=1, label=f"α = {result.alpha:g}")
    ax.set_xlabel("questions streamed")
    ax.set_ylabel("risk among answered")
    ax.set_xlim(0, max(1, result.n_questions))
    # the first few answered questions make the running risk jump to 0 or 1: frame the bound and alpha
    finals = [float((p["errors"] / p["n"]).iloc[-1]) for _, p in s.groupby("stratum")] if len(s) else [0.0]
    top = max(3 * result.alpha, 1.4 * float(s["lcb"].max()) if len(s) else 0.0, 1.25 * max(finals))
    ax.set_ylim(0, min(1.0, top))
    ax.legend(fontsize=8, loc="upper left", frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def timeline_png(result: MonitorResult) -> bytes:
    """PNG bytes of :func:`timeline_figure` (deterministic metadata)."""
    import io

    import matplotlib.pyplot as plt

    fig = timeline_figure(result)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def batches_from_files(logs: Sequence[str | os.PathLike[str]], probe: Sequence[str | os.PathLike[str]] | None,
                       nli: Sequence[str | os.PathLike[str]] | None) -> list[StreamBatch]:
    """Read a labelled stream: one batch per logs file (time order); probe / NLI records joined by qid."""
    inputs = load_inputs(list(logs), probe, nli)
    sha = [f["sha256"] for f in inputs.files if f["role"] == "logs"]
    out = []
    for i, path in enumerate(logs):
        part = [g for g, src in zip(inputs.logs, inputs.log_sources) if src == i]
        q = {g.qid for g in part}
        out.append(StreamBatch(str(path), part,
                               None if inputs.probe is None else [r for r in inputs.probe if r.qid in q],
                               None if inputs.nli is None else [r for r in inputs.nli if r.qid in q], sha[i]))
    return out


# ---------------------------------------------------------------------------------- experiments
@dataclass
class StreamExperiment:
    """Alarms over simulated streams (:mod:`probeguard_core.simulate.drift`) under one schedule."""

    shift: float
    change_at: int
    length: int
    n_streams: int
    level: float
    alarms: pd.DataFrame  # stream seed, alarm (bool), position, n_answered, delay (questions after change_at)

    def false_alarm(self) -> dict[str, Any]:
        """Share of streams that alarmed, with its exact one-sided 95% binomial upper bound."""
        k = int(self.alarms["alarm"].sum())
        ci = stats.binomtest(k, self.n_streams, self.level, alternative="less").proportion_ci(0.95, method="exact")
        return {"streams": self.n_streams, "alarms": k, "rate": k / self.n_streams, "upper_95": float(ci.high),
                "nominal": self.level, "holds": bool(ci.high <= self.level) or k / self.n_streams <= self.level}

    def delay(self) -> dict[str, Any]:
        """Detection delay after the change point, in questions streamed and in answered questions."""
        hit = self.alarms[self.alarms["alarm"]]
        d = hit["delay"].to_numpy(dtype=float)
        return {"streams": self.n_streams, "detected": len(hit),
                "median_delay": float(np.median(d)) if len(d) else None,
                "q25": float(np.quantile(d, 0.25)) if len(d) else None,
                "q75": float(np.quantile(d, 0.75)) if len(d) else None,
                "median_answered_at_alarm": float(hit["n_answered"].median()) if len(hit) else None}


def stream_experiment(cert: Mapping[str, Any], *, n_streams: int, length: int, shift: float = 0.0,
                      change_at: int = 0, seed: int = 42, cell: str = "medqa/qwen3-8b",
                      level: float = DEFAULT_LEVEL, progress: bool = True) -> StreamExperiment:
    """Monitor ``n_streams`` independent simulated streams (seeds ``seed .. seed + n_streams - 1``)."""
    from tqdm.auto import tqdm

    from probeguard_core.simulate.drift import DriftSchedule, drift_stream

    sched = DriftSchedule(shift=shift, change_at=change_at)
    rows = []
    for k in tqdm(range(n_streams), desc=f"streams shift={shift:g}", disable=not progress, leave=False):
        bs = drift_stream(length, sched, batch_size=length, seed=seed + k, cell=cell)
        r = monitor(cert, [StreamBatch(f"stream{seed + k}", b.logs, b.probe, b.nli) for b in bs], level=level)
        first = min(r.alarms.values(), key=lambda a: a["position"]) if r.alarms else None
        rows.append({"seed": seed + k, "alarm": first is not None,
                     "position": first["position"] if first else None,
                     "n_answered": first["n_answered"] if first else None,
                     "delay": first["position"] - change_at if first else None})
    return StreamExperiment(shift, change_at, length, n_streams, level, pd.DataFrame(rows))
