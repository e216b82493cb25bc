"""Substrate profiles (issue 11 section 2): ``ma-rag`` behaves as MA-RAG 423f031 does, point by
point; ``probeguard`` is ours.  Tiny models and the scripted engine, CPU only."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import tiny_models as tm

from probeguard_core.logs import Candidate, read_logs, read_probe
from probeguard_core.pipeline.engines import TransformersEngine
from probeguard_core.pipeline.probe_run import ProbeConfig, run_probe
from probeguard_core.pipeline.profiles import PROFILES, get_profile, marag_judger
from probeguard_core.pipeline.retrieval import IndexedDoc, Retriever
from probeguard_core.pipeline.substrate import SubstrateConfig, answers_block, run_substrate, stops

MA, OURS = PROFILES["ma-rag"], PROFILES["probeguard"]
OPTS = {"A": "a", "B": "b", "C": "c", "D": "d"}


@pytest.mark.parametrize("text, pred", [
    ("... <answer>B</answer>", "B"),
    ("<answer>A</answer> later <answer>C</answer>", "C"),       # last tag
    ("<answer>A or B</answer>", "B"),                              # alphabetically last capital
    ("<answer>Option C</answer>", "O"),                            # 'O' > 'C': not an option key
    ("<answer>b</answer>", ""),                                    # no capital: ''
    ("<answer>\nB\n</answer>", ""),                                # the tag regex does not cross lines
    ("Final Answer: D because of X", "X"),                         # no tags: after the marker, last letter
    ("I think it is B.", "I"),                                     # no tags, no marker: stand-alone capitals
    ("no letters here", ""),
])
def test_marag_judger(text, pred):
    assert marag_judger(text) == pred
    ours = OURS.predict(text, OPTS)
    assert ours is None or ours in OPTS  # ours never keeps a non-option letter


def test_answer_mapping_and_unanimity():
    # '' and non-option letters are null in the log; MA-RAG's stop test reads the raw predictions
    assert MA.answer("", OPTS) is None and MA.answer("O", OPTS) is None and MA.answer("B", OPTS) == "B"
    assert MA.unanimous(["", "", ""]) and not OURS.unanimous([None, None, None])
    assert MA.unanimous(["A", "A"]) and OURS.unanimous(["A", "A"]) and not MA.unanimous(["A", ""])
    nulls = [Candidate(answer=None, rationale="x", logprob=None, n_tokens=1, mean_token_entropy=None,
                       prediction="") for _ in range(3)]
    assert stops(nulls, MA) and not stops(nulls, OURS)


def test_documents_options_and_entropy_order():
    docs = [IndexedDoc("d1", "T1", "c1"), IndexedDoc("d2", "T2", "c2")]
    assert MA.render_documents(docs) == "c1\nc2" and MA.render_documents([]) == ""
    assert OURS.render_documents(docs) == "Document [1] (Title: T1) c1\nDocument [2] (Title: T2) c2"
    assert OURS.render_documents([]) == "null"
    opts = {"B": "b", "A": "a", "C": " ", "D": ""}
    assert MA.format_options(opts) == "B. b\nA. a" and OURS.format_options(opts) == "A. a\nB. b\nC.  \nD. "
    ents = [0.5, 0.9, 0.5, None]
    assert OURS.entropy_order(ents) == [3, 1, 0, 2] and MA.entropy_order(ents) == [3, 1, 2, 0]
    cands = [Candidate(answer="A", rationale=f"r{i}", logprob=None, n_tokens=1, mean_token_entropy=e)
             for i, e in enumerate(ents)]
    assert "(Entropy nan):\nr3" in answers_block(cands, True, MA) and "(Entropy n/a)" in answers_block(cands, True, OURS)
    assert MA.queries("[Query 1] a\n[Query 2] b\n[Query 3] a\n[Query 4] c\n[Query 5] d\n[Query6] e") == ["a", "b", "c", "d"]
    assert OURS.queries("[Query 1] a\n[Query 2] b\n[Query 3] c\n[Query 4] d\n[Query 5] e") == ["a", "b", "c", "d"]
    assert len(MA.queries("\n".join(f"[Query {i}] q{i}" for i in range(6)))) == 6  # no cap in MA-RAG
    assert get_profile("ma-rag") is MA
    with pytest.raises(ValueError, match="unknown substrate profile"):
        get_profile("x")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        yield tm.pipeline_env(tmp_path_factory.mktemp("profiles"))


def test_reranker_reads_content_only_under_marag(env):
    seen: list[list[str]] = []
    real = env.retriever.reranker.score

    def spy(query, texts):
        seen.append(list(texts))
        return real(query, texts)

    r = Retriever(env.retriever.index, env.retriever.reranker)
    r.reranker = SimpleNamespace(score=spy, model="spy")
    r.per_query("anemia iron", "content")
    r.per_query("anemia iron", "title+content")
    by_content = {d.content for d in r.index.docs}
    assert seen[0] and all(t in by_content for t in seen[0])
    assert all(t not in by_content for t in seen[1])  # title + content


def test_scripted_substrate_under_both_profiles(env):
    """q4's replies carry no tag and say "I cannot decide": MA-RAG's judger reads 'I' eight times,
    a unanimous round, and stops at round 1; ours sees nulls, never unanimous, and runs T rounds."""
    runs = {}
    for name in ("probeguard", "ma-rag"):
        out = env.root / name / "logs.jsonl"
        cfg = SubstrateConfig(dataset="medqa", backbone="scripted", n_candidates=4, max_rounds=3, profile=name)
        eng = tm.ScriptedEngine()
        run_substrate(env.questions, eng, env.retriever, out, cfg, progress=False)
        runs[name] = (read_logs(out), eng)
        assert {l.model_extra["substrate_profile"] for l in runs[name][0]} == {name}
    ours = {l.qid: l for l in runs["probeguard"][0]}
    ma = {l.qid: l for l in runs["ma-rag"][0]}
    assert len(ours["q4"].rounds) == 3 and len(ma["q4"].rounds) == 1
    assert all(c.answer is None and c.model_extra["prediction"] == "I" for c in ma["q4"].rounds[0].candidates)
    assert "prediction" not in (ours["q0"].rounds[0].candidates[0].model_extra or {})
    # documents shown in round 2: content only (MA-RAG) vs titled (ours)
    later = lambda eng: [c for c in eng.calls if c[0] == "answer" and "### Documents" in c[1][1]["content"]]
    assert later(runs["probeguard"][1]) and all("(Title:" in c[1][1]["content"] for c in later(runs["probeguard"][1]))
    assert later(runs["ma-rag"][1]) and not any("(Title:" in c[1][1]["content"] for c in later(runs["ma-rag"][1]))
    # the probe reuses the profile's machinery and records it
    out = env.root / "ma-rag" / "probe.jsonl"
    run_probe(runs["ma-rag"][0], tm.ScriptedEngine(), env.retriever, out, ProbeConfig(profile="ma-rag"), progress=False)
    recs = read_probe(out, runs["ma-rag"][0])
    assert recs and {r.model_extra["substrate_profile"] for r in recs} == {"ma-rag"}


def test_tiny_model_marag_profile_samples_like_qwen3(env):
    cfg = SubstrateConfig(dataset="medqa", backbone="tiny", n_candidates=2, max_rounds=2, max_new_tokens=8,
                          query_max_new_tokens=8, profile="ma-rag")
    with pytest.raises(ValueError, match="top_k=20, top_p=0.95"):
        run_substrate(env.questions[:1], TransformersEngine(str(env.qwen)), env.retriever,
                      env.root / "bad.jsonl", cfg, progress=False)
    out = env.root / "tiny-marag.jsonl"
    run_substrate(env.questions[:2], TransformersEngine(str(env.qwen), top_k=20, top_p=0.95), env.retriever, out, cfg,
                  progress=False)
    logs = read_logs(out)
    assert all(isinstance(c.model_extra["prediction"], str) for l in logs for r in l.rounds for c in r.candidates)
    run = json.loads(out.with_name("tiny-marag.run.json").read_text())
    assert (run["profile"], run["top_k"], run["top_p"]) == ("ma-rag", 20, 0.95)
