"""The batched reproducible engine (issue 26, pipeline/batched.py) on a tiny random Qwen3 (CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import tiny_models as tm

from probeguard_core.pipeline.batched import row_uniforms
from probeguard_core.pipeline.engines import TransformersEngine


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return tm.build_tiny_qwen3(tmp_path_factory.mktemp("qwen") / "qwen")


@pytest.fixture(scope="module")
def engine(qwen):
    return TransformersEngine(str(qwen), device="cpu", dtype="float32", batch_prompts=3)


@pytest.fixture(scope="module")
def logs_path(tmp_path_factory):
    """First-round logs with non-null answers (the scripted engine; N = 2, T = 1)."""
    from probeguard_core.pipeline.substrate import SubstrateConfig, run_substrate
    from probeguard_core.questions import load_questions

    root = tmp_path_factory.mktemp("logs")
    qs = load_questions(tm.write_questions(root / "b.json", 5), dataset="medqa")
    cfg = SubstrateConfig(dataset="medqa", backbone="scripted", n_candidates=2, max_rounds=1)
    return run_substrate(qs, tm.ScriptedEngine(), None, root / "logs.jsonl", cfg, progress=False)


def _spy(engine, monkeypatch) -> list[int]:
    """The number of prompts of each later ``engine.generate`` call."""
    sizes: list[int] = []
    real = engine.generate

    def generate(prompts, **kw):
        sizes.append(len(prompts))
        return real(prompts, **kw)

    monkeypatch.setattr(engine, "generate", generate)
    return sizes


def _interrupted_copy(src, dst, lines):
    """``dst``: ``src`` (and its run manifest) as a run killed while writing line ``lines + 1``
    would leave it: ``lines`` whole lines, then part of the next."""
    import shutil

    data = src.read_bytes().splitlines(keepends=True)
    dst.write_bytes(b"".join(data[:lines]) + data[lines][:len(data[lines]) // 2])
    shutil.copy(src.with_name(src.name.replace(".jsonl", ".run.json")), dst.with_name(dst.name.replace(".jsonl", ".run.json")))
    return dst


def test_row_uniforms_keyed_by_seed_sample_and_step():
    u = row_uniforms([5, 9], 3, 10)
    assert u.shape == (6, 10) and np.all((u >= 0) & (u < 1))
    assert np.array_equal(row_uniforms([9], 3, 4), u[3:, :4])  # another chunk, fewer steps: same noise
    assert not np.array_equal(u[0], u[1])


def test_batched_engine_reruns_identical_and_shapes(engine):
    kw = {"n": 3, "temperature": 0.7, "max_new_tokens": 20, "logprobs": 5}
    a = engine.generate(tm.chat_prompts(5), seed=[1, 2, 3, 4, 5], **kw)
    b = engine.generate(tm.chat_prompts(5), seed=[1, 2, 3, 4, 5], **kw)
    assert a == b  # same chunking: byte-identical records
    assert [len(g) for g in a] == [3] * 5
    for gens in a:
        for g in gens:
            assert 1 <= g.n_tokens <= 20 and len(g.first_top_logprobs) == 5
            assert all(lp <= 0 for lp in g.token_logprobs)
    assert len({g.text for gens in a for g in gens}) > 1  # sampling, not one repeated string


def test_batched_greedy_matches_reference_tokens(engine):
    ref = TransformersEngine.__new__(TransformersEngine)
    ref.__dict__.update(engine.__dict__, batch_prompts=None, fast=False)
    kw = {"n": 1, "temperature": 0.0, "max_new_tokens": 10, "seed": 1, "logprobs": 5}
    got = engine.generate(tm.chat_prompts(4), **kw)
    want = ref.generate(tm.chat_prompts(4), **kw)
    assert [g[0].text for g in got] == [g[0].text for g in want]
    for x, y in zip(got, want):
        assert x[0].token_logprobs == pytest.approx(y[0].token_logprobs, abs=1e-4)


def test_batched_rejects_force_tag(engine):
    with pytest.raises(ValueError, match="batched engine"):
        engine.generate(tm.chat_prompts(1), n=1, temperature=0.7, max_new_tokens=8, seed=1, force_tag=("<a>", "</a>"))


def test_substrate_with_batched_engine_records_chunking_and_resumes(engine, tmp_path):
    import json

    from probeguard_core.pipeline.substrate import SubstrateConfig, run_substrate
    from probeguard_core.questions import load_questions

    qs = load_questions(tm.write_questions(tmp_path / "b.json", 5), dataset="medqa")
    cfg = SubstrateConfig(dataset="medqa", backbone="tiny", n_candidates=2, max_rounds=1, max_new_tokens=12)
    full = tmp_path / "full.jsonl"
    run_substrate(qs, engine, None, full, cfg, batch_size=3, reproducible=True, progress=False)
    run_cfg = json.loads((tmp_path / "full.run.json").read_text())
    assert (run_cfg["batch_prompts"], run_cfg["batch_size"]) == (3, 3)
    # a run stopped after its first chunk, then resumed: the same chunks, the same bytes
    part = tmp_path / "part.jsonl"
    run_substrate(qs[:3], engine, None, part, cfg, batch_size=3, reproducible=True, progress=False)
    run_substrate(qs, engine, None, part, cfg, batch_size=3, reproducible=True, progress=False)
    assert part.read_bytes() == full.read_bytes()
    with pytest.raises(ValueError, match="different settings"):
        run_substrate(qs, engine, None, full, cfg, batch_size=2, reproducible=True, progress=False)


def test_self_report_batched_records_chunking_and_resumes_whole_chunks(engine, logs_path, tmp_path, monkeypatch):
    import json

    from probeguard_core.features import final_answer
    from probeguard_core.logs import read_logs
    from probeguard_core.pipeline.self_report import run_self_report

    logs = read_logs(logs_path)
    kw = {"max_new_tokens": 6, "batch_size": 2, "progress": False}
    full = run_self_report(logs, engine, tmp_path / "full.jsonl", **kw)
    run_cfg = json.loads((tmp_path / "full.run.json").read_text())
    assert (run_cfg["batch_prompts"], run_cfg["batch_size"]) == (3, 2)
    # killed while writing the chunk (q0, q1): the resumed run decodes that chunk whole, as the
    # uninterrupted run did, not a chunk cut from what is left (q1, q2; q2 is a tie: not asked)
    part = _interrupted_copy(full, tmp_path / "part.jsonl", 1)
    sizes = _spy(engine, monkeypatch)
    run_self_report(logs, engine, part, **kw)
    monkeypatch.undo()
    asked = sum(final_answer(log) is not None for log in logs[0:2])
    assert asked == 2 and sizes == [asked, asked]  # verbalized confidence, P(True)
    assert part.read_bytes() == full.read_bytes()
    with pytest.raises(ValueError, match=r"full\.run\.json") as err:
        run_self_report(logs, engine, full, max_new_tokens=6, batch_size=3, progress=False)
    assert "different settings ['batch_size']" in str(err.value)


def test_self_report_cli_refuses_other_batch_prompts_on_resume(qwen, logs_path, tmp_path, capsys):
    from probeguard_core.cli import main

    out = tmp_path / "sr.jsonl"
    cmd = ["self-report", "--logs", str(logs_path), "--engine", "transformers", "--model", str(qwen), "--device",
           "cpu", "--max-new-tokens", "4", "--batch-size", "2", "--no-progress", "--out", str(out)]
    assert main([*cmd, "--batch-prompts", "2"]) == 0
    before = out.read_bytes()
    capsys.readouterr()
    assert main([*cmd, "--batch-prompts", "1"]) == 2
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("Loading weights")]
    assert len(err) == 1 and "sr.run.json" in err[0] and "['batch_prompts']" in err[0]
    assert out.read_bytes() == before
    assert main([*cmd, "--compile-decode"]) == 2  # an option of the batched engine only
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "set batch_prompts" in err[0]


def test_probe_batched_records_chunking_and_resumes_whole_chunks(engine, logs_path, tmp_path, monkeypatch):
    import json

    from probeguard_core.logs import read_logs, read_probe
    from probeguard_core.pipeline.probe_run import ProbeConfig, run_probe
    from probeguard_core.pipeline.retrieval import BM25Index, Retriever
    from probeguard_core.questions import load_corpus

    logs = read_logs(logs_path)
    retriever = Retriever(BM25Index.build(load_corpus(tm.write_corpus(tmp_path / "c.jsonl", 30))), None)
    cfg = ProbeConfig(max_new_tokens=6, query_max_new_tokens=6)
    full = run_probe(logs, engine, retriever, tmp_path / "full.jsonl", cfg, batch_size=1, reproducible=True,
                     progress=False)
    run_cfg = json.loads((tmp_path / "full.run.json").read_text())
    assert (run_cfg["batch_prompts"], run_cfg["batch_size"]) == (3, 1)
    recs = read_probe(full, logs)
    assert [(r.qid, r.arm) for r in recs][:3] == [("q0", "counter_evidence"), ("q0", "instruction_only"),
                                                  ("q0", "neutral_instruction")]
    # killed while writing q0's third arm: its chunk is re-answered whole, the missing record appended
    part = _interrupted_copy(full, tmp_path / "part.jsonl", 2)
    sizes = _spy(engine, monkeypatch)
    run_probe(logs, engine, retriever, part, cfg, batch_size=1, reproducible=True, progress=False)
    monkeypatch.undo()
    assert sizes[:3] == [1, 1, 1]  # q0's three first-pass arms; its written evidence is not asked again
    assert part.read_bytes() == full.read_bytes()
    with pytest.raises(ValueError, match=r"full\.run\.json") as err:
        run_probe(logs, engine, retriever, full, cfg, batch_size=2, reproducible=True, progress=False)
    assert "different settings ['batch_size']" in str(err.value)


def test_static_cache_decode_matches_dynamic_within_tolerance(qwen, engine, monkeypatch, tmp_path):
    import transformers

    made = []

    class Counted(transformers.StaticCache):
        def __init__(self, *a, **kw):
            made.append(kw.get("max_cache_len"))
            super().__init__(*a, **kw)

    static = TransformersEngine(str(qwen), device="cpu", dtype="float32", batch_prompts=3, static_cache=True)
    assert static.decode == "static" and engine.decode == "dynamic"
    monkeypatch.setattr(transformers, "StaticCache", Counted)
    kw = {"n": 1, "temperature": 0.0, "max_new_tokens": 12, "seed": 1, "logprobs": 5}
    got = static.generate(tm.chat_prompts(5), **kw)
    assert len(made) == 2 and made[0] == made[1] and made[0] % 64 == 0  # two chunks, one bucketed length
    want = engine.generate(tm.chat_prompts(5), **kw)
    assert [g[0].text for g in got] == [g[0].text for g in want]  # the documented tolerance: tokens equal,
    for x, y in zip(got, want):  # log-probs within 1e-4
        assert x[0].token_logprobs == pytest.approx(y[0].token_logprobs, abs=1e-4)
        assert [t for t, _ in x[0].first_top_logprobs] == [t for t, _ in y[0].first_top_logprobs]
    sampled = static.generate(tm.chat_prompts(4), n=3, temperature=0.7, max_new_tokens=12, seed=[1, 2, 3, 4],
                              logprobs=5)
    assert sampled == static.generate(tm.chat_prompts(4), n=3, temperature=0.7, max_new_tokens=12, seed=[1, 2, 3, 4],
                                      logprobs=5)  # reruns byte-identical
    assert [len(g) for g in sampled] == [3] * 4 and all(1 <= x.n_tokens <= 12 for g in sampled for x in g)
    # the manifest records the decode mode: a resume with the dynamic cache is refused
    from probeguard_core.pipeline.runio import chunking_config

    assert chunking_config(static, 4) == {"batch_prompts": 3, "batch_size": 4, "decode": "static"}
    assert "decode" not in chunking_config(engine, 4)


def test_compile_decode_falls_back_with_one_line_note(qwen, monkeypatch, capsys):
    from probeguard_core.pipeline import batched

    monkeypatch.setattr(batched, "_compile_unsupported", lambda device: "no C++ compiler")
    capsys.readouterr()
    eng = TransformersEngine(str(qwen), device="cpu", dtype="float32", batch_prompts=2, compile_decode=True)
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("compile_decode")]
    assert eng.decode in batched.DECODE_MODES and eng.decode == "static" and err == ["compile_decode: torch.compile does not run here (no C++ compiler); "
                                              "decoding with the static cache, uncompiled"]
    ref = TransformersEngine(str(qwen), device="cpu", dtype="float32", batch_prompts=2, compile_decode=True, fast=False)
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("compile_decode")]
    assert ref.decode == "dynamic" and len(err) == 1 and "reference path" in err[0] and "dynamic cache" in err[0]
    with pytest.raises(ValueError, match="set batch_prompts"):
        TransformersEngine(str(qwen), device="cpu", dtype="float32", compile_decode=True)
