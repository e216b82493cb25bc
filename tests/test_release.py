"""Release folders (DESIGN 2.7): manifest checks, cell discovery, provenance text."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import make_log, make_nli, make_probe, write_records
from probeguard_core.release import ReleaseError, backbone_slug, load_release, sha256_file, write_manifest


def _release(tmp_path: Path, with_cells: bool = True) -> Path:
    root = tmp_path / "rel"
    cell = root / "medqa" / "mistral-7b"
    logs = [
        make_log([["A"] * 4], qid="q1", backbone="mistralai/Mistral-7B", n_candidates=4),
        make_log([["A", "B", "A", "A"], ["A"] * 4], qid="q2", backbone="mistralai/Mistral-7B"),
    ]
    write_records(cell / "logs.jsonl.gz", logs)
    write_records(cell / "probe.jsonl", [make_probe(["A", "A", "B", "A"], qid="q1", backbone="mistralai/Mistral-7B")])
    write_records(cell / "nli.jsonl", [make_nli(claims=["a", "b", "c", "d"], candidates=[0, 1, 2, 3],
                                                qid="q1", backbone="mistralai/Mistral-7B")])
    cells = [{"dataset": "medqa", "backbone": "mistralai/Mistral-7B", "path": "medqa/mistral-7b", "role": "main"}]
    write_manifest(root, name="rel", provenance="real", seed=42, cells=cells if with_cells else [],
                   extra={"pipeline_command": "probeguard substrate ..."})
    if not with_cells:  # a DESIGN-only manifest: no cells list at all
        m = json.loads((root / "manifest.json").read_text())
        del m["cells"]
        (root / "manifest.json").write_text(json.dumps(m))
    return root


@pytest.mark.parametrize("with_cells", [True, False])
def test_load_release_reads_cells_and_artifacts(tmp_path, with_cells):
    rel = load_release(_release(tmp_path, with_cells))
    assert not rel.is_simulated and rel.datasets == ["medqa"] and rel.backbones == ["mistralai/Mistral-7B"]
    cell = rel.cell("medqa")
    assert [log.qid for log in cell.logs] == ["q1", "q2"]
    assert len(cell.probe_by_arm()) == 1 and len(cell.nli) == 1 and cell.self_report is None
    assert "real" in rel.describe() and "probeguard substrate" in rel.describe()


def test_hashes_may_be_a_list_under_sha256(tmp_path):
    root = _release(tmp_path)
    m = json.loads((root / "manifest.json").read_text())
    m["sha256"] = [{"path": k, "sha256": v} for k, v in m.pop("files").items()]
    (root / "manifest.json").write_text(json.dumps(m))
    assert load_release(root).name == "rel"


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda m, root: m.pop("provenance"), "missing field 'provenance'"),
        (lambda m, root: m.update(provenance="maybe"), "provenance must be 'simulated' or 'real'"),
        (lambda m, root: m.pop("files"), "missing field 'files'"),
        (lambda m, root: m["files"].update({"medqa/mistral-7b/probe.jsonl": "0" * 63}), "not a sha256 hex digest"),
        (lambda m, root: m["files"].update({"extra.txt": "0" * 64}), "listed file extra.txt is missing"),
        (lambda m, root: (root / "medqa/mistral-7b/probe.jsonl").write_text(
            (root / "medqa/mistral-7b/probe.jsonl").read_text() + "\n"), "sha256 differs"),
        (lambda m, root: shutil.copy(root / "medqa/mistral-7b/nli.jsonl", root / "medqa/mistral-7b/self_report.jsonl"),
         "artifact not listed"),
        (lambda m, root: m["cells"][0].update(role="extra"), "role must be one of"),
        (lambda m, root: m["cells"][0].update(path="medqa/none"), "has no logs.jsonl"),
    ],
)
def test_bad_manifest_names_the_problem(tmp_path, mutate, message):
    root = _release(tmp_path)
    m = json.loads((root / "manifest.json").read_text())
    mutate(m, root)
    (root / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ReleaseError, match=message):
        load_release(root)


def test_missing_cell_lists_what_the_release_has(tmp_path):
    rel = load_release(_release(tmp_path))
    with pytest.raises(KeyError, match="has no main cell for dataset='medmcqa'"):
        rel.cell("medmcqa")


def test_manifest_is_reproducible_and_slugs_are_stable(tmp_path):
    root = _release(tmp_path)
    first = (root / "manifest.json").read_bytes()
    write_manifest(root, name="rel", provenance="real", seed=42,
                   cells=[{"dataset": "medqa", "backbone": "mistralai/Mistral-7B", "path": "medqa/mistral-7b", "role": "main"}],
                   extra={"pipeline_command": "probeguard substrate ..."})
    assert (root / "manifest.json").read_bytes() == first
    assert sha256_file(root / "manifest.json") == sha256_file(root / "manifest.json")
    assert backbone_slug("Qwen/Qwen3-8B") == "qwen3-8b"
    assert backbone_slug("meta-llama/Llama-3.1-8B-Instruct") == "llama-3.1-8b-instruct"
    with pytest.raises(ValueError):
        backbone_slug("weird/ name")


def test_shipped_release_loads_and_verifies():
    root = Path(__file__).resolve().parents[1] / "data" / "simulated-v1"
    rel = load_release(root)
    assert rel.is_simulated and "Simulated release" in rel.describe()
    assert {c.role for c in rel.cells} == {"main", "augment"}
