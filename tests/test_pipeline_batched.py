"""The batched reproducible engine (issue 26, pipeline/batched.py) on a tiny random Qwen3 (CPU)."""

from __future__ import annotations

import numpy as np
import pytest
import tiny_models as tm

from probeguard_core.pipeline.batched import row_uniforms
from probeguard_core.pipeline.engines import TransformersEngine


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = tm.build_tiny_qwen3(tmp_path_factory.mktemp("qwen") / "qwen")
    return TransformersEngine(str(folder), device="cpu", dtype="float32", batch_prompts=3)


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
