"""The simulator's vectorized helpers equal their row-by-row definitions (issue 15: speed, not semantics)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from probeguard_core.simulate import bank as B
from probeguard_core.simulate import calibration as CA
from probeguard_core.simulate import dynamics as DY
from probeguard_core.simulate import params as P


@pytest.mark.parametrize("k", [2, 3, 4, 5, 10])
@pytest.mark.parametrize("n_cand", [1, 3, 8])
def test_final_indices_equal_final_index_row_by_row(k: int, n_cand: int) -> None:
    rng = np.random.default_rng(42)
    votes = rng.integers(-1, k, size=(3000, n_cand))
    votes[:50] = -1  # all-null rows: no plurality
    got = DY.final_indices(votes, k)
    want = np.array([DY.final_index(r, k) for r in votes])
    assert got.dtype.kind == "i" and (got == want).all()
    # the calibration averages "flipped" rows: the same float either way
    assert float(np.mean(got != 0)) == float(np.mean([CA._flipped_row(r, k, 0) for r in votes]))


@pytest.mark.parametrize("state", P.STATES)
def test_contested_panel_equals_run_dynamics(state: str) -> None:
    """The calibration's replayed panel (shared between calibrations, memo included) gives the
    rates of simulating each question with :func:`dynamics.run_dynamics` at that eta."""
    params = P.load_params()
    bb, mech, panel = params["backbones"]["Qwen/Qwen3-8B"], params["mechanism"], params["panel"]
    N, T, D, pn = 8, int(P.v(panel["max_rounds"])), int(P.v(panel["docs_per_round"])), float(P.v(panel["parse_failure_rate"]))
    k, n = 4, 60
    shared = CA._panels(k, n, P.Sections((bb, mech, panel)))[state]
    for eta in (0.0, 0.7, 2.5, 8.0, 0.7):  # a repeated eta walks the memo only
        contested = right = 0
        for j in range(n):
            rng = P.rng_for("calibrate-dyn", state, k, j)
            d = DY.draw_difficulty(rng, state, bb)
            v1 = DY.draw_votes(rng, DY.round1_probs(rng, state, d, k, 0, 1, bb), N, pn)
            if DY.is_unanimous(v1):
                continue
            tr = DY.run_dynamics(rng, state, d, k, 0, 1, v1, mech, eta, N, T, D, pn)
            contested += 1
            right += DY.final_index(tr.votes[-1], k) == 0
        assert shared.rates(eta) == (contested / n, right / n)


def test_calibrations_sharing_panels_equal_cold_ones() -> None:
    """The what-if and drift calibrations of one process share panels and round-1 rates: each
    equals the calibration computed with nothing shared."""
    from dataclasses import asdict

    from probeguard_core.simulate.drift import drifted_params

    texts = [yaml.safe_dump(drifted_params("medqa/qwen3-8b", s), sort_keys=True) for s in (0.0, 0.2)]
    cold = []
    for text in texts:
        for cache in (CA._panels, CA._round1_table, CA._calibrate_cached):
            cache.cache_clear()
        cold.append(asdict(CA._calibrate_cached("medqa/qwen3-8b", text)))
    CA._calibrate_cached.cache_clear()
    warm = [asdict(CA._calibrate_cached("medqa/qwen3-8b", text)) for text in texts]  # the second reuses the panels
    assert CA._panels.cache_info().hits >= 1
    assert warm == cold


def test_whatif_layers_share_the_question_bank() -> None:
    """The what-if layers of one page reuse their questions across error rates; each equals the
    question drawn from the full (rate-edited) parameters."""
    from probeguard_core.simulate import whatif as W

    W._layer_questions.cache_clear()
    W.simulate_unanimous_layer(6, 0.05, seed=3, arms=("counter_evidence",))
    W.simulate_unanimous_layer(6, 0.25, seed=3, arms=("counter_evidence",))
    assert W._layer_questions.cache_info().hits == 1
    params = P.load_params()
    params["cells"]["medqa/qwen3-8b"]["unanimous_error"] = {"value": 0.25, "assumed": "test"}
    shared = W._layer_questions(6, 3, P.Sections(({k: params[k] for k in ("datasets", "mechanism")},)))
    assert list(shared) == [B.make_question("medqa", i, params, labelled=False, pool="-whatif3") for i in range(6)]
