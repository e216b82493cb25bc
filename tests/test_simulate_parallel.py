"""The simulator's speed-ups change no byte: cells in parallel, calibrations from the disk cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from probeguard_core.simulate import calibration as CA
from probeguard_core.simulate.writer import simulate_release

pytestmark = pytest.mark.slow
CELLS = ["medqa-augment/qwen3-8b", "mmlu_pro_med/llama-3.1-8b-instruct"]


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_parallel_cells_and_cached_calibration_give_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROBEGUARD_CACHE_DIR", str(tmp_path / "cache"))
    CA._calibrate_on_disk.cache_clear()
    serial = simulate_release(tmp_path / "serial", cells=CELLS, scale=0.02, progress=False, jobs=1).parent
    assert len(list((tmp_path / "cache" / "simulator-calibration").glob("*.json"))) == len(CELLS)
    CA._calibrate_on_disk.cache_clear()
    CA._calibrate_cached.cache_clear()  # the parallel run's calibrations come from the disk cache
    parallel = simulate_release(tmp_path / "parallel", cells=CELLS, scale=0.02, progress=False, jobs=2).parent
    assert _files(serial) == _files(parallel)


def test_calibration_round_trips_through_json_exactly() -> None:
    cal = CA.Calibration(pi={"knowledge": 0.25, "misconception": 0.1 + 0.2}, eta=1 / 3,
                        collapse={"counter_evidence": (0.125, 1e-17)}, reanswer_tokens_median=312.5,
                        round1={"knowledge": (0.7, 0.69)}, targets={"overall_accuracy": 0.61, "flips": {"a": (0.1, 0.2)}})
    import json

    back = CA._calibration_from_json(json.loads(json.dumps(CA._calibration_to_json(cal))))
    assert back == cal and isinstance(back.collapse["counter_evidence"], tuple)
