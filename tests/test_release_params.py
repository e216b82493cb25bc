"""Measure the shipped simulated release with the core: every file validates, every input rate is reproduced.

Prints, per cell, each parameter's target beside its measured value (run with ``-s`` to see
the table) and asserts agreement within sampling error: rates |measured - target| <= 3
binomial standard errors + 0.02, counts within 10%, medians within 15% (issue 3).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from probeguard_core import logs as L
from probeguard_core.release import load_release
from probeguard_core.simulate import params as P
from probeguard_core.simulate.datasheet import agrees, orderings, parameter_rows

RELEASE = Path(__file__).resolve().parents[1] / "data" / "simulated-v1"


@pytest.fixture(scope="module")
def release():
    return load_release(RELEASE)  # verifies every sha256 and that no artifact is unlisted


@pytest.fixture(scope="module")
def params():
    return P.load_params()


def test_manifest(release, params):
    m = release.manifest
    assert m["name"] == "simulated-v1" and m["provenance"] == "simulated" and m["seed"] == 42
    assert m["generator"] == "probeguard_core.simulate" and m["generator_version"] == params["generator_version"]
    assert m["command"] == "probeguard simulate --out data/simulated-v1"
    assert [c["path"] for c in m["cells"]] == [c[0] for c in P.CELLS]
    assert {c["path"]: c["role"] for c in m["cells"]}["medqa-augment/qwen3-8b"] == "augment"
    assert set(m["files"]) == {p.relative_to(RELEASE).as_posix() for p in RELEASE.rglob("*") if p.is_file() and p.name != "manifest.json"}
    assert sum(p.stat().st_size for p in RELEASE.rglob("*") if p.is_file()) <= 60 * 2**20


def test_every_file_validates_with_the_readers(release):
    for cell in release.cells:
        logs = L.read_logs(cell.file("logs"))
        L.read_probe(cell.file("probe"), logs=logs)  # consensus = unanimous first-round answer
        nli = L.read_nli(cell.file("nli"))
        qids = {g.qid for g in logs}
        assert {r.qid for r in nli} <= qids
        last = {g.qid: len(g.rounds) for g in logs}
        have = {(r.qid, r.round) for r in nli}
        assert all((q, 1) in have and (q, t) in have for q, t in last.items())
        want_sr = cell.path.relative_to(RELEASE).as_posix() in ("medqa/qwen3-8b", "mmlu_pro_med/qwen3-8b")
        assert cell.has("self_report") == want_sr
        if want_sr:
            assert {r.qid for r in L.read_self_report(cell.file("self_report"))} == qids


def test_parameters_target_vs_measured(release, params):
    rows = [r for cell in release.cells for r in parameter_rows(cell, params)]
    print()
    print(f"{'cell':<36} {'parameter':<44} {'target':>9} {'measured':>9} {'n':>6}  ok")
    for r in rows:
        print(f"{r['cell']:<36} {r['parameter']:<44} {r['target']:>9.3f} {r['measured']:>9.3f} {r['n']:>6}  {'yes' if agrees(r) else 'NO'}")
    bad = [f"{r['cell']} {r['parameter']}: target {r['target']:.3f} measured {r['measured']:.3f} (n={r['n']})" for r in rows if not agrees(r)]
    assert not bad, "\n".join(bad)
    assert {r["cell"] for r in rows} == {c[0] for c in P.CELLS}


def test_datasheet_reports_the_measured_orderings(release):
    """The datasheet's ordering row for MedQA / Qwen3-8B is what the core measures now."""
    o = orderings(release.cell("medqa", "Qwen/Qwen3-8B"))
    sheet = (RELEASE / "DATASHEET.md").read_text(encoding="utf-8")
    row = next(line for line in sheet.splitlines() if line.startswith("| medqa/qwen3-8b | 1273 |"))
    assert f"| {o['auroc_terminal_agreement']:.3f} | {o['auroc_first_round_agreement']:.3f} |" in row
    assert f"| {o['auroc_process_score']:.3f} |" in row
    assert o["flip_wrong"] > o["flip_right"]
