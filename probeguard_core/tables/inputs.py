"""Which numbers a simulated release was *given*: the reported quantities that the simulator's
parameters (``probeguard_core/simulate/params.yaml``) set, and the sentence a page shows next to a
table or figure holding them (issue 22, point 4). Agreement of such a number with the paper proves
nothing about the method; the departures page (:mod:`probeguard_core.tables.departures`) lists them
and every other page marks them where it shows them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

__all__ = ["INPUT_QUANTITIES", "PARAMS", "input_parameters", "input_sentence", "inputs_note"]

#: Reported quantities a simulated release is *given* (``params.yaml`` paths that set them; ``*``
#: is any cell, backbone or specialty). Agreement of these with the paper proves nothing.
INPUT_QUANTITIES: dict[str, tuple[str, ...]] = {
    "unanimous_share": ("cells.*.first_round_unanimity",),
    "unanimous_error": ("cells.*.unanimous_error", "specialties.table8.*.error"),
    "n_unanimous": ("cells.*.n_questions", "cells.*.first_round_unanimity", "specialties.table8.*.n"),
    "n_unanimous_wrong": ("cells.*.n_questions", "cells.*.first_round_unanimity", "cells.*.unanimous_error"),
    "error_rate_at_round": ("cells.*.error_by_round",),
    "flip_wrong": ("cells.*.flip_wrong", "cells.*.irrelevant_docs", "cells.*.neutral_instruction",
                   "cells.*.instruction_only"),
    "flip_right": ("cells.*.flip_right", "cells.*.irrelevant_docs", "cells.*.neutral_instruction",
                   "cells.*.instruction_only"),
    "flip_wrong_min": ("cells.*.flip_wrong",), "flip_wrong_max": ("cells.*.flip_wrong",),
    "flip_right_min": ("cells.*.flip_right",), "flip_right_max": ("cells.*.flip_right",),
    "n_specialty_labelled": ("specialties.n_labelled",),
    "n_specialty_unanimous": ("specialties.n_unanimous_labelled",),
    "substrate_wall_s": ("cells.*.substrate_wall_s_median",),
    "probe_wall_s_median": ("cells.*.probe_wall_s_median",),
    "probe_completion_tokens_median": ("cells.*.probe_tokens_median",),
    "n_calibration_added": ("cells.*.n_questions",),
}
PARAMS = Path(__file__).resolve().parents[1] / "simulate" / "params.yaml"


def _paths(node: Any, prefix: str = "") -> Iterable[str]:
    if isinstance(node, Mapping):
        for k, v in node.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            yield path
            yield from _paths(v, path)


def input_parameters(params: str | Path = PARAMS) -> dict[str, list[str]]:
    """For each quantity of :data:`INPUT_QUANTITIES`, the ``params.yaml`` paths that set it in
    this simulator. Raises ``ValueError`` naming the file when a listed parameter is absent (the
    mapping must follow the simulator, never claim an input it does not have)."""
    params = Path(params)
    tree = yaml.safe_load(params.read_text(encoding="utf-8"))
    have = set(_paths(tree))
    out: dict[str, list[str]] = {}
    for quantity, patterns in INPUT_QUANTITIES.items():
        found = []
        for pattern in patterns:
            rx = re.compile("^" + re.escape(pattern).replace(r"\*", r"[^.]+") + "$")
            hits = sorted(p for p in have if rx.match(p))
            if not hits:
                raise ValueError(f"{params}: no parameter matches {pattern!r} (listed as an input of {quantity!r} "
                                 "in probeguard_core.tables.inputs.INPUT_QUANTITIES)")
            found.append(pattern)
        out[quantity] = found
    return out


def _shown_quantities(shown: pd.DataFrame | Iterable[str]) -> list[str]:
    """The quantities a table shows: its ``quantity`` column (rows with a value), or the names given."""
    if isinstance(shown, pd.DataFrame):
        if "quantity" not in shown.columns:
            return []
        rows = shown[pd.to_numeric(shown["value"], errors="coerce").notna()] if "value" in shown.columns else shown
        return list(dict.fromkeys(str(q) for q in rows["quantity"]))
    return list(dict.fromkeys(str(q) for q in shown))


def input_sentence(shown: pd.DataFrame | Iterable[str], *, simulated: bool, params: str | Path = PARAMS) -> str:
    """What a page says next to a table or figure whose numbers include inputs of the simulator:
    for each shown quantity of :data:`INPUT_QUANTITIES` (the one definition the departures page
    also uses), "<quantity> is given to the simulator as an input (params.yaml: <keys>), not found
    by it". Empty on a real release (every number emerged) or when none of ``shown`` is an input."""
    if not simulated:
        return ""
    from probeguard_core.tables.display import label

    inputs = input_parameters(params)
    said = [f"{label('quantity', q)} (params.yaml: {', '.join(inputs[q])})" for q in _shown_quantities(shown) if q in inputs]
    if not said:
        return ""
    which = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    verb = "is given to the simulator as an input" if len(said) == 1 else "are given to the simulator as inputs"
    return (f"On this simulated release, {which} {verb}, not found by it: agreement with the paper proves nothing "
            "(\"This release beside the paper\" lists every input).")


def inputs_note(release: Any, shown: pd.DataFrame | Iterable[str], params: str | Path = PARAMS) -> Any:
    """:func:`input_sentence` as a one-line note under a table (``None``, so nothing is shown, on
    a real release or when the table shows no input of the simulator)."""
    import html

    from IPython.display import HTML

    text = input_sentence(shown, simulated=bool(release.is_simulated), params=params)
    return HTML(f'<p class="probeguard-inputs"><strong>Simulator input.</strong> {html.escape(text)}</p>') if text else None
