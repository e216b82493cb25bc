"""The simulator's vectorized helpers equal their row-by-row definitions (issue 15: speed, not semantics)."""

from __future__ import annotations

import numpy as np
import pytest

from probeguard_core.simulate import model as M


@pytest.mark.parametrize("k", [2, 3, 4, 5, 10])
@pytest.mark.parametrize("n_cand", [1, 3, 8])
def test_final_indices_equal_final_index_row_by_row(k: int, n_cand: int) -> None:
    rng = np.random.default_rng(42)
    votes = rng.integers(-1, k, size=(3000, n_cand))
    votes[:50] = -1  # all-null rows: no plurality
    got = M.final_indices(votes, k)
    want = np.array([M.final_index(r, k) for r in votes])
    assert got.dtype.kind == "i" and (got == want).all()
    # the calibration averages "flipped" rows: the same float either way
    assert float(np.mean(got != 0)) == float(np.mean([M._flipped_row(r, k, 0) for r in votes]))


@pytest.mark.parametrize("state", M.STATES)
def test_contested_panel_equals_run_dynamics(state: str) -> None:
    """The calibration's replayed panel (shared between calibrations, memo included) gives the
    rates of simulating each question with :func:`model.run_dynamics` at that eta."""
    params = M.load_params()
    bb, mech, panel = params["backbones"]["Qwen/Qwen3-8B"], params["mechanism"], params["panel"]
    N, T, D, pn = 8, int(M.v(panel["max_rounds"])), int(M.v(panel["docs_per_round"])), float(M.v(panel["parse_failure_rate"]))
    k, n = 4, 60
    shared = M._panels(k, n, M._Inputs((bb, mech, panel)))[state]
    for eta in (0.0, 0.7, 2.5, 8.0, 0.7):  # a repeated eta walks the memo only
        contested = right = 0
        for j in range(n):
            rng = M.rng_for("calibrate-dyn", state, k, j)
            d = M._difficulty(rng, state, bb)
            v1 = M._votes(rng, M.round1_probs(rng, state, d, k, 0, 1, bb), N, pn)
            if M._unanimous(v1):
                continue
            tr = M.run_dynamics(rng, state, d, k, 0, 1, v1, mech, eta, N, T, D, pn)
            contested += 1
            right += M.final_index(tr.votes[-1], k) == 0
        assert shared.rates(eta) == (contested / n, right / n)


def test_calibrations_sharing_panels_equal_cold_ones() -> None:
    """The what-if and drift calibrations of one process share panels and round-1 rates: each
    equals the calibration computed with nothing shared."""
    from dataclasses import asdict

    from probeguard_core.simulate.drift import drifted_params

    texts = [M.yaml.safe_dump(drifted_params("medqa/qwen3-8b", s), sort_keys=True) for s in (0.0, 0.2)]
    cold = []
    for text in texts:
        for cache in (M._panels, M._round1_table, M._calibrate_cached):
            cache.cache_clear()
        cold.append(asdict(M._calibrate_cached("medqa/qwen3-8b", text)))
    M._calibrate_cached.cache_clear()
    warm = [asdict(M._calibrate_cached("medqa/qwen3-8b", text)) for text in texts]  # the second reuses the panels
    assert M._panels.cache_info().hits >= 1
    assert warm == cold


def test_whatif_layers_share_the_question_bank() -> None:
    """The what-if layers of one page reuse their questions across error rates; each equals the
    question drawn from the full (rate-edited) parameters."""
    from probeguard_core.simulate import whatif as W

    W._layer_questions.cache_clear()
    W.simulate_unanimous_layer(6, 0.05, seed=3, arms=("counter_evidence",))
    W.simulate_unanimous_layer(6, 0.25, seed=3, arms=("counter_evidence",))
    assert W._layer_questions.cache_info().hits == 1
    params = M.load_params()
    params["cells"]["medqa/qwen3-8b"]["unanimous_error"] = {"value": 0.25, "assumed": "test"}
    shared = W._layer_questions(6, 3, M._Inputs(({k: params[k] for k in ("datasets", "mechanism")},)))
    assert list(shared) == [M.make_question("medqa", i, params, labelled=False, pool="-whatif3") for i in range(6)]
