"""Ours beside the paper: several filter sets of ``data/paper/reported.csv`` for one table
(:func:`beside_sources`), and the consistency records of ``results.json['checks']``
(:func:`check_entry`, notebooks/README.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core.paper import beside_paper

__all__ = [
    "beside_sources", "check_entry", "value_at",
]


def check_entry(key: str, csv: str, row: Mapping[str, Any], column: str) -> dict[str, Any]:
    """A consistency record for ``results.json['checks']`` (notebooks/README.md): the headline
    number ``results[key]`` must equal ``<csv>[column]`` on the row matching ``row``."""
    return {"key": key, "csv": csv, "row": dict(row), "column": column}


def beside_sources(ours: pd.DataFrame, on: Sequence[str], sources: Sequence[Mapping[str, Any]],
                   value_col: str = "value") -> pd.DataFrame:
    """:func:`paper.beside_paper` over several filter sets, first match wins.

    The paper prints some numbers in one place only (e.g. Qwen3-8B's MedQA flip rates in
    Table 6, HuatuoGPT-o1-8B's in §4.3).  Each element of ``sources`` is a filter mapping for
    ``beside_paper``; a row of ``ours`` takes the paper value of the first filter set that
    matches it.  Adds ``paper``, ``diff``, ``unit`` and ``paper_source`` (the matching
    ``source``; '' when none matches).
    """
    out = ours.copy()
    paper = pd.Series(np.nan, index=ours.index)
    where = pd.Series("", index=ours.index, dtype=object)
    unit = pd.Series("", index=ours.index, dtype=object)
    for filters in sources:
        b = beside_paper(ours, on=on, value_col=value_col, **dict(filters))
        hit = paper.isna() & b["paper"].notna()
        paper[hit] = b.loc[hit, "paper"]
        where[hit] = str(filters.get("source", ""))
        unit[unit == ""] = b.loc[unit == "", "unit"]
    out["paper"] = paper.astype(float)
    out["diff"] = out[value_col].astype(float) - out["paper"]
    if "unit" not in ours.columns:
        out["unit"] = unit
    out["paper_source"] = where
    return out


def value_at(df: pd.DataFrame, column: str = "value", **keys: Any) -> float:
    """The ``column`` of the first row of ``df`` whose columns equal ``keys``, as a float; NaN
    when no row matches (a headline number of ``results.json`` the release cannot give).

    >>> t = pd.DataFrame({"signal": ["a", "b"], "value": [0.5, 0.7]})
    >>> value_at(t, signal="b")
    0.7
    >>> value_at(t, signal="c")
    nan
    """
    m = (df[list(keys)] == pd.Series(keys)).all(axis=1)
    return float(df.loc[m, column].iloc[0]) if m.any() else math.nan
