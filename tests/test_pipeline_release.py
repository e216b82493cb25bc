"""Pipeline outputs -> a release the book renders: the pipeline notebook under papermill on
tiny models, and one book notebook executed on a release assembled from pipeline outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

import tiny_models as tm
from probeguard_core.pipeline.assemble import assemble_release
from probeguard_core.pipeline.nli_run import NLIScorer, run_nli
from probeguard_core.pipeline.probe_run import ProbeConfig, run_probe
from probeguard_core.pipeline.retrieval import BM25Index, CrossEncoderReranker, Retriever
from probeguard_core.pipeline.self_report import run_self_report
from probeguard_core.pipeline.substrate import SubstrateConfig, run_substrate
from probeguard_core.questions import load_questions
from probeguard_core.release import load_release

pytestmark = [pytest.mark.slow, pytest.mark.notebook]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        root = tmp_path_factory.mktemp("release")
        tm.build_tiny_qwen3(root / "qwen")
        tm.build_tiny_nli(root / "nli")
        tm.build_tiny_cross_encoder(root / "ce")
        tm.write_corpus(root / "corpus.jsonl", 50)
        tm.write_questions(root / "benchmark.json", 5)
        yield root


def _scripted_release(root: Path) -> Path:
    """All four stages on the scripted engine (non-null answers, probe arms), then a release."""
    qs = load_questions(root / "benchmark.json", dataset="medqa")
    index = BM25Index.build(__import__("probeguard_core.questions", fromlist=["load_corpus"]).load_corpus(root / "corpus.jsonl"))
    retriever = Retriever(index, CrossEncoderReranker(str(root / "ce")))
    work = root / "scripted"
    backbone = "Qwen/Qwen3-8B"
    cfg = SubstrateConfig(dataset="medqa", backbone=backbone, n_candidates=4, max_rounds=3)
    run_substrate(qs, tm.ScriptedEngine(), retriever, work / "logs.jsonl", cfg, progress=False)
    from probeguard_core.logs import read_logs

    logs = read_logs(work / "logs.jsonl")
    run_probe(logs, tm.ScriptedEngine(), retriever, work / "probe.jsonl", ProbeConfig(), progress=False)
    run_nli(logs, NLIScorer(str(root / "nli")), work / "nli.jsonl", progress=False)
    run_self_report(logs, tm.ScriptedEngine(), work / "self_report.jsonl", progress=False)
    rel = root / "release-scripted"
    assemble_release(rel, [{"dataset": "medqa", "backbone": backbone, "logs": work / "logs.jsonl",
                            "probe": work / "probe.jsonl", "nli": work / "nli.jsonl",
                            "self_report": work / "self_report.jsonl"}], command="test")
    return rel


def test_assembled_release_loads_and_renders_in_a_book_notebook(env, tmp_path):
    rel_dir = _scripted_release(env)
    rel = load_release(rel_dir)
    assert rel.manifest["provenance"] == "real"
    (cell,) = rel.cells
    assert len(cell.logs) == 5 and len(cell.probe_by_arm("counter_evidence")) == 2
    assert cell.nli and cell.self_report
    with pytest.raises(ValueError, match="already a release"):
        assemble_release(rel_dir, [])
    nb = REPO / "notebooks" / "appendix_j_cost.md"
    if not nb.exists():
        pytest.skip("the book notebook notebooks/appendix_j_cost.md is not in this checkout")
    from probeguard_core.book.build import execute_notebook

    res = execute_notebook(nb, tmp_path / "appendix_j_cost.ipynb",
                           {"release": str(rel_dir), "output_dir": str(tmp_path / "out")}, cwd=REPO, timeout_s=300)
    assert res.ok, res.error
    assert (tmp_path / "out" / "results.json").exists()


def test_pipeline_notebook_on_tiny_models(env, tmp_path):
    from probeguard_core.book.build import execute_notebook

    params = {
        "questions": str(env / "benchmark.json"), "dataset": "medqa", "corpus": str(env / "corpus.jsonl"),
        "model": str(env / "qwen"), "engine": "transformers", "reranker": str(env / "ce"),
        "nli_model": str(env / "nli"), "n_candidates": 2, "max_rounds": 2, "max_new_tokens": 8,
        "query_max_new_tokens": 8, "self_report_max_new_tokens": 8, "limit": 3,
        "work_dir": str(tmp_path / "work"), "release_dir": str(tmp_path / "release"),
    }
    res = execute_notebook(REPO / "notebooks" / "pipeline" / "pipeline.md", tmp_path / "pipeline.ipynb", params,
                           cwd=REPO, timeout_s=300)
    assert res.ok, res.error
    rel = load_release(tmp_path / "release")
    assert len(rel.cells[0].logs) == 3 and rel.cells[0].backbone == str(env / "qwen")
