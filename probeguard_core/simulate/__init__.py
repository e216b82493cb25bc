"""Simulated release: a generative model of multi-round consensus (issue 3; DESIGN 2.7).

Public API::

    simulate_cell(cell, *, scale=1.0, n=None, params=None, progress=True) -> CellData
    simulate_release(out, cells=None, seed=42, scale=1.0) -> Path     # manifest path
    simulate_unanimous_layer(n, error_rate, seed=42, backbone="Qwen/Qwen3-8B") -> (logs, probe, nli)
    unanimous_layer_table(n, error_rate, seed=42, backbone="Qwen/Qwen3-8B") -> DataFrame(kappa, rse, correct)
    load_params(path=None) -> dict;  calibrate_cell(cell, params=None) -> Calibration;  CELLS

Everything the simulator writes is marked ``provenance: "simulated"`` in the manifest.
"""

from probeguard_core.simulate.calibration import Calibration, calibrate_cell
from probeguard_core.simulate.params import CELLS, load_params
from probeguard_core.simulate.whatif import simulate_unanimous_layer, unanimous_layer_table
from probeguard_core.simulate.writer import CellData, simulate_cell, simulate_release, write_cell

__all__ = [
    "CELLS",
    "Calibration",
    "CellData",
    "calibrate_cell",
    "load_params",
    "simulate_cell",
    "simulate_release",
    "simulate_unanimous_layer",
    "unanimous_layer_table",
    "write_cell",
]
