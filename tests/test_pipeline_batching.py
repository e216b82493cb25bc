"""Issue 15: the probe and self-report passes batched across questions give exactly the records
of one question per call (tiny random Qwen3 on CPU; transformers engine).  Never asserts on time."""

from __future__ import annotations

import pytest
import tiny_models as tm

from probeguard_core.cli import main
from probeguard_core.logs import read_logs, read_probe
from probeguard_core.pipeline.batching_check import run_both
from probeguard_core.pipeline.engines import TransformersEngine
from probeguard_core.pipeline.probe_run import ProbeConfig
from probeguard_core.pipeline.retrieval import BM25Index, Retriever
from probeguard_core.pipeline.substrate import SubstrateConfig, run_substrate
from probeguard_core.questions import load_questions

pytestmark = pytest.mark.slow


class CountingEngine:
    """Wraps an engine and records the batch size of every ``generate`` call."""

    def __init__(self, inner):
        self.inner, self.name, self.sizes = inner, inner.name, []

    def generate(self, prompts, **kw):
        self.sizes.append(len(prompts))
        return self.inner.generate(prompts, **kw)


def test_batched_equals_per_question(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    qwen = tm.build_tiny_qwen3(tmp_path / "qwen")
    questions = load_questions(tm.write_questions(tmp_path / "q.json", 10), dataset="medqa")
    assert main(["index", "build", "--corpus", str(tm.write_corpus(tmp_path / "c.jsonl", 50)),
                 "--out", str(tmp_path / "index")]) == 0
    retriever = Retriever(BM25Index.load(tmp_path / "index"), None)
    run_substrate(questions, tm.ScriptedEngine(), retriever, tmp_path / "logs.jsonl",
                  SubstrateConfig(dataset="medqa", backbone="scripted", n_candidates=2, max_rounds=3), progress=False)
    logs = read_logs(tmp_path / "logs.jsonl")
    engine = CountingEngine(TransformersEngine(str(qwen)))
    cfg = ProbeConfig(max_new_tokens=6, query_max_new_tokens=6)
    res = run_both(logs, engine, retriever, tmp_path / "runs", cfg, batch_size=64)
    assert res["per_question"]["probe"] == res["batched"]["probe"]  # byte-identical records
    assert res["per_question"]["self_report"] == res["batched"]["self_report"]
    recs = read_probe(tmp_path / "runs" / "batched" / "probe.jsonl", logs)
    n_probed = len({r.qid for r in recs})
    assert n_probed >= 2 and len(recs) == 4 * n_probed
    # batched: one call per pass - counter-queries, the three first-pass arms, irrelevant docs,
    # then the two self-report passes; per question: every call holds one prompt
    batched = engine.sizes[-7:]
    assert batched[:5] == [n_probed] * 5 and batched[5] == batched[6] > 1
    assert set(engine.sizes[:-7]) == {1}
