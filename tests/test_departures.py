"""The departures builder (probeguard_core.tables.departures): rows come from the notebooks'
CSVs, carry the paper's source, are sorted by departure and split into inputs / emerged."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from probeguard_core.tables import departures as dep
from probeguard_core.tables import inputs


def _write(folder: Path, name: str, df: pd.DataFrame) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    df.to_csv(folder / f"{name}.csv", index=False)


@pytest.fixture
def generated(tmp_path: Path) -> Path:
    gen = tmp_path / "_generated"
    _write(gen / "table2_3_discrimination", "table2", pd.DataFrame({
        "backbone": ["Qwen/Qwen3-8B"] * 3, "dataset": ["medqa"] * 3,
        "signal": ["sequence_logprob", "process_score", "terminal_agreement"], "quantity": ["auroc"] * 3,
        "value": [0.738, 0.848, 0.544], "paper": [0.400, 0.696, 0.512], "diff": [0.338, 0.152, 0.032],
        "unit": ["auroc"] * 3}))
    # a count and a rate the simulator is given; NaN paper rows are dropped
    _write(gen / "unanimous_layer_fig3", "unanimous_layer", pd.DataFrame({
        "backbone": ["Qwen/Qwen3-8B"] * 2, "dataset": ["medqa"] * 2, "signal": [None, "rse"],
        "quantity": ["unanimous_error", "auroc"], "value": [0.126, 0.8], "paper": [0.134, float("nan")],
        "diff": [-0.008, float("nan")], "unit": ["fraction", "auroc"]}))
    _write(gen / "certification_fig4", "pooled", pd.DataFrame({
        "method": ["stratified"], "alpha": [0.15], "stratum": ["S1"], "n_splits": [50], "n_certified": [50],
        "coverage_mean": [0.81], "coverage_sd": [0.02], "risk_mean": [0.1], "risk_sd": [0.01], "n_risk": [50],
        "violations": [1], "arm": ["stratified_ltt"]}))
    (gen / "certification_fig4" / "results.json").write_text('{"backbone": "Qwen/Qwen3-8B", "dataset": "medqa"}')
    return gen


def test_rows_sorted_with_roles_and_sources(generated: Path) -> None:
    names = ["table2_3_discrimination", "unanimous_layer_fig3", "certification_fig4", "table5_fig5_all_signals"]
    d = dep.departures(generated, names, simulated=True)
    rows = d.rows
    assert d.missing == ["table5_fig5_all_signals"]
    assert list(rows.departure) == sorted(rows.departure, reverse=True)
    top = rows.iloc[0]
    assert (top.dataset, top.quantity, top.paper) == ("pooled", "certified_coverage", 0.0)
    assert math.isclose(top.value, 0.81) and top.role == "emerged" and top.source == "§4.4"
    seq = rows[rows.signal == "sequence_logprob"].iloc[0]
    assert seq.source == "Table 2" and math.isclose(seq.departure, 0.338) and seq.role == "emerged"
    err = rows[rows.quantity == "unanimous_error"].iloc[0]
    assert err.role == "input" and "cells.*.unanimous_error" in err.set_by and err.source == "§4.3"
    assert not (rows.quantity == "auroc").groupby(rows.signal).size().get("rse", 0)  # NaN paper: not a row


def test_real_release_has_no_inputs(generated: Path) -> None:
    d = dep.departures(generated, ["unanimous_layer_fig3"], simulated=False)
    assert set(d.rows.role) == {"emerged"}


def test_relative_departure_for_counts(tmp_path: Path) -> None:
    _write(tmp_path / "table8_specialty", "table8_labels", pd.DataFrame({
        "dataset": ["medqa"], "quantity": ["n_specialty_labelled"], "value": [450.0], "paper": [899.0],
        "diff": [-449.0], "unit": ["count"]}))
    row = dep.departures(tmp_path, ["table8_specialty"], simulated=True).rows.iloc[0]
    assert row.scale == "relative" and math.isclose(row.departure, 449 / 899) and row.role == "input"


def test_an_input_the_simulator_lacks_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(inputs.INPUT_QUANTITIES, "auroc", ("cells.*.auroc",))
    with pytest.raises(ValueError, match=r"params.yaml: no parameter matches 'cells\.\*\.auroc'"):
        inputs.input_parameters()


def test_caveats_read_from_the_datasheet(tmp_path: Path) -> None:
    (tmp_path / "DATASHEET.md").write_text("# D\n\n## What this release can and cannot show\n\nIt cannot X.\n\n## Next\n\nY\n")
    assert dep.caveats(tmp_path) == "It cannot X."
    assert "no `DATASHEET.md`" in dep.caveats(tmp_path / "nowhere")
