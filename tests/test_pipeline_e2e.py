"""End-to-end pipeline stages on tiny random models (CPU) and on a scripted engine.

The tiny models produce gibberish, so their answers are mostly null: that path must run end
to end and validate.  The scripted engine (tests/tiny_models.py) exercises the non-null
paths: unanimity, conflict queries and retrieval, the probe arms and the self-reports.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

import tiny_models as tm
from probeguard_core import features
from probeguard_core.cli import main
from probeguard_core.logs import read_logs, read_nli, read_probe, read_self_report
from probeguard_core.pipeline.engines import TransformersEngine
from probeguard_core.pipeline.nli_run import NLIScorer, run_nli
from probeguard_core.pipeline.probe_run import ProbeConfig, donor_map, run_probe
from probeguard_core.pipeline.retrieval import BM25Index, _tokenize, doc_text
from probeguard_core.pipeline.self_report import run_self_report
from probeguard_core.pipeline.substrate import SubstrateConfig, run_substrate
from probeguard_core.rse import rationale_semantic_entropy

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        ns = tm.pipeline_env(tmp_path_factory.mktemp("pipeline"))
        ns.nli = tm.build_tiny_nli(ns.root / "nli")
        ns.engine = TransformersEngine(str(ns.qwen))
        yield ns


@pytest.fixture(scope="module")
def scripted(env):
    """Substrate logs produced by the scripted engine (N=4, T=3)."""
    eng = tm.ScriptedEngine()
    out = env.root / "scripted" / "logs.jsonl"
    cfg = SubstrateConfig(dataset="medqa", backbone="scripted", n_candidates=4, max_rounds=3)
    run_substrate(env.questions, eng, env.retriever, out, cfg, progress=False)
    return SimpleNamespace(out=out, logs=read_logs(out), engine=eng, cfg=cfg)


# ------------------------------------------------------------------------------------------ retrieval

def test_bm25_matches_lucene_formula(env):
    """bm25s scores equal an independent Lucene BM25 (k1 = 0.9, b = 0.4) on the corpus."""
    docs = env.index.docs
    toks = _tokenize([doc_text(d.title, d.content) for d in docs])
    n, avgdl = len(toks), np.mean([len(t) for t in toks])
    query = "anemia iron deficiency fever"
    qt = [t for t in _tokenize([query])[0] if any(t in d for d in toks)]
    expected = np.zeros(n)
    for t in qt:
        df = sum(t in d for d in toks)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for i, d in enumerate(toks):
            tf = d.count(t)
            expected[i] += idf * tf / (tf + 0.9 * (1 - 0.4 + 0.4 * len(d) / avgdl))  # Lucene >= 8: no (k1 + 1)
    hits = env.index.search(query, k=32)
    assert 0 < len(hits) <= 32
    for pos, score in hits:
        assert score == pytest.approx(expected[pos], rel=1e-4)
    best = sorted(range(n), key=lambda i: (-expected[i], i))[: len(hits)]
    assert [p for p, _ in hits] == best
    assert env.index.search("zzzz qqqq", k=32) == []  # no known term: nothing retrieved


def test_index_roundtrip_and_rerank(env):
    again = BM25Index.load(env.root / "index")
    assert [d.id for d in again.docs] == [d.id for d in env.index.docs]
    assert again.search("diabetes insulin") == env.index.search("diabetes insulin")
    r = env.retriever
    hits = env.index.search("anemia iron", 32)
    scores = r.reranker.score("anemia iron", [doc_text(env.index.docs[p].title, env.index.docs[p].content) for p, _ in hits])
    manual = [hits[i][0] for i in sorted(range(len(hits)), key=lambda i: (-scores[i], i))[:2]]
    assert r.per_query("anemia iron") == manual
    docs = r.retrieve(["anemia iron", "anemia iron", "diabetes insulin", "gout", "sepsis fever", "asthma"])
    ids = [d.id for d in docs]
    assert len(ids) == len(set(ids)) <= 8
    assert ids[:2] == [env.index.docs[p].id for p in manual]  # duplicate query adds nothing
    meta = json.loads((env.root / "index" / "meta.json").read_text())
    assert (meta["k1"], meta["b"], meta["n_docs"]) == (0.9, 0.4, 50)


# ------------------------------------------------------------------------------------------ substrate

def test_substrate_tiny_model_end_to_end(env):
    out = env.root / "tiny" / "logs.jsonl"
    cfg = SubstrateConfig(dataset="medqa", backbone="tiny-qwen3", n_candidates=3, max_rounds=2,
                          max_new_tokens=10, query_max_new_tokens=10)
    run_substrate(env.questions, env.engine, env.retriever, out, cfg, batch_size=2, progress=False)
    logs = read_logs(out)
    assert [l.qid for l in logs] == [q.qid for q in env.questions]
    assert {l.model_extra["prompt_version"] for l in logs} == {"v2"}  # every record names its prompts
    for log in logs:
        assert 1 <= len(log.rounds) <= 2 and all(len(r.candidates) == 3 for r in log.rounds)
        assert log.cost is not None and log.cost.completion_tokens > 0
        for c in log.rounds[0].candidates:
            assert c.n_tokens and c.n_tokens <= 10
            # no answer tokens (the random model closed a think block) -> no log-prob, no entropy
            assert (c.logprob is None) == (c.mean_token_entropy is None)
            if c.logprob is not None:
                assert c.logprob < 0 and 0 <= c.mean_token_entropy <= math.log(20) + 1e-9
    assert sum(c.logprob is not None for l in logs for r in l.rounds for c in r.candidates) > 5
    table = features.feature_table(logs)
    assert list(table.index) == [l.qid for l in logs]
    assert {features.stratum(l) for l in logs} <= {"S1", "S2", "S3"}


def test_substrate_scripted_paths(env, scripted):
    by = {l.qid: l for l in scripted.logs}
    assert [len(by[q].rounds) for q in ("q0", "q1", "q2", "q3", "q4")] == [1, 1, 2, 3, 3]
    assert [features.stratum(by[q]) for q in ("q0", "q1", "q2", "q3")] == ["S1", "S1", "S2", "S3"]
    assert all(c.answer is None for r in by["q4"].rounds for c in r.candidates)
    ret = by["q2"].rounds[0].retrieval
    assert ret.queries == ["pneumonia treatment", "pneumonia diagnosis"]  # order kept, duplicate removed
    assert 0 < len(ret.doc_ids) == len(set(ret.doc_ids)) <= 8
    assert by["q2"].rounds[-1].retrieval is None and by["q3"].rounds[-1].retrieval is None
    assert by["q0"].rounds[0].retrieval is None
    # the round-2 prompt shows D_1 and the previous answers ordered by entropy (highest first)
    calls = [c for c in scripted.engine.calls if c[0] == "answer" and "pneumonia" in c[1][1]["content"]]
    second = calls[1][1][1]["content"]
    titles = {d.id: d.title for d in env.index.docs}
    assert all(titles[i] in second for i in ret.doc_ids)
    shown = [float(x) for x in __import__("re").findall(r"\(Entropy ([0-9.]+)\)", second)]
    assert len(shown) == 4 and shown == sorted(shown, reverse=True)
    assert "lower entropy" in second
    q_calls = [c for c in scripted.engine.calls if c[0] == "query"]
    assert q_calls and all(c[1][0]["content"].startswith("### Role & Goal") for c in q_calls)


def test_substrate_chunking_does_not_change_results(env, scripted):
    out = env.root / "scripted_b3" / "logs.jsonl"
    run_substrate(env.questions, tm.ScriptedEngine(), env.retriever, out, scripted.cfg, batch_size=3,
                  reproducible=True, progress=False)
    a = [l.model_dump(exclude={"cost"}) for l in read_logs(out)]
    b = [l.model_dump(exclude={"cost"}) for l in scripted.logs]
    assert a == b
    assert all(l.cost is None for l in read_logs(out))
    costs = [json.loads(x) for x in (out.parent / "logs.cost.jsonl").read_text().splitlines()]
    assert [c["qid"] for c in costs] == [q.qid for q in env.questions] and all(c["completion_tokens"] > 0 for c in costs)


def test_resume_refuses_other_settings(env, scripted):
    cfg = SubstrateConfig(dataset="medqa", backbone="scripted", n_candidates=5, max_rounds=3)
    with pytest.raises(ValueError, match="different settings"):
        run_substrate(env.questions, tm.ScriptedEngine(), env.retriever, scripted.out, cfg, progress=False)


# ------------------------------------------------------------------------------------------ probe

def test_probe_scripted_arms(env, scripted):
    eng = tm.ScriptedEngine()
    out = env.root / "scripted" / "probe.jsonl"
    run_probe(scripted.logs, eng, env.retriever, out, ProbeConfig(n_candidates=4), progress=False)
    recs = read_probe(out, scripted.logs)  # consensus and N checked against the logs
    assert Counter((r.qid, r.arm) for r in recs) == Counter({(q, a): 1 for q in ("q0", "q1") for a in
                                                            ("counter_evidence", "instruction_only",
                                                             "irrelevant_docs", "neutral_instruction")})
    by = {(r.qid, r.arm): r for r in recs}
    for q in ("q0", "q1"):
        ce = by[(q, "counter_evidence")]
        assert ce.queries == [f"{'anemia' if q == 'q0' else 'diabetes'} alternative", "fever cough"]
        assert 0 < len(ce.doc_ids) <= 8
        assert by[(q, "neutral_instruction")].doc_ids == ce.doc_ids
        assert by[(q, "instruction_only")].queries == [] and by[(q, "instruction_only")].doc_ids == []
        irr = by[(q, "irrelevant_docs")]
        donor = donor_map(["q0", "q1"], 42)[q]
        assert irr.donor_qid == donor != q and irr.doc_ids == by[(donor, "counter_evidence")].doc_ids
    keep = lambda r: sum(a.answer == r.consensus for a in r.reanswers) / len(r.reanswers)  # Eq. 4
    assert keep(by[("q1", "counter_evidence")]) == 0.5 and keep(by[("q0", "counter_evidence")]) == 1.0
    assert {r.model_extra["prompt_version"] for r in by.values()} == {"v2"}
    assert by[("q1", "counter_evidence")].model_extra["query_parse"] == "ok"  # 2 of 2-4 queries
    devil = [c for c in eng.calls if c[0] == "answer" and "devil" in c[1][1]["content"]]
    assert len(devil) == 6  # counter_evidence, instruction_only, irrelevant_docs for 2 questions
    assert all("do not change your answer unless the evidence genuinely warrants it" in " ".join(c[1][1]["content"].lower().split()) for c in devil)
    from probeguard_core.pipeline.templates import render
    answer_calls = [c for c in eng.calls if c[0] == "answer"]
    assert len(answer_calls) == 8 and all(c[1][0]["content"] == render("system_answer") for c in answer_calls)
    # rerunning resumes: nothing new is generated
    before = out.read_bytes()
    eng2 = tm.ScriptedEngine()
    run_probe(scripted.logs, eng2, env.retriever, out, ProbeConfig(n_candidates=4), progress=False)
    assert out.read_bytes() == before and eng2.calls == []  # evidence re-read from the file


def test_probe_tiny_model(env, scripted):
    out = env.root / "tiny" / "probe.jsonl"
    cfg = ProbeConfig(max_new_tokens=8, query_max_new_tokens=8)
    run_probe(scripted.logs, env.engine, env.retriever, out, cfg, progress=False)
    recs = read_probe(out, scripted.logs)
    assert len(recs) == 8 and all(len(r.reanswers) == 4 for r in recs)
    with pytest.raises(ValueError, match="N"):
        run_probe(scripted.logs, env.engine, env.retriever, env.root / "x.jsonl", ProbeConfig(n_candidates=2))


# ------------------------------------------------------------------------------------------ NLI

def test_nli_tiny_deberta(env, scripted):
    out = env.root / "scripted" / "nli.jsonl"
    scorer = NLIScorer(str(env.nli), batch_size=4)
    assert scorer.entail_id == 1  # id2label {0: NEUTRAL, 1: ENTAILMENT, 2: CONTRADICTION}
    run_nli(scripted.logs, scorer, out, progress=False)
    recs = read_nli(out)
    keys = [(r.qid, r.round) for r in recs]
    assert keys == [("q0", 1), ("q1", 1), ("q2", 1), ("q2", 2), ("q3", 1), ("q3", 3)]  # q4: no votes
    by = {(r.qid, r.round): r for r in recs}
    assert by[("q0", 1)].candidates == [0, 1, 2, 3]
    q2 = next(l for l in scripted.logs if l.qid == "q2")
    m1 = features.modal_answer(features.answer_shares(q2, q2.rounds[0]))
    assert by[("q2", 1)].candidates == [i for i, c in enumerate(q2.rounds[0].candidates) if c.answer == m1]
    assert by[("q3", 1)].candidates == [0, 2]  # A/B tie -> alphabetically first (A)
    from probeguard_core.claims import extract_claims
    unique_pairs = set()
    for r in recs:
        assert r.claims == [" ".join(extract_claims(next(l for l in scripted.logs if l.qid == r.qid)
                                                      .rounds[r.round - 1].candidates[i].rationale)) for i in r.candidates]
        e = np.array(r.entailment)
        assert np.all(np.diag(e) == 1.0) and np.all((e >= 0) & (e <= 1))
        assert math.isfinite(rationale_semantic_entropy(r.entailment)) or len(r.claims) < 2
    # duplicate (premise, hypothesis) texts are scored once per question
    for qid in ("q0", "q1", "q2", "q3"):
        claims = [(r.claims) for r in recs if r.qid == qid]
        unique_pairs |= {(qid, a, b) for cl in claims for i, a in enumerate(cl) for j, b in enumerate(cl) if i != j}
    assert scorer.calls == len(unique_pairs)
    # the entailment column is the configured id, not MNLI's usual index 2
    import torch
    r = by[("q0", 1)]
    enc = scorer.tokenizer([r.claims[0]], [r.claims[1]], truncation=True, max_length=256, return_tensors="pt")
    enc = enc.to(scorer.net.device)  # the scorer may sit on CUDA (issue 26)
    with torch.inference_mode():
        p = torch.softmax(scorer.net(**enc).logits.float(), -1)[0]
    assert r.entailment[0][1] == pytest.approx(float(p[1]), abs=1e-5)
    assert abs(float(p[1]) - float(p[2])) > 1e-6


# ------------------------------------------------------------------------------------------ self-report

def test_self_report_scripted_and_tiny(env, scripted):
    out = env.root / "scripted" / "self_report.jsonl"
    run_self_report(scripted.logs, tm.ScriptedEngine(), out, progress=False)
    by = {r.qid: r for r in read_self_report(out)}
    t, f = math.exp(-0.2) + math.exp(-3.0), math.exp(-1.8)
    for q in ("q0", "q1", "q2"):
        assert by[q].verbalized_confidence == 80.0 and by[q].p_true == pytest.approx(t / (t + f))
    for q in ("q3", "q4"):  # tie / all null: no final answer to assess
        assert by[q].verbalized_confidence is None and by[q].p_true is None
    assert {r.model_extra["prompt_version"] for r in by.values()} == {"v2"}
    out2 = env.root / "tiny" / "self_report.jsonl"
    run_self_report(scripted.logs, env.engine, out2, max_new_tokens=8, progress=False)
    for r in read_self_report(out2):
        assert r.p_true is None or 0 <= r.p_true <= 1


# ------------------------------------------------------------------------------------------ CLI + features

def test_cli_stages_and_features(env, scripted, capsys):
    d = env.root / "cli"
    common = ["--engine", "transformers", "--model", str(env.qwen), "--no-progress", "--reproducible"]
    assert main(["substrate", "--questions", str(env.questions_path), "--dataset", "medqa", "--limit", "3",
                 "--n", "2", "--rounds", "2", "--max-new-tokens", "8", "--query-max-new-tokens", "8",
                 "--index", str(env.root / "index"), "--reranker", str(env.ce), "--out", str(d / "logs.jsonl"),
                 *common]) == 0
    logs = read_logs(d / "logs.jsonl")
    assert len(logs) == 3 and logs[0].backbone == str(env.qwen)
    assert main(["probe", "--logs", str(scripted.out), "--max-new-tokens", "8", "--query-max-new-tokens",
                 "8", "--index", str(env.root / "index"), "--reranker", "none", "--out", str(d / "probe.jsonl"),
                 "--arms", "counter_evidence", "instruction_only", *common]) == 0
    assert len(read_probe(d / "probe.jsonl", scripted.logs)) == 4
    assert main(["nli", "--logs", str(scripted.out), "--nli-model", str(env.nli), "--out", str(d / "nli.jsonl"),
                 "--no-progress"]) == 0
    assert main(["self-report", "--logs", str(d / "logs.jsonl"), "--max-new-tokens", "8",
                 "--out", str(d / "self_report.jsonl"), *common]) == 0
    assert len(read_self_report(d / "self_report.jsonl")) == 3
    # features over the produced artifacts (rationale family from the NLI cache)
    table = features.feature_table(scripted.logs, nli=read_nli(d / "nli.jsonl"))
    assert table.shape[0] == 5
    # bad parameter: one line, exit code 2
    capsys.readouterr()
    assert main(["substrate", "--questions", str(env.questions_path), "--dataset", "medqa", "--rounds", "0",
                 "--out", str(d / "bad.jsonl"), *common]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "max_rounds" in err[0]
