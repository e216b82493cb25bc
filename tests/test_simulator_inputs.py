"""Simulator inputs are marked where they are shown (issue 22, point 4): on a simulated release,
a table or figure that shows a number the simulator was given (Table 6's and Figure 3's flip
rates, Table 8's error rates, Appendix J's costs ...) says so next to it, from the one definition
of which quantities are inputs (``tables.inputs.INPUT_QUANTITIES`` / ``input_parameters``,
which the departures page also uses). tests/test_notebooks.py checks every executed page."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from probeguard_core import tables  # noqa: E402
from probeguard_core.book.outputs import Outputs  # noqa: E402
from probeguard_core.book.page import Page  # noqa: E402
from probeguard_core.release import Release  # noqa: E402
from probeguard_core.tables.inputs import INPUT_QUANTITIES, input_parameters, input_sentence, inputs_note  # noqa: E402


def _release(provenance: str) -> Release:
    return Release(Path("x"), {"name": "x", "provenance": provenance, "seed": 42})


@pytest.mark.parametrize("quantity", sorted(INPUT_QUANTITIES))
def test_each_input_names_its_params_keys(quantity: str) -> None:
    said = input_sentence([quantity], simulated=True)
    assert "(params.yaml: " in said and "is given to the simulator as an input, not found by it" in said
    for key in input_parameters()[quantity]:
        assert key in said
    assert tables.label("quantity", quantity) in said


def test_only_inputs_and_only_on_a_simulated_release() -> None:
    assert input_sentence(["auroc", "certified_coverage", "realized_risk"], simulated=True) == ""
    assert input_sentence(["flip_wrong"], simulated=False) == ""
    both = input_sentence(["flip_wrong", "auroc", "flip_right"], simulated=True)
    assert "are given to the simulator as inputs" in both and "cells.*.flip_right" in both
    assert tables.label("quantity", "auroc") not in both
    # a table: its quantity column, rows with a value only
    frame = pd.DataFrame({"quantity": ["unanimous_error", "substrate_wall_s", "auroc"],
                          "value": [0.1, float("nan"), 0.7], "paper": [0.134, 72.0, 0.696]})
    said = input_sentence(frame, simulated=True)
    assert "specialties.table8.*.error" in said and "substrate_wall_s_median" not in said


def test_note_under_a_table() -> None:
    flips = pd.DataFrame({"quantity": ["flip_wrong", "flip_right"], "value": [0.14, 0.04]})
    assert inputs_note(_release("real"), flips) is None
    assert inputs_note(_release("simulated"), ["auroc"]) is None
    html = inputs_note(_release("simulated"), flips).data
    assert 'class="probeguard-inputs"' in html and "cells.*.flip_wrong" in html


@pytest.mark.parametrize("provenance", ["simulated", "real"])
def test_figure_caption_says_so(provenance: str, tmp_path: Path) -> None:
    page = Page(_release(provenance), Outputs(tmp_path))
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    html = tables.captioned(page, "figure3", fig, inputs=pd.DataFrame({"quantity": ["flip_wrong"], "value": [0.1]})).data
    caption = html[html.index("<figcaption>"):]
    assert ("given to the simulator as an input" in caption) == (provenance == "simulated")
    fig, _ = plt.subplots()
    with pytest.raises(TypeError, match="inputs= needs the page"):
        tables.captioned(Outputs(tmp_path), "figure3", fig, inputs=["flip_wrong"])
    plt.close("all")


@pytest.mark.parametrize("notebook", ["table6_probe_controls", "unanimous_layer_fig3", "table8_specialty",
                                      "appendix_j_cost", "fig2_dynamics", "table1_fig1"])
def test_pages_that_show_inputs_mark_them(notebook: str) -> None:
    src = (Path(__file__).resolve().parents[1] / "notebooks" / f"{notebook}.md").read_text(encoding="utf-8")
    assert "page.inputs_note(" in src or "inputs=" in src
