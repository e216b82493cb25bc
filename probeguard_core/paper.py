"""The paper's reported numbers, and our numbers beside them.

Every number the paper reports in Tables 2, 3, 5-8, Figure 3, §1, §4.2-§4.4, §5.1-§5.2 and
Appendices E, G, I, J is transcribed once, in one tidy long table
``data/paper/reported.csv`` (columns and keys: ``data/paper/README.md``).  This module reads
and validates that table and puts a result of ours beside the paper's value:

>>> from probeguard_core.paper import reported, reported_value, beside_paper
>>> reported_value(source="Table 2", quantity="auroc", signal="process_score", dataset="medqa")
0.696

Table 1 (the comparison of approaches) is categorical and lives in
``data/table1_approaches.csv``; :func:`approaches` reads it.

The CSV ships in the repository (``data/paper/``), not inside an installed wheel; set
``PROBEGUARD_PAPER_DIR`` to the folder holding ``reported.csv`` to read it from elsewhere.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core.logs import ARMS as PROBE_ARMS
from probeguard_core.logs import LogFormatError

__all__ = [
    "ARMS",
    "ARM_LABELS",
    "BACKBONES",
    "BACKBONE_LABELS",
    "COLUMNS",
    "DATASETS",
    "DATASET_LABELS",
    "ENV_VAR",
    "FAMILIES",
    "KEY_COLUMNS",
    "RELEASE_KEYS",
    "SIGNALS",
    "SIGNAL_LABELS",
    "STRATA",
    "BETTER",
    "BOUNDED_UNITS",
    "DEPARTURE_SIZES",
    "UNITS",
    "approaches",
    "beside_paper",
    "departure",
    "departure_size",
    "display_label",
    "format_beside",
    "load_reported",
    "paper_dir",
    "reported",
    "reported_value",
    "unit_of",
]

#: Environment variable naming the folder that holds ``reported.csv``.
ENV_VAR = "PROBEGUARD_PAPER_DIR"
REPORTED_FILE = "reported.csv"
TABLE1_FILE = "table1_approaches.csv"

#: Columns of ``reported.csv`` in file order.
COLUMNS: tuple[str, ...] = (
    "source", "backbone", "dataset", "quantity", "signal", "arm", "stratum", "alpha",
    "specialty", "dropped_family", "round", "value", "unit", "printed", "note",
)
#: Columns that together identify one reported number (unique per row).
KEY_COLUMNS: tuple[str, ...] = (
    "source", "backbone", "dataset", "quantity", "signal", "arm", "stratum", "alpha",
    "specialty", "dropped_family", "round",
)
_STRING_COLUMNS = tuple(c for c in COLUMNS if c not in ("alpha", "round", "value"))

#: Backbone keys (DESIGN 2.1 ``backbone``) and the labels the paper's tables print.
BACKBONES: tuple[str, ...] = (
    "Qwen/Qwen3-8B", "FreedomIntelligence/HuatuoGPT-o1-8B", "meta-llama/Llama-3.1-8B-Instruct",
)
BACKBONE_LABELS: dict[str, str] = {
    "Qwen/Qwen3-8B": "Qwen3-8B",
    "FreedomIntelligence/HuatuoGPT-o1-8B": "HuatuoGPT-o1-8B",
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B",
}
#: Dataset keys (DESIGN 2.1); ``pooled`` = MedQA and MMLU-Pro med calibration sets pooled (§4.4).
DATASETS: tuple[str, ...] = ("medqa", "mmlu_pro_med", "medmcqa", "medxpertqa", "pooled")
#: Signal keys: the snapshot baselines of §4.1, the process score (§3.1), the unanimous-layer
#: signals of §3.2 (rse = Eq. 3, keep_rate = Eq. 4, rse_keep = z(kappa) + z(RSE),
#: rse_keep_logprob = that plus sequence log-prob, §4.3) and hard_se (hard clustering, §5.1).
SIGNALS: tuple[str, ...] = (
    "terminal_agreement", "first_round_agreement", "sequence_logprob", "answer_entropy",
    "verbalized_confidence", "p_true", "process_score", "rse", "keep_rate", "rse_keep",
    "rse_keep_logprob", "hard_se",
)
#: Arm keys: the probe arms of Table 6 (DESIGN 2.2), the certification arms of §4.4 and the
#: classifier swap of Table 7.
ARMS: tuple[str, ...] = tuple(PROBE_ARMS) + (
    "naive_quantile", "global_ltt", "stratified_ltt", "stratified_ltt_augmented", "gbt_classifier",
)
STRATA: tuple[str, ...] = ("S1", "S2", "S3")
#: Feature families of Table 4 / Table 7 (the family a drop-one row removes).
FAMILIES: tuple[str, ...] = ("agreement", "distribution", "minority", "rationale", "retrieval")
#: Units; ``fraction`` values are stored as fractions even where the paper prints percent.
UNITS: tuple[str, ...] = ("fraction", "auroc", "aurc", "correlation", "seconds", "tokens", "count", "parameter")

_VOCAB: dict[str, tuple[str, ...]] = {
    "backbone": BACKBONES, "dataset": DATASETS, "signal": SIGNALS, "arm": ARMS,
    "stratum": STRATA, "dropped_family": FAMILIES, "unit": UNITS,
}
_SOURCE = re.compile(r"^(Table \d+|Figure \d+|§\d+(\.\d+)?|Appendix [A-Z])$")
_SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


# --------------------------------------------------------------------------------------------
# Locating and reading the table
# --------------------------------------------------------------------------------------------

def paper_dir() -> Path:
    """The folder holding ``reported.csv``: ``$PROBEGUARD_PAPER_DIR`` or the repository's ``data/paper``.

    Raises :class:`FileNotFoundError` naming where it looked when ``reported.csv`` is absent.
    """
    override = os.environ.get(ENV_VAR)
    if override:
        folder = Path(override).expanduser()
        where = f"${ENV_VAR}={override}"
    else:
        folder = Path(__file__).resolve().parent.parent / "data" / "paper"
        where = "the repository's data/paper/ (it is not part of an installed wheel)"
    if not (folder / REPORTED_FILE).is_file():
        raise FileNotFoundError(
            f"{folder / REPORTED_FILE} not found (looked in {where}); "
            f"set {ENV_VAR} to the folder holding {REPORTED_FILE}"
        )
    return folder


def _parse_alpha(text: str) -> float:
    if text == "":
        return math.nan
    alpha = float(text)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"must be in (0, 1), got {text!r}")
    return alpha


def _parse_round(text: str) -> int | None:
    if text == "":
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"must be a positive integer, got {text!r}")
    return int(text)


def _read_validated(path: Path) -> pd.DataFrame:
    """Read and validate ``reported.csv``; any defect raises :class:`LogFormatError` (file, line, field)."""
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        try:
            header = next(reader)
        except StopIteration:
            raise LogFormatError(path, None, None, "empty file") from None
        if tuple(header) != COLUMNS:
            raise LogFormatError(path, 1, None, f"columns {header} differ from {list(COLUMNS)}")
        records: list[dict[str, Any]] = []
        seen: dict[tuple, int] = {}
        units: dict[str, tuple[str, int]] = {}
        for cells in reader:
            line = reader.line_num
            if len(cells) != len(COLUMNS):
                raise LogFormatError(path, line, None, f"{len(cells)} cells, expected {len(COLUMNS)}")
            row = dict(zip(COLUMNS, cells))
            for col, vocab in _VOCAB.items():
                if row[col] and row[col] not in vocab:
                    raise LogFormatError(path, line, col, f"unknown key {row[col]!r}; known: {list(vocab)}")
            if not _SOURCE.match(row["source"]):
                raise LogFormatError(path, line, "source", f"{row['source']!r} is not 'Table N', "
                                     "'Figure N', '§N.N' or 'Appendix X'")
            if not _SNAKE.match(row["quantity"]):
                raise LogFormatError(path, line, "quantity", f"{row['quantity']!r} is not snake_case")
            if not row["unit"]:
                raise LogFormatError(path, line, "unit", "empty")
            if not row["printed"]:
                raise LogFormatError(path, line, "printed", "empty: give the number or words as printed")
            try:
                value = float(row["value"])
            except ValueError:
                raise LogFormatError(path, line, "value", f"not a number: {row['value']!r}") from None
            if not math.isfinite(value):
                raise LogFormatError(path, line, "value", f"not finite: {row['value']!r}")
            if row["unit"] == "fraction" and not 0.0 <= value <= 1.0:
                raise LogFormatError(path, line, "value", f"fraction {value} outside [0, 1]")
            for col, parse in (("alpha", _parse_alpha), ("round", _parse_round)):
                try:
                    row[col] = parse(row[col])
                except ValueError as exc:
                    raise LogFormatError(path, line, col, str(exc)) from None
            row["value"] = value
            previous = units.setdefault(row["quantity"], (row["unit"], line))
            if previous[0] != row["unit"]:
                raise LogFormatError(path, line, "unit", f"quantity {row['quantity']!r} has unit "
                                     f"{row['unit']!r} here but {previous[0]!r} on line {previous[1]}")
            key = tuple("" if row[c] is None else str(row[c]) for c in KEY_COLUMNS)
            if key in seen:
                raise LogFormatError(path, line, None, f"duplicates the key of line {seen[key]}")
            seen[key] = line
            records.append(row)
    if not records:
        raise LogFormatError(path, None, None, "no rows")
    frame = pd.DataFrame.from_records(records, columns=list(COLUMNS))
    frame["alpha"] = frame["alpha"].astype(float)
    frame["round"] = frame["round"].astype("Int64")
    frame["value"] = frame["value"].astype(float)
    return frame


@lru_cache(maxsize=4)
def _cached(path: str, mtime_ns: int, size: int) -> pd.DataFrame:
    return _read_validated(Path(path))


def load_reported(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """All reported numbers, validated (a fresh copy; default: ``paper_dir()/reported.csv``).

    String key columns hold ``""`` where not applicable; ``alpha`` is float (NaN when n/a),
    ``round`` a nullable integer.
    """
    file = Path(path) if path is not None else paper_dir() / REPORTED_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found")
    stat = file.stat()
    return _cached(str(file.resolve()), stat.st_mtime_ns, stat.st_size).copy()


def unit_of(quantity: str) -> str:
    """The unit of a reported ``quantity`` (each quantity has exactly one unit in the table)."""
    units = load_reported().groupby("quantity")["unit"].first()
    if quantity not in units.index:
        raise ValueError(f"unknown quantity {quantity!r}; known: {sorted(units.index)}")
    return str(units[quantity])


# --------------------------------------------------------------------------------------------
# Selecting
# --------------------------------------------------------------------------------------------

def _normalise_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(filters)
    if "table" in out:  # CONTRIBUTING's spelling: reported(table=2) == reported(source="Table 2")
        table = out.pop("table")
        if "source" in out:
            raise ValueError("give either table= or source=, not both")
        out["source"] = table if isinstance(table, str) and table.startswith("Table") else f"Table {table}"
    for name in out:
        if name not in COLUMNS:
            raise ValueError(f"unknown filter {name!r}; filter on one of {list(COLUMNS)} (or table=)")
    return out


def _mask(frame: pd.DataFrame, column: str, wanted: Any) -> pd.Series:
    values = list(wanted) if isinstance(wanted, (list, tuple, set, frozenset)) else [wanted]
    mask = pd.Series(False, index=frame.index)
    for value in values:
        if column == "alpha":
            if value is None or (isinstance(value, float) and math.isnan(value)):
                mask |= frame["alpha"].isna()
            else:
                mask |= pd.Series(np.isclose(frame["alpha"].to_numpy(), float(value), rtol=0, atol=1e-9),
                                  index=frame.index)
        elif column == "round":
            mask |= frame["round"].isna() if value is None else (frame["round"] == int(value)).fillna(False)
        elif column == "value":
            mask |= pd.Series(np.isclose(frame["value"].to_numpy(), float(value), rtol=0, atol=1e-12),
                              index=frame.index)
        else:
            text = "" if value is None else str(value)
            known = set(frame[column]) | set(_VOCAB.get(column, ()))
            if text and text not in known:
                raise ValueError(f"{column}={text!r} is not in the reported table; known: {sorted(known)}")
            mask |= frame[column] == text
    return mask


#: Key columns whose values come from a release (its backbones, benchmarks, specialty labels):
#: with ``missing_ok`` a value the paper never reports selects nothing instead of raising.
RELEASE_KEYS: tuple[str, ...] = ("backbone", "dataset", "specialty")


def reported(*, missing_ok: bool = False, **filters: Any) -> pd.DataFrame:
    """The paper's reported numbers, optionally filtered (``data/paper/reported.csv``).

    Each keyword names a column (``source``, ``backbone``, ``dataset``, ``quantity``,
    ``signal``, ``arm``, ``stratum``, ``alpha``, ``specialty``, ``dropped_family``, ``round``,
    ``unit``, ...) and gives a value or a list of values; ``None`` selects rows where the
    column is not applicable; ``table=2`` is short for ``source="Table 2"``.  A column or a
    key that the table does not know raises :class:`ValueError` (typos never select nothing),
    except, with ``missing_ok=True``, a ``backbone``, ``dataset`` or ``specialty`` value the paper
    never reports (a release's own model or benchmark): it selects no row.
    """
    selected = _normalise_filters(filters)
    frame = load_reported()
    if missing_ok:
        for column in RELEASE_KEYS:
            if column not in selected:
                continue
            wanted = selected[column]
            values = list(wanted) if isinstance(wanted, (list, tuple, set, frozenset)) else [wanted]
            known = set(frame[column]) | set(_VOCAB.get(column, ()))
            kept = [v for v in values if v is None or str(v) == "" or str(v) in known]
            if not kept:
                return frame.iloc[0:0].reset_index(drop=True)
            selected[column] = kept
    mask = pd.Series(True, index=frame.index)
    for column, wanted in selected.items():
        mask &= _mask(frame, column, wanted)
    return frame[mask].reset_index(drop=True)


def _describe(filters: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in filters.items()) or "(no filters)"


def reported_value(source: str | None = None, quantity: str | None = None, **keys: Any) -> float:
    """The one number the paper reports for these keys; :class:`ValueError` unless exactly one row matches."""
    filters = {k: v for k, v in (("source", source), ("quantity", quantity)) if v is not None} | keys
    rows = reported(**filters)
    if len(rows) != 1:
        hint = ""
        if len(rows) > 1:
            varying = [c for c in KEY_COLUMNS if rows[c].astype(str).nunique() > 1]
            hint = f"; they differ in {varying}"
        raise ValueError(
            f"reported_value({_describe(filters)}) matches {len(rows)} rows, expected exactly 1{hint}"
        )
    return float(rows["value"].iloc[0])


# --------------------------------------------------------------------------------------------
# Beside the paper
# --------------------------------------------------------------------------------------------

def _join_key(series: pd.Series, column: str) -> pd.Series:
    """A comparable join key: strings with '' for n/a, rounded floats, plain ints."""
    if column == "alpha":
        return pd.to_numeric(series, errors="raise").astype(float).round(9).map(
            lambda x: "" if pd.isna(x) else repr(float(x)))
    if column == "round":
        return series.map(lambda x: "" if x is None or pd.isna(x) else str(int(x)))
    if column == "value":
        raise ValueError("'value' cannot be a join column")
    return series.map(lambda x: "" if x is None or (isinstance(x, float) and math.isnan(x)) else str(x))


def beside_paper(
    ours: pd.DataFrame, on: Sequence[str], value_col: str = "value", **filters: Any
) -> pd.DataFrame:
    """``ours`` with the paper's value beside each row: adds ``paper`` and ``diff`` (= ours - paper).

    ``on`` lists the key columns (present in ``ours`` and in the reported table) that identify
    a number; ``filters`` narrow the paper's rows first (as in :func:`reported`), e.g.
    ``source="Table 2", quantity="auroc"``.  After filtering, the paper's rows must be unique
    on ``on``, else :class:`ValueError`.  Every row of ``ours`` is kept, in order; where the
    paper reports nothing (including a ``backbone`` / ``dataset`` filter the paper never ran),
    ``paper`` and ``diff`` are NaN.  When ``on`` holds ``alpha``, a paper row with an empty α
    (stated at any level, e.g. §4.4's "no certified threshold at any α we sweep") stands beside
    every α of ``ours`` that no paper row of its own α matches.  When ``ours`` has no ``unit``
    column one is added (the matched paper row's unit, else the filtered rows' single unit, else '').
    """
    if not isinstance(ours, pd.DataFrame):
        raise ValueError(f"ours must be a pandas DataFrame, got {type(ours).__name__}")
    on = [on] if isinstance(on, str) else list(on)
    if not on:
        raise ValueError("on must name at least one key column")
    for column in on:
        if column not in KEY_COLUMNS:
            raise ValueError(f"on={column!r} is not a key column of the reported table: {list(KEY_COLUMNS)}")
        if column not in ours.columns:
            raise ValueError(f"on={column!r} is not a column of ours: {list(ours.columns)}")
    if value_col not in ours.columns:
        raise ValueError(f"value_col={value_col!r} is not a column of ours: {list(ours.columns)}")
    if not pd.api.types.is_numeric_dtype(ours[value_col]):
        raise ValueError(f"ours[{value_col!r}] must be numeric, got dtype {ours[value_col].dtype}")
    for added in ("paper", "diff"):
        if added in ours.columns:
            raise ValueError(f"ours already has a column {added!r}")

    paper = reported(missing_ok=True, **filters)  # a backbone / benchmark the paper never ran: no paper value
    keys = pd.DataFrame({c: _join_key(paper[c], c) for c in on})
    duplicated = keys.duplicated(keep=False)
    if duplicated.any():
        example = paper.loc[duplicated, list(KEY_COLUMNS)].head(4).to_dict("records")
        raise ValueError(f"the paper's rows after filters ({_describe(filters)}) are not unique on {on}; "
                         f"add a filter or a column to on. Clashing rows: {example}")
    right = keys.assign(_paper=paper["value"].to_numpy(), _unit=paper["unit"].to_numpy())
    left = pd.DataFrame({c: _join_key(ours[c], c) for c in on}, index=ours.index)
    merged = left.reset_index(drop=True).merge(right, on=on, how="left", validate="many_to_one")
    if "alpha" in on:
        # a paper row with no alpha holds at every level ("no certified threshold at any alpha we
        # sweep", §4.4): it stands beside each of ours' alphas that no row of its own matches
        rest = [c for c in on if c != "alpha"]
        anyalpha = right[right["alpha"] == ""].drop(columns="alpha")
        if len(anyalpha):
            fill = left.reset_index(drop=True)[rest].merge(anyalpha, on=rest, how="left", validate="many_to_one") \
                if rest else pd.DataFrame({c: [anyalpha[c].iloc[0]] * len(left) for c in ("_paper", "_unit")})
            gap = merged["_paper"].isna() & left["alpha"].ne("").to_numpy()
            merged.loc[gap, "_paper"] = fill.loc[gap, "_paper"]
            merged.loc[gap, "_unit"] = fill.loc[gap, "_unit"]

    out = ours.copy()
    out["paper"] = merged["_paper"].to_numpy(dtype=float)
    out["diff"] = ours[value_col].to_numpy(dtype=float) - out["paper"].to_numpy()
    if "unit" not in ours.columns:
        fallback = paper["unit"].iloc[0] if paper["unit"].nunique() == 1 else ""
        out["unit"] = merged["_unit"].fillna(fallback).to_numpy()
    return out


def _fmt(x: Any, unit: str, signed: bool, decimals: int, pct_decimals: int, percent: bool) -> str:
    if x is None or pd.isna(x):
        return "–"
    x = float(x)
    sign = "+" if signed else ""
    scale, places = (100.0, pct_decimals) if unit == "fraction" and percent else (1.0, decimals)
    if round(scale * x, places) == 0:
        x = 0.0  # no "-0.000": a difference that rounds to zero reads +0.000
    if unit == "fraction" and percent:
        return f"{100 * x:{sign}.{pct_decimals}f}" + (" pp" if signed else "%")
    if unit in ("count", "tokens", "seconds") and float(x).is_integer():
        return f"{x:{sign}.0f}"
    if unit in ("tokens", "seconds"):  # medians of whole numbers: at most one decimal is meaningful
        return f"{x:{sign}.1f}"
    return f"{x:{sign}.{decimals}f}"


def format_beside(df: pd.DataFrame, value_col: str = "value", *, unit: str | None = None, decimals: int = 3,
                  pct_decimals: int = 1, percent: bool = True) -> pd.DataFrame:
    """A display copy of a :func:`beside_paper` frame: numbers as strings, NaN as '–'.

    Fractions show as percentages (``13.4%``; differences in percentage points, ``+1.2 pp``),
    AUROC / AURC / correlations with ``decimals`` decimals, counts as integers, seconds and
    tokens as integers or with one decimal.  The unit of a
    row comes from ``unit`` if given, else the frame's ``unit`` column, else its ``quantity``
    column (:func:`unit_of`), else plain decimals.
    """
    if unit is not None and unit not in UNITS:
        raise ValueError(f"unit={unit!r} is not one of {list(UNITS)}")
    if unit is not None:
        units = pd.Series(unit, index=df.index)
    elif "unit" in df.columns:
        units = df["unit"].fillna("").astype(str)
    elif "quantity" in df.columns:
        units = df["quantity"].map(unit_of)
    else:
        units = pd.Series("", index=df.index)
    out = df.copy()
    for column, signed in ((value_col, False), ("paper", False), ("diff", True)):
        if column in df.columns:
            out[column] = [_fmt(x, u, signed, decimals, pct_decimals, percent)
                           for x, u in zip(df[column], units)]
    return out


#: Units with a better direction, as the paper's Table 2 reads them ("AUROC, higher is better ...
#: AURC, lower is better. Best value per column in bold."): the only numbers a table bolds.
BETTER: dict[str, str] = {"auroc": "higher", "aurc": "lower"}

#: Units whose numbers lie on a 0-1 scale (AUROC, AURC, fractions, correlations): how far such a
#: number departs from the paper is the absolute difference; for counts, seconds and tokens it is
#: the difference relative to the paper's value (:func:`departure`).
BOUNDED_UNITS: frozenset[str] = frozenset({"auroc", "aurc", "fraction", "correlation"})

#: How a departure from the paper is sized for reading (issue 23 pt 6, "Δ styled by size"): by
#: scale, the upper bounds of a ``small`` and a ``medium`` departure; at or above the second it is
#: ``large``. On the absolute scale 0.01 is one percentage point (or 0.01 AUROC, a third of the
#: gaps the paper's Table 2 ranks its signals by) and 0.05 five; on the relative scale 10 % and 50 %.
DEPARTURE_SIZES: dict[str, tuple[float, float]] = {"absolute": (0.01, 0.05), "relative": (0.10, 0.50)}


def departure(diff: Any, paper: Any, unit: str) -> float:
    """How far our number departs from the paper's, given ``diff = ours - paper``: ``|diff|`` for a
    unit on a 0-1 scale (:data:`BOUNDED_UNITS`), else ``|diff| / |paper|`` (``|diff|`` where the
    paper's value is 0 or missing); NaN when ``diff`` is missing. The departures page sorts by it."""
    if diff is None or pd.isna(diff):
        return math.nan
    d = abs(float(diff))
    if unit in BOUNDED_UNITS or paper is None or pd.isna(paper) or float(paper) == 0:
        return d
    return d / abs(float(paper))


def departure_size(diff: Any, paper: Any, unit: str) -> str:
    """``small`` / ``medium`` / ``large`` by :data:`DEPARTURE_SIZES` on the scale of ``unit``
    (:func:`departure`); '' when there is nothing to size (no difference)."""
    x = departure(diff, paper, unit)
    if math.isnan(x):
        return ""
    small, medium = DEPARTURE_SIZES["absolute" if unit in BOUNDED_UNITS else "relative"]
    # sized as shown: a difference that rounds to +0.000 / +0.0 pp is small, not a hair above it
    x = round(x, 9)
    return "small" if x < small else "medium" if x < medium else "large"


#: Display names of the benchmarks (tables and figures only; files keep the keys).
DATASET_LABELS: dict[str, str] = {
    "medqa": "MedQA", "mmlu_pro_med": "MMLU-Pro med", "medmcqa": "MedMCQA", "medxpertqa": "MedXpertQA",
    "pooled": "pooled",
}
#: Display names of signals whose key is not plain words (§3.2, §4.3, §5.1).
SIGNAL_LABELS: dict[str, str] = {
    "rse": "RSE", "keep_rate": "keep rate κ", "rse_keep": "z(κ) + z(RSE)",
    "rse_keep_logprob": "z(κ) + z(RSE) + z(log-prob)", "p_true": "P(True)", "hard_se": "hard SE",
    "sequence_logprob": "sequence log-prob",
}
#: Display names of arms (Table 6 probe arms, §4.4 certification arms, Table 7 swap).
ARM_LABELS: dict[str, str] = {
    "counter_evidence": "counter-evidence", "irrelevant_docs": "irrelevant documents",
    "naive_quantile": "naive quantile", "global_ltt": "global LTT", "stratified_ltt": "stratified LTT",
    "stratified_ltt_a1": "stratified LTT, a₁ control", "stratified_ltt_augmented": "stratified LTT, augmented",
    "gbt_classifier": "GBT classifier",
}


def display_label(column: str, value: Any) -> str:
    """How a key value reads in a displayed table (never in a file): backbones by the paper's
    short label, benchmarks by name, signals / arms / quantities in words, alpha with two
    decimals; an empty stratum is the pooled stream (``all``); anything else as it is."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return "all" if column == "stratum" else "–"
    if column == "alpha":
        return f"{float(value):.2f}"
    if column in ("round", "n_cal") and isinstance(value, (int, float, np.integer, np.floating)):
        return str(int(value)) if float(value).is_integer() else str(value)
    text = str(value)
    if column == "backbone":
        return BACKBONE_LABELS.get(text, text)
    if column == "dataset":
        return DATASET_LABELS.get(text, text)
    if column == "signal":
        return SIGNAL_LABELS.get(text, text.replace("_", " "))
    if column == "arm":
        return ARM_LABELS.get(text, text.replace("_", " "))
    if column in ("quantity", "variant"):
        return {"auroc": "AUROC", "aurc": "AURC"}.get(text, text.replace("_", " "))
    return text


# --------------------------------------------------------------------------------------------
# Table 1
# --------------------------------------------------------------------------------------------

def approaches(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """Table 1 (comparison of abstention approaches), from ``data/table1_approaches.csv``.

    Columns ``method, external_resource, abstention_score, risk_guarantee``; the paper's ✗ is
    written ``none``.  Default location: beside the paper folder (``paper_dir().parent``).
    """
    file = Path(path) if path is not None else paper_dir().parent / TABLE1_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{file} not found")
    frame = pd.read_csv(file, dtype=str, keep_default_na=False)
    expected = ["method", "external_resource", "abstention_score", "risk_guarantee"]
    if list(frame.columns) != expected:
        raise LogFormatError(file, 1, None, f"columns {list(frame.columns)} differ from {expected}")
    return frame

