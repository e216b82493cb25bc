"""This release beside the paper: every number a notebook put beside the paper's, sorted by how
far it departs (the page ``notebooks/departures.md``).

The builder reads what the other notebooks wrote (``book/_generated/<name>/*.csv``), never a
number of its own:

* a CSV with ``value`` and ``paper`` columns (a :func:`probeguard_core.paper.beside_paper`
  frame) contributes its rows where both are known; the paper's ``source`` of each CSV is
  found in ``data/paper/reported.csv`` (the one source whose cell at those keys holds that value);
* a certification summary (``certification_methods.csv``, ``other_backbones.csv``,
  ``pooled.csv``: ``coverage_mean``, ``risk_mean`` ... per arm, stratum and alpha) is put in the
  paper's long keys with :func:`probeguard_core.tables.certification.certification_long` and set beside §4.4
  exactly as its notebook does (the pooled stream of MedQA + MMLU-Pro med: ``dataset = pooled``,
  which the paper certifies nothing on, at any alpha).

Each row is then marked ``input`` or ``emerged``. On a simulated release a row is an *input* when
the simulator was given that number (``probeguard_core/simulate/params.yaml``: rates, sizes, cost
medians; :data:`INPUT_QUANTITIES` names the parameter), so agreement with the paper proves
nothing; every other number (AUROC, AURC, certified coverage, realized risk ...) *emerged* from
the raw artifacts. On a real release every number emerged. The same definition marks inputs
where the other pages show them (issue 22, point 4): :func:`input_sentence` / :func:`inputs_note`
under a table (``Page.inputs_note``) and ``tables.captioned(..., inputs=)`` in a figure's caption.

How far a row departs (``departure``) is ``|Δ|`` for numbers on a 0-1 scale (AUROC, AURC,
fractions, correlations) and ``|Δ| / |paper|`` for counts, seconds and tokens (``scale`` says which):
:func:`probeguard_core.paper.departure`, the one definition the tables' Δ styling also sizes by.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core.paper import BOUNDED_UNITS, departure
from probeguard_core.tables.inputs import PARAMS, input_parameters

__all__ = [
    "MECHANISMS",
    "Departures",
    "caveats",
    "collect",
    "departures",
    "display",
    "mechanism_anchor",
    "mechanisms_markdown",
]

#: Settings of the analysis, not measurements (e.g. the number of calibration / test splits).
SETTINGS: frozenset[str] = frozenset({"n_splits"})
#: The columns of a certification summary (``certify.summarize`` plus ``arm``).
_CERT_SUMMARY = {"arm", "alpha", "stratum", "coverage_mean", "coverage_sd", "risk_mean", "violations",
                 "n_splits", "n_certified"}
_KEYS = ("backbone", "dataset", "signal", "arm", "stratum", "alpha", "specialty", "dropped_family", "round")


# --------------------------------------------------------------------------- reading the notebooks' outputs
def _reported() -> pd.DataFrame:
    from probeguard_core.paper import load_reported

    return load_reported()


def _same(a: Any, b: Any) -> bool:
    if a is None or (isinstance(a, float) and math.isnan(a)) or a == "":
        return b is None or (isinstance(b, float) and math.isnan(b)) or b == ""
    if isinstance(a, (int, float)) or isinstance(b, (int, float)):
        try:
            return math.isclose(float(a), float(b), abs_tol=1e-9)
        except (TypeError, ValueError):
            return False
    return str(a) == str(b)


def _source_of(rows: pd.DataFrame, reported: pd.DataFrame) -> list[str]:
    """The paper's source of each row: the sources whose cell at the row's keys holds the row's
    paper value; a CSV's rows share the one source common to all of them when there is one."""
    keys = [c for c in ("quantity", *_KEYS) if c in rows.columns]
    values = reported["value"].to_numpy(dtype=float)
    columns = {c: reported[c].to_numpy(dtype=object) for c in keys}
    sources = reported["source"].to_numpy(dtype=object)
    per_row: list[list[str]] = []
    for r in rows.to_dict("records"):
        # the reported rows holding the row's paper value, then those agreeing on every key
        hit = np.flatnonzero(np.abs(values - float(r["paper"])) < 1e-9)
        for c in keys:
            hit = hit[[_same(r[c], v) for v in columns[c][hit]]] if len(hit) else hit
        per_row.append(list(dict.fromkeys(sources[hit])))
    common = set(per_row[0]) if per_row else set()
    for s in per_row[1:]:
        common &= set(s)
    if len(common) == 1:
        return [common.pop()] * len(per_row)
    return [s[0] if s else "" for s in per_row]


def _certification_rows(df: pd.DataFrame, csv: Path, results: Mapping[str, Any]) -> pd.DataFrame:
    """A certification summary beside §4.4, as the certification notebook sets it."""
    from probeguard_core.paper import beside_paper
    from probeguard_core.tables.certification import certification_long

    backbone, dataset = results.get("backbone"), results.get("dataset")
    pooled = csv.stem == "pooled"
    parts = []
    groups = df.groupby("backbone", sort=False) if "backbone" in df.columns else [(backbone, df)]
    for bb, g in groups:
        if bb is None or (dataset is None and not pooled):
            raise ValueError(f"{csv}: a certification summary needs its backbone and dataset "
                             f"(columns, or 'backbone' / 'dataset' in the notebook's results.json)")
        g = g.drop(columns=[c for c in ("backbone", "dataset") if c in g.columns])
        long = certification_long(g).assign(backbone=bb, dataset="pooled" if pooled else dataset)
        on = ["dataset", "arm", "stratum", "quantity"] + ([] if pooled else ["alpha"])
        parts.append(beside_paper(long, on=on, source="§4.4", backbone=bb, dataset="pooled" if pooled else dataset)
                     .assign(source="§4.4"))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _read_results(folder: Path) -> dict[str, Any]:
    import json

    path = folder / "results.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def collect(generated: str | Path, names: Sequence[str]) -> tuple[pd.DataFrame, list[str]]:
    """Every number beside the paper in the outputs of notebooks ``names`` under ``generated``;
    returns (rows, the notebooks whose outputs are missing). Rows: ``page``, ``file``,
    ``source``, ``quantity``, the key columns, ``unit``, ``value``, ``paper``, ``diff``."""
    from probeguard_core.paper import unit_of

    generated = Path(generated)
    reported = _reported()
    frames, missing = [], []
    for name in names:
        folder = generated / name
        if not folder.is_dir():
            missing.append(name)
            continue
        results = _read_results(folder)
        for csv in sorted(folder.glob("*.csv")):
            df = pd.read_csv(csv, keep_default_na=True)
            if {"value", "paper"} <= set(df.columns):
                rows = df[pd.to_numeric(df["value"], errors="coerce").notna() & df["paper"].notna()].copy()
                if rows.empty or "quantity" not in rows.columns:
                    continue
                rows["source"] = _source_of(rows, reported)
            elif _CERT_SUMMARY <= set(df.columns):
                if df.empty:
                    continue
                rows = _certification_rows(df, csv, results)
                rows = rows[rows["paper"].notna()].copy()
            else:
                continue
            if rows.empty:
                continue
            rows["page"], rows["file"] = name, f"{name}/{csv.name}"
            frames.append(rows)
    if not frames:
        return pd.DataFrame(columns=["page", "file", "source", "quantity", *_KEYS, "unit", "value", "paper", "diff"]), missing
    out = pd.concat(frames, ignore_index=True)
    for c in _KEYS:
        if c not in out.columns:
            out[c] = None
    if "unit" not in out.columns:
        out["unit"] = None
    out["unit"] = [u if isinstance(u, str) and u else unit_of(q) for u, q in zip(out["unit"], out["quantity"])]
    out["value"] = out["value"].astype(float)
    out["paper"] = out["paper"].astype(float)
    out["diff"] = out["value"] - out["paper"]
    # the same number shown on two pages (e.g. Table 2 and the Qwen3-8B rows of Table 5) once
    out = out.drop_duplicates(subset=["source", "quantity", *_KEYS, "value"], keep="first")
    return out[["page", "file", "source", "quantity", *_KEYS, "unit", "value", "paper", "diff"]], missing


# --------------------------------------------------------------------------- the table
def _what(r: Mapping[str, Any]) -> str:
    from probeguard_core.paper import display_label

    parts = [display_label("quantity", r["quantity"])]
    for c in ("signal", "arm", "dataset", "backbone", "stratum", "specialty", "dropped_family", "round", "alpha"):
        v = r.get(c)
        if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
            continue
        label = display_label(c, v)
        parts.append({"alpha": f"α = {label}", "round": f"round {label}", "dropped_family": f"without {label}",
                      "stratum": f"stratum {label}"}.get(c, label))
    return ", ".join(parts)


@dataclass(frozen=True)
class Departures:
    """The page's data: the sorted rows, the notebooks whose outputs were missing, the release."""

    rows: pd.DataFrame
    missing: list[str]
    simulated: bool
    inputs: dict[str, list[str]]

    def count(self, role: str) -> int:
        return int((self.rows["role"] == role).sum())


def departures(generated: str | Path, names: Sequence[str], *, simulated: bool,
               params: str | Path = PARAMS) -> Departures:
    """The departures of a release: :func:`collect`, then each row's role (``input`` / ``emerged``
    / ``setting``) and ``departure``, sorted by departure (largest first, stable)."""
    rows, missing = collect(generated, names)
    inputs = input_parameters(params) if simulated else {}
    rows = rows.copy()
    rows["role"] = ["setting" if q in SETTINGS else "input" if q in inputs else "emerged" for q in rows["quantity"]]
    rows["set_by"] = ["; ".join(inputs.get(q, [])) for q in rows["quantity"]]
    bounded = rows["unit"].isin(BOUNDED_UNITS)
    rows["departure"] = [departure(d, p, u) for d, p, u in zip(rows["diff"], rows["paper"], rows["unit"])]
    rows["scale"] = ["absolute" if b else "relative" for b in bounded]
    rows["what"] = [_what(r) for r in rows.to_dict("records")]
    rows = rows.sort_values("departure", ascending=False, kind="mergesort").reset_index(drop=True)
    return Departures(rows, missing, simulated, inputs)


def display(d: Departures, role: str | None = None, top: int | None = None) -> Any:
    """The rows (of one ``role``; the ``top`` first) as an ours | paper | Δ table for reading."""
    from probeguard_core.tables.display import long_beside, note

    rows = d.rows if role is None else d.rows[d.rows["role"] == role]
    if rows.empty:  # e.g. a real release has no simulator inputs, or the pages were not run
        return note(f"No {role or ''} numbers beside the paper on the pages this release ran.".replace("  ", " "),
                    title="None here")
    if top is not None:
        rows = rows.head(top)
    shown = rows.assign(where=rows["source"], departure_shown=[
        f"{x:.3f}" if s == "absolute" else f"{100 * x:.0f}% rel." for x, s in zip(rows["departure"], rows["scale"])])
    shown = shown.rename(columns={"what": "number"}).assign(table=[f.split("/")[-1] for f in rows["file"]])
    return long_beside(shown.reset_index(drop=True), keys=["number", "where"],
                       extra=["departure_shown", "role", "table"]).relabel_index(
        ["number", "in the paper", "ours", "paper", "Δ", "departs by", "role", "our table"], axis="columns")


#: The simulator's mechanisms a claim of the paper rests on (``probeguard_core/simulate/params.yaml``
#: names the parameters), one entry per anchor of the departures page (``#mechanism-<key>``);
#: each claim of ``data/paper_claims.yaml`` names its entry (field ``mechanism``), so a claim that
#: fails on a simulated release links the mechanism that produces the number.
MECHANISMS: dict[str, tuple[str, str]] = {
    "instructed-convergence": (
        "Instructed convergence",
        "Next-round votes follow the vote counts (mechanism.convergence_gamma) and are pulled each round "
        "towards the question's attractor (mechanism.attractor_pull: gold when knowledge-backed, the "
        "misconception otherwise), so the final agreement carries the latent state rather than being at chance."),
    "rationale-mechanisms": (
        "Rationales as discrete mechanisms, read by a stand-in NLI",
        "A vote cites one of a few mechanism phrases (mechanism.knowledge_mechanism_rate, "
        "misconception_reason_pool, uncertain_reason_pool) and the stand-in NLI scores shared and distinct "
        "mechanisms from two Beta laws (nli_shared_beta, nli_distinct_beta), so RSE and the process score "
        "separate the states more sharply than the paper's RSE."),
    "confidence-by-state": (
        "Token likelihood by state",
        "A vote in the uncertain state, or off its question's attractor, is written with a higher per-token "
        "negative log-likelihood (backbones.*.nll_per_token, nll_uncertain_factor), so sequence "
        "log-probability follows correctness instead of being inverted."),
    "probe-keep": (
        "The counter-evidence probe's keep rate",
        "A challenged consensus that holds is kept with a fixed probability per arm (mechanism.probe_hold_keep); "
        "one that collapses is kept with a Beta-drawn probability (probe_collapse_keep_beta) and a re-answer "
        "leaving it lands on the leading alternative (probe_switch_to_lead); flip rates per arm are inputs "
        "(cells.*.flip_wrong and the control arms)."),
    "error-by-round": (
        "Error rate by concluding round (an input)",
        "The error rate of each concluding round is given to the simulator (cells.*.error_by_round), so "
        "agreement with Figure 2 proves nothing."),
    "base-rates": (
        "Unanimous share and error rate (inputs) with the simulated scores",
        "The unanimous share and its error rate are given (cells.*.first_round_unanimity, "
        "cells.*.unanimous_error); what Learn-then-Test certifies follows from them and from how sharply the "
        "simulated scores (above) separate right from wrong, which is far more sharply than in the paper."),
}


def mechanism_anchor(key: str) -> str:
    """The HTML id of mechanism ``key`` on the departures page (``mechanism-<key>``)."""
    if key not in MECHANISMS:
        raise KeyError(f"unknown simulator mechanism {key!r}; known: {sorted(MECHANISMS)}")
    return f"mechanism-{key}"


def mechanisms_markdown() -> str:
    """The mechanisms as the departures page lists them, each a block with its anchor
    (:func:`mechanism_anchor`) that a failing claim's verdict line links."""
    import html

    return "\n\n".join(f'<p id="{mechanism_anchor(k)}"><strong>{html.escape(title)}.</strong> '
                        f"{html.escape(text)}</p>" for k, (title, text) in MECHANISMS.items())


def caveats(release: str | Path) -> str:
    """The release DATASHEET's caveats (its section "What this release can and cannot show"), as
    Markdown; a note when the release has no DATASHEET or no such section."""
    path = Path(release) / "DATASHEET.md"
    if not path.is_file():
        return f"The release has no `DATASHEET.md` ({path}), so no caveats are recorded."
    text = path.read_text(encoding="utf-8")
    m = re.search(r"^## What this release can and cannot show\s*$(.*?)(?=^## |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    if not m:
        return f"`{path.name}` has no section 'What this release can and cannot show'."
    text = m.group(1).strip()
    if _provenance(Path(release)) == "simulated":  # the anchors a failing claim's verdict line links
        text += ("\n\nThe simulator's mechanisms behind the paper's claims (a claim that does not hold on "
                 "this release links the one that produces its number):\n\n" + mechanisms_markdown())
    return text


def _provenance(release: Path) -> str | None:
    import json

    try:
        return str(json.loads((release / "manifest.json").read_text(encoding="utf-8")).get("provenance"))
    except (OSError, ValueError, AttributeError):
        return None
