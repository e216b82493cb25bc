"""The CPU transformers engine's fast path (issue 15, e-real): prefill once, N continuations
from the shared KV cache, prompts batched; checked against the straightforward ``generate``
loop on a tiny random Qwen3 (seconds on CPU)."""

from __future__ import annotations

import pytest
import tiny_models as tm

from probeguard_core.pipeline.engines import TransformersEngine, _vllm_logprob_arrays


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    folder = tm.build_tiny_qwen3(tmp_path_factory.mktemp("qwen") / "qwen")
    return TransformersEngine(str(folder), device="cpu", dtype="float32", max_batch_rows=12)


def test_fast_path_samples_the_same_tokens_as_generate(engine):
    kw = {"n": 4, "temperature": 0.7, "max_new_tokens": 12, "seed": [5, 6, 7], "logprobs": 5}
    engine.fast = False
    ref = engine.generate(tm.chat_prompts(3), **kw)
    engine.fast = True
    fast = engine.generate(tm.chat_prompts(3), **kw)
    for fa, ra in zip(fast, ref):
        for f, r in zip(fa, ra):
            assert (f.text, f.n_tokens) == (r.text, r.n_tokens)
            assert f.token_logprobs == pytest.approx(r.token_logprobs, abs=1e-4)
            assert f.token_entropies == pytest.approx(r.token_entropies, abs=1e-4)
            assert [t for t, _ in f.first_top_logprobs] == [t for t, _ in r.first_top_logprobs]


def test_greedy_and_without_logprobs(engine):
    engine.fast = False
    ref = engine.generate(tm.chat_prompts(2), n=1, temperature=0.0, max_new_tokens=10, seed=1, logprobs=None)
    engine.fast = True
    fast = engine.generate(tm.chat_prompts(2), n=1, temperature=0.0, max_new_tokens=10, seed=1, logprobs=None)
    assert [g[0].text for g in fast] == [g[0].text for g in ref]
    assert fast[0][0].token_logprobs is None


def test_fast_path_is_deterministic_and_chunking_invariant_per_prompt_seed(engine):
    kw = {"n": 3, "temperature": 0.7, "max_new_tokens": 10, "logprobs": 5}
    a = engine.generate(tm.chat_prompts(4), seed=[1, 2, 3, 4], **kw)
    b = engine.generate(tm.chat_prompts(4), seed=[1, 2, 3, 4], **kw)
    assert a == b  # byte-identical records for the same call
    engine.max_batch_rows = 3  # one prompt per batch: same tokens
    c = engine.generate(tm.chat_prompts(4), seed=[1, 2, 3, 4], **kw)
    engine.max_batch_rows = 12
    assert [[g.text for g in x] for x in a] == [[g.text for g in x] for x in c]


def test_forced_answer_tag(engine):
    opener, closer = "\n<answer>", "</answer>"
    engine.forced_rows = engine.tagged_rows = 0
    out = engine.generate(tm.chat_prompts(2), n=3, temperature=0.7, max_new_tokens=14, seed=[3, 4], logprobs=5,
                          force_tag=(opener, closer))
    for gens in out:
        for g in gens:
            assert "<answer>" in g.text and g.text.endswith(closer) or g.n_tokens == 14
            # forced tokens are not sampled: fewer log-probs than tokens
            assert len(g.token_logprobs) < g.n_tokens
    assert engine.forced_rows + engine.tagged_rows == 6
    with pytest.raises(ValueError, match="no room"):
        engine.generate(tm.chat_prompts(1), n=1, temperature=0.7, max_new_tokens=3, seed=1, force_tag=(opener, closer))
    engine.fast = False
    with pytest.raises(ValueError, match="fast path"):
        engine.generate(tm.chat_prompts(1), n=1, temperature=0.7, max_new_tokens=8, seed=1, force_tag=(opener, closer))
    engine.fast = True


def test_vllm_logprob_arrays_sorted_best_first_ties_by_id():
    class LP:
        def __init__(self, x):
            self.logprob = x

    per = [{5: LP(-1.0), 2: LP(-0.5), 9: LP(-1.0)}, {1: LP(-0.1), 3: LP(-3.0)}]
    sampled, (ids, lps) = _vllm_logprob_arrays([9, 3], per, 2)
    assert sampled.tolist() == [-1.0, -3.0]
    assert ids.tolist() == [[2, 5], [1, 3]] and lps.tolist() == [[-0.5, -1.0], [-0.1, -3.0]]


def test_response_prefix_is_forced_and_not_counted(engine):
    for fast in (True, False):
        engine.fast = fast
        (g,), = engine.generate(tm.chat_prompts(1), n=1, temperature=0.0, max_new_tokens=6, seed=1, logprobs=None,
                                response_prefix="[Query 1]")
        assert g.text.startswith("[Query 1]") and g.n_tokens <= 6
    engine.fast = True
