"""Display: tables and notes for reading, in the book's style (CSS classes of
``book/_static/custom.css``).

Display only: these format a table for reading (strings, labels, CSS classes). They never change
what a notebook writes with ``Outputs.table``. :func:`wide_beside` and :func:`long_beside` show
a :func:`paper.beside_paper` frame as ours | paper | Δ; :func:`styled` any table of ours;
:func:`note`, :func:`placeholder_figure` and :func:`empty_table` stand in for what a release lacks.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core.paper import BETTER, UNITS, departure_size, display_label, format_beside
from probeguard_core.tables.protocols import CellLike

__all__ = [
    "absent_text", "HEADER_WORDS", "QUANTITY_WORDS", "header", "label", "show_notes",
    "ARTIFACT_NAMES", "BESIDE_CLASS", "BESIDE_SUBCOLUMNS", "TABLE_CLASS", "absent_note",
    "empty_table", "long_beside", "note", "placeholder_figure", "styled", "wide_beside",
]


#: CSS class of every table these helpers render; ``probeguard-beside`` marks ours | paper | Δ tables.
TABLE_CLASS = "probeguard-table"


BESIDE_CLASS = "probeguard-beside"


#: The sub-columns of each number beside the paper, and the frame columns they come from.
BESIDE_SUBCOLUMNS: tuple[str, ...] = ("ours", "paper", "Δ")


_SUB_CLASS = {"ours": "pg-ours", "paper": "pg-paper", "Δ": "pg-diff"}


def _best_of_column(df: pd.DataFrame, value_col: str, units: pd.Series, by: Sequence[str], decimals: int) -> pd.Series:
    """Bold as the paper bolds (Table 2: "Best value per column in bold"): True for the rows whose
    ``value_col`` is the best, as shown (rounded to ``decimals``), of its column, where a column is
    one value of the ``by`` keys and one quantity (or unit), and only for a unit with a better
    direction (:data:`paper.BETTER`: AUROC higher, AURC lower) and at least two numbers to rank.
    Ties are all bold, as in the paper."""
    best = pd.Series(False, index=df.index)
    values = pd.to_numeric(df[value_col], errors="coerce").round(decimals)
    quantity = df["quantity"].astype(str) if "quantity" in df.columns else units
    keys = pd.DataFrame({**{f"k{i}": df[c].astype(str) for i, c in enumerate(by)}, "unit": units, "q": quantity})
    for _, idx in keys.groupby(list(keys.columns), sort=False).groups.items():
        direction = BETTER.get(str(units.loc[idx[0]]), "")
        v = values.loc[idx].dropna()
        if direction and len(v) >= 2:
            best.loc[v.index[v == (v.max() if direction == "higher" else v.min())]] = True
    return best


def _diff_classes(df: pd.DataFrame, value_col: str, units: pd.Series) -> list[str]:
    """The CSS classes of each row's Δ cell: ``pg-diff`` and its size, ``pg-diff-small`` /
    ``-medium`` / ``-large`` (:func:`paper.departure_size`), so that a large departure stands out
    and a small one stays quiet (``book/_static/custom.css``)."""
    return [" ".join(filter(None, ("pg-diff", f"pg-diff-{size}" if size else "")))
            for size in (departure_size(d, p, u) for d, p, u in zip(df["diff"], df["paper"], units))]


#: Columns whose values :func:`styled` shows as labels (:func:`paper.display_label`).
_KEY_LABELLED: frozenset[str] = frozenset({"backbone", "dataset", "signal", "arm", "quantity", "alpha"})


#: How the notes name each artifact of a cell (DESIGN 2.1-2.4).
ARTIFACT_NAMES: dict[str, str] = {"logs": "execution logs", "probe": "probe records", "nli": "NLI records",
                                  "self_report": "self-reports"}


def note(text: str, title: str = "Not in this release") -> Any:
    """A visible note (an admonition in the book) that replaces a table or figure whose inputs
    the release does not have, e.g. ``note("this release has no probe records for X; Table 6
    needs them")``."""
    import html

    from IPython.display import HTML

    text = text[:1].upper() + text[1:]
    return HTML(f'<div class="admonition note probeguard-missing"><p class="admonition-title">{html.escape(title)}</p>'
                f"<p>{html.escape(text)}</p></div>")


def placeholder_figure(text: str, figsize: tuple[float, float] = (6.0, 2.2), visible_note: bool = False) -> Any:
    """A matplotlib figure that only says why the real one is absent (so its PNG/SVG exist);
    ``visible_note``: :func:`tables.captioned` also shows ``text`` as a note above it (for a
    page that shows no other note of that absence)."""
    import textwrap

    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize)
    fig.probeguard_missing = text if visible_note else None
    ax.axis("off")
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(text, 70)), ha="center", va="center", fontsize=10,
            transform=ax.transAxes, color="dimgray")
    return fig


def empty_table(columns: Sequence[str], numeric: Sequence[str] = ("value",)) -> pd.DataFrame:
    """An empty table with the given columns (``numeric`` ones float, the rest object), written in
    place of a table whose inputs the release lacks."""
    return pd.DataFrame({c: pd.Series(dtype=float if c in numeric else object) for c in columns})


def absent_text(cells: Sequence[CellLike], needs: Mapping[str, str]) -> str | None:
    """For each artifact kind of ``needs`` (``{"probe": "Table 6"}``), the cells of the release
    without it and what it is needed for, as one sentence; ``None`` when nothing is absent."""
    lines = []
    for kind, what in needs.items():
        lack = [c.label for c in cells if not c.has(kind)]
        if lack:
            lines.append(f"this release has no {ARTIFACT_NAMES.get(kind, kind)} for {', '.join(lack)} (needed for {what})")
    return ". ".join(s[0].upper() + s[1:] for s in lines) + "." if lines else None


def absent_note(cells: Sequence[CellLike], needs: Mapping[str, str]) -> Any:
    """:func:`absent_text` as a visible :func:`note`; ``None`` when nothing is absent."""
    text = absent_text(cells, needs)
    return note(text) if text else None


def _quantity_units() -> dict[str, str]:
    from probeguard_core.paper import load_reported

    rep = load_reported()
    return {str(q): str(u) for q, u in rep.groupby("quantity")["unit"].first().items()}


def _display_units(df: pd.DataFrame) -> pd.Series:
    """The unit each row is formatted with: its ``unit`` column, else the paper's unit of its
    ``quantity`` (:func:`paper.unit_of`), else '' (plain decimals)."""
    units = df["unit"].fillna("").astype(str) if "unit" in df.columns else pd.Series("", index=df.index, dtype=object)
    if "quantity" in df.columns:
        known = _quantity_units()
        units = units.where(units != "", df["quantity"].map(lambda q: known.get(str(q), "")))
    return units


def _plain(x: Any, integral: bool, decimals: int) -> str:
    if x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, (bool, np.bool_)):
        return "yes" if x else "no"
    if isinstance(x, (int, np.integer)):
        return f"{int(x)}"
    if isinstance(x, (float, np.floating)):
        return f"{x:.0f}" if integral else f"{x:.{decimals}f}"
    return str(x)


def _format_column(col: pd.Series, unit: str | None, decimals: int, pct_decimals: int) -> list[str]:
    """One column as strings: ``unit`` given: as :func:`paper.format_beside` formats that unit;
    else counts as integers (a float column whose values are all whole numbers), other floats
    with ``decimals``, booleans as yes / no, missing as '–'."""
    if unit in UNITS:
        return format_beside(pd.DataFrame({"value": col}), unit=unit, decimals=decimals,
                             pct_decimals=pct_decimals)["value"].tolist()
    integral = False
    if pd.api.types.is_float_dtype(col) and col.notna().any():
        vals = col.dropna().to_numpy(dtype=float)
        integral = bool(np.all(np.isfinite(vals)) and np.all(np.mod(vals, 1) == 0))
    return [_plain(x, integral, decimals) for x in col]


def _uuid(frame: pd.DataFrame) -> str:
    """A table id derived from its content, so the executed notebook's HTML is reproducible."""
    return "pg" + hashlib.sha1(frame.to_csv().encode("utf-8")).hexdigest()[:10]


#: Column headers in words (display only; the CSVs keep the code names).
HEADER_WORDS: dict[str, str] = {
    "backbone": "model", "dataset": "benchmark", "signal": "signal", "quantity": "quantity", "arm": "arm",
    "stratum": "stratum", "alpha": "α", "value": "value", "ci_low": "95 % CI low", "ci_high": "95 % CI high",
    "paper_source": "paper's source", "keep_auroc": "keep-rate AUROC", "n_cal": "calibration size",
    "n_unanimous": "unanimous questions", "unanimous_error": "error in the layer",
    "certified_coverage": "certified coverage", "coverage_sd": "coverage sd", "realized_risk": "realized risk",
    "n_risk_splits": "splits with a risk", "violations": "violating splits", "coverage_mean": "coverage (mean)",
    "risk_mean": "risk (mean)", "risk_sd": "risk sd", "n_certified": "certified splits", "n_splits": "splits",
    "base_error": "base error", "certified_share": "certified draws", "error_rate": "error rate",
    "n_defined": "defined for", "n_kept": "re-answers kept", "kappa": "κ", "rse": "RSE", "qid": "question id",
    "reanswers": "re-answers", "reanswer_plurality_is_gold": "plurality is gold", "n_queries": "counter-queries",
    "n_docs": "documents",
}


#: Quantities whose code names do not read as words with the underscores as spaces (Appendix J's
#: cost fields; display only, the CSVs keep the code names).
QUANTITY_WORDS: dict[str, str] = {
    "substrate_wall_s": "substrate seconds", "substrate_completion_tokens_median": "substrate tokens",
    "probe_wall_s_median": "probe seconds", "probe_completion_tokens_median": "probe tokens",
    "probe_share_wall": "probe share of time", "probe_to_substrate_ratio": "probe / substrate",
    "unanimous_share": "unanimous share",
}


def label(column: str, value: Any) -> str:
    """A key value as a displayed table shows it: :data:`QUANTITY_WORDS` for a quantity that has
    words there, else :func:`paper.display_label`.

    >>> label("quantity", "probe_wall_s_median"), label("backbone", "Qwen/Qwen3-8B")
    ('probe seconds', 'Qwen3-8B')
    """
    if column == "quantity" and isinstance(value, str) and value in QUANTITY_WORDS:
        return QUANTITY_WORDS[value]
    return display_label(column, value)


def header(column: Any) -> Any:
    """A column header in words (:data:`HEADER_WORDS`, else underscores as spaces).

    >>> header("ci_low"), header("n_boot_omitted")
    ('95 % CI low', 'n boot omitted')
    """
    return HEADER_WORDS.get(column, column.replace("_", " ")) if isinstance(column, str) else column


def _is_text(col: pd.Series) -> bool:
    """A displayed column of words rather than numbers (left-aligned)."""
    def numeric(v: Any) -> bool:
        t = str(v).strip().rstrip("%").replace("−", "-").replace("+", "").replace(" pp", "")
        if t in ("", "–", "yes", "no"):
            return True
        try:
            float(t)
        except ValueError:
            return False
        return True

    return not all(numeric(v) for v in col)


def _style(frame: pd.DataFrame, classes: pd.DataFrame | None, extra_class: str = "", hide_index: bool = False) -> Any:
    sty = frame.style
    sty.set_uuid(_uuid(frame))
    sty.set_table_attributes(f'class="{" ".join(filter(None, (TABLE_CLASS, extra_class)))}"')
    if classes is not None:
        sty.set_td_classes(classes)
    _words_left(sty, frame)
    if hide_index:
        sty.hide(axis="index")
    else:
        sty.hide(axis="index", names=True)
    return sty


def _words_left(sty: Any, frame: pd.DataFrame) -> None:
    """Text columns and row labels left-aligned; plain column headers in words."""
    text = [c for i, c in enumerate(frame.columns) if _is_text(frame.iloc[:, i])]
    if text and frame.columns.is_unique:
        sty.set_properties(subset=text, **{"text-align": "left"})
    if len(frame):
        sty.map_index(lambda v: "text-align: left;", axis="index")
    if not isinstance(frame.columns, pd.MultiIndex):
        sty.relabel_index([str(header(c)) for c in frame.columns], axis="columns")


def _nested_order(keys: pd.DataFrame, cols: list[str]) -> list[tuple[Any, ...]]:
    """The distinct key tuples of ``cols``, ordered level by level by first appearance (so that
    equal outer labels sit together and their headers merge)."""
    rank = {c: {v: i for i, v in enumerate(dict.fromkeys(keys[c]))} for c in cols}
    distinct = dict.fromkeys(tuple(r) for r in keys[cols].itertuples(index=False))
    return sorted(distinct, key=lambda t: tuple(rank[c][v] for c, v in zip(cols, t)))


def wide_beside(df: pd.DataFrame, index: Sequence[str], columns: Sequence[str], value_col: str = "value", *,
                decimals: int = 3, pct_decimals: int = 1) -> Any:
    """A :func:`paper.beside_paper` frame as a wide table for reading: rows ``index``, column
    groups ``columns``, and under each group three sub-columns ``ours | paper | Δ``.

    Numbers are formatted by their unit (the ``unit`` column, else the paper's unit of the
    row's ``quantity``): AUROC / AURC with ``decimals`` decimals, fractions as percentages with
    differences in percentage points, counts as integers, missing as '–' (also where the paper
    reports nothing). Key values read as labels (:func:`paper.display_label`). Returns a pandas
    ``Styler`` whose table has the CSS classes ``probeguard-table probeguard-beside`` and whose
    cells are ``pg-ours`` / ``pg-paper`` / ``pg-diff``. For display only: the CSVs stay long.
    Raises ``ValueError`` when two rows share the same ``index`` + ``columns`` keys (a cell
    would silently hide one of them).
    """
    index, columns = list(index), list(columns)
    if not columns:
        raise ValueError("wide_beside: columns must name at least one column")
    for c in (*index, *columns, value_col, "paper", "diff"):
        if c not in df.columns:
            raise ValueError(f"wide_beside: {c!r} is not a column of the table: {list(df.columns)}")
    dup = df.duplicated(index + columns, keep=False)
    if dup.any():
        raise ValueError(f"wide_beside: {int(dup.sum())} rows share their {index + columns} keys, e.g. "
                         f"{df.loc[dup, index + columns].head(2).to_dict('records')}; select them apart first")
    if df.empty:  # a release without these inputs: an empty table with the header, beside its note
        return _style(pd.DataFrame(columns=[*index, *columns, *BESIDE_SUBCOLUMNS]), None, BESIDE_CLASS, hide_index=True)
    units = _display_units(df)
    shown = format_beside(df.assign(unit=units), value_col, decimals=decimals, pct_decimals=pct_decimals)
    keys = pd.DataFrame({c: [label(c, v) for v in df[c]] for c in index + columns}, index=df.index)
    src = {"ours": value_col, "paper": "paper", "Δ": "diff"}
    cells = pd.concat([keys, shown[[value_col, "paper", "diff"]].rename(columns={value_col: "_ours"})], axis=1)
    cells["_class"] = _diff_classes(df, value_col, units)
    cells["_ours_class"] = ["pg-ours pg-best" if b else "pg-ours"
                            for b in _best_of_column(df, value_col, units, columns, decimals)]
    groups = _nested_order(keys, columns)
    rows = _nested_order(keys, index) if index else [()]
    lookup = {(tuple(r[:len(index)]), tuple(r[len(index):len(index) + len(columns)])): r[len(index) + len(columns):]
              for r in cells.itertuples(index=False)}
    data: dict[tuple[Any, ...], list[str]] = {}
    for g in groups:
        for sub in BESIDE_SUBCOLUMNS:
            pos = ("_ours", "paper", "diff").index(src[sub] if sub != "ours" else "_ours")
            data[(*g, sub)] = [lookup[(r, g)][pos] if (r, g) in lookup else "–" for r in rows]
    row_index = (pd.MultiIndex.from_tuples(rows, names=index) if len(index) > 1
                 else pd.Index([r[0] for r in rows], name=index[0]) if index else pd.RangeIndex(1))
    wide = pd.DataFrame(data, index=row_index)
    wide.columns = pd.MultiIndex.from_tuples(list(data), names=[None] * (len(columns) + 1))
    cls_at = {"Δ": 3, "ours": 4}  # positions of the Δ and ours classes in a lookup entry
    classes = pd.DataFrame({(*g, sub): [lookup[(r, g)][cls_at[sub]] if sub in cls_at and (r, g) in lookup
                                        else _SUB_CLASS[sub] for r in rows]
                            for g in groups for sub in BESIDE_SUBCOLUMNS}, index=wide.index)
    classes.columns = wide.columns
    sty = _style(wide, classes, BESIDE_CLASS, hide_index=not index)
    sty.map_index(lambda v: "" if v == "ours" else "opacity: 0.65; font-weight: normal;", axis="columns",
                  level=len(columns))
    return sty


def long_beside(df: pd.DataFrame, keys: Sequence[str], extra: Sequence[str] = (), value_col: str = "value", *,
                extra_units: Mapping[str, str] | None = None, decimals: int = 3, pct_decimals: int = 1) -> Any:
    """A :func:`paper.beside_paper` frame as a long table for reading: the ``keys`` columns
    (as labels), then ``ours | paper | Δ`` formatted by unit (as :func:`wide_beside`), then the
    ``extra`` columns (``extra_units`` names the unit of any of them, e.g. ``{"ci_low":
    "fraction"}``; otherwise counts as integers, other numbers with ``decimals``). Returns a
    ``Styler`` (classes as :func:`wide_beside`); for display only."""
    keys, extra = list(keys), list(extra)
    for c in (*keys, *extra, value_col, "paper", "diff"):
        if c not in df.columns:
            raise ValueError(f"long_beside: {c!r} is not a column of the table: {list(df.columns)}")
    units = extra_units or {}
    units_of_rows = _display_units(df)
    shown = format_beside(df.assign(unit=units_of_rows), value_col, decimals=decimals, pct_decimals=pct_decimals)
    out = pd.DataFrame({c: [label(c, v) for v in df[c]] for c in keys}, index=df.index)
    out["ours"], out["paper"], out["Δ"] = shown[value_col], shown["paper"], shown["diff"]
    for c in extra:
        out[c] = _format_column(df[c], units.get(c), decimals, pct_decimals)
    out = out.reset_index(drop=True)
    cls = {**{c: "pg-key" for c in keys}, **{s: _SUB_CLASS[s] for s in BESIDE_SUBCOLUMNS}, **{c: "pg-extra" for c in extra}}
    classes = pd.DataFrame([[cls[c] for c in out.columns]] * len(out), columns=out.columns)
    classes["Δ"] = _diff_classes(df, value_col, units_of_rows)
    sty = _style(out, classes, BESIDE_CLASS, hide_index=True)
    sty.map_index(lambda v: "opacity: 0.65; font-weight: normal;" if v in ("paper", "Δ") else "", axis="columns")
    return sty


def styled(df: pd.DataFrame, *, units: str | Mapping[str, str] | None = None,
           row_units: Sequence[str] | pd.Series | None = None, labels: bool = True, index: bool = True,
           decimals: int = 3, pct_decimals: int = 1) -> Any:
    """Any table of ours for reading, in the book's table style (class ``probeguard-table``).

    ``units`` names the unit of columns to format by unit (a mapping such as
    ``{"coverage_mean": "fraction"}`` shows percentages; a single unit applies to every non-key
    column); ``row_units`` gives one unit per row for the ``value`` column of a long table with
    mixed quantities. Other float columns whose values are all whole numbers show as integers,
    other numbers with ``decimals``; booleans as yes / no; missing as '–'. Key columns and index
    levels (backbone, dataset, signal, arm, quantity, alpha) read as labels when ``labels``.
    Returns a ``Styler``; for display only."""
    if row_units is not None and len(row_units) != len(df):
        raise ValueError(f"styled: row_units has {len(row_units)} entries for {len(df)} rows")
    if row_units is not None and "value" not in df.columns:
        raise ValueError("styled: row_units needs a 'value' column")

    def unit_of_column(c: Any) -> str | None:
        if isinstance(units, str):
            return units
        return (units or {}).get(c) if isinstance(c, str) else None

    cols: dict[int, list[str]] = {}
    for i, c in enumerate(df.columns):
        col = df.iloc[:, i]
        if labels and c in _KEY_LABELLED:
            cols[i] = [label(c, v) for v in col]
        elif c == "value" and row_units is not None:
            cols[i] = [_format_column(pd.Series([v]), u or None, decimals, pct_decimals)[0] for v, u in zip(col, row_units)]
        else:
            cols[i] = _format_column(col, unit_of_column(c), decimals, pct_decimals)
    out = pd.DataFrame(cols, index=df.index)
    out.columns = df.columns
    if labels and index:
        names = list(df.index.names)
        if isinstance(df.index, pd.MultiIndex):
            out.index = pd.MultiIndex.from_tuples(
                [tuple(label(n, v) if n in _KEY_LABELLED else v for n, v in zip(names, t)) for t in df.index],
                names=names)
        elif names[0] in _KEY_LABELLED:
            out.index = pd.Index([label(names[0], v) for v in df.index], name=names[0])
    if labels and isinstance(df.columns, pd.Index) and not isinstance(df.columns, pd.MultiIndex) \
            and df.columns.name in _KEY_LABELLED:
        out.columns = pd.Index([label(df.columns.name, v) for v in df.columns], name=df.columns.name)
    sty = out.style
    sty.set_uuid(_uuid(out))
    sty.set_table_attributes(f'class="{TABLE_CLASS}"')
    _words_left(sty, out)
    if not index:
        sty.hide(axis="index")
    return sty


def show_notes(texts: Sequence[str | tuple[str, str] | None], title: str = "Not in this release") -> None:
    """Display one :func:`note` per text (nothing when ``texts`` is empty): what a builder
    reports the release lacks, so a notebook never branches on it. An entry may be a
    ``(title, text)`` pair; a ``None`` entry (nothing lacking) shows nothing."""
    from IPython.display import display

    for entry in filter(None, texts):
        t, text = entry if isinstance(entry, tuple) else (title, entry)
        display(note(text, t))
