"""``simulate.draws.U32Run`` gives the values of numpy's own bounded draws and leaves the generator
where numpy's calls leave it (issue 15: the simulator's speed, never its numbers)."""

from __future__ import annotations

import numpy as np
import pytest

from probeguard_core.simulate.draws import U32Run, n_sample_draws


def _after(rng: np.random.Generator) -> tuple[float, int, int]:
    """Draws that expose the generator's state, the 32-bit half buffer included."""
    return float(rng.random()), int(rng.integers(7)), int(rng.integers(1 << 31))


@pytest.mark.parametrize("seed", range(40))
def test_run_equals_numpy_scalar_draws(seed: int) -> None:
    ref, mine = np.random.default_rng(seed), np.random.default_rng(seed)
    for r in (ref, mine):  # an odd number of 32-bit draws before: the run starts on a buffered half
        for _ in range(seed % 3):
            r.integers(5)
        r.standard_normal()
    src = np.random.default_rng(1000 + seed)
    plan = []
    for _ in range(60):
        n = int(src.integers(1, 40))
        plan.append(("sample", n, int(src.integers(0, n + 1))) if src.random() < 0.3 else ("below", int(src.integers(1, 50)), 0))
    want = [ref.choice(n, size=k, replace=False).tolist() if op == "sample" else int(ref.integers(n)) for op, n, k in plan]
    run = U32Run(mine, sum(n_sample_draws(n, k) if op == "sample" else int(n > 1) for op, n, k in plan))
    got = [run.sample(n, k) if op == "sample" else run.below(n) for op, n, k in plan]
    run.close()
    assert got == want
    assert _after(mine) == _after(ref)


@pytest.mark.parametrize("seed", range(200))
def test_run_rejection_steps_draw_beyond_the_plan(seed: int) -> None:
    """Bounds near 2**32 reject often: the extra values come from the stream, as numpy's do."""
    highs = [(1 << 32) - 1 - seed, 3 * (1 << 30) + 7 * seed, (1 << 31) + 1 + seed]
    ref, mine = np.random.default_rng(seed), np.random.default_rng(seed)
    want = [int(ref.integers(h)) for h in highs]
    run = U32Run(mine, len(highs))
    assert [run.below(h) for h in highs] == want
    run.close()
    assert _after(mine) == _after(ref)


def test_under_planned_run_is_exact_and_over_planned_run_is_refused() -> None:
    ref, mine = np.random.default_rng(3), np.random.default_rng(3)
    want = [int(ref.integers(h)) for h in (9, 1, 4, 30)]
    run = U32Run(mine, 1)  # fewer than taken: the rest are drawn one by one
    assert [run.below(h) for h in (9, 1, 4, 30)] == want
    run.close()
    assert _after(mine) == _after(ref)
    run = U32Run(np.random.default_rng(3), 3)
    run.below(9)
    with pytest.raises(RuntimeError, match="2 of 3 fetched draws unused"):
        run.close()


def test_n_sample_draws_counts_numpy_picks() -> None:
    assert n_sample_draws(10, 0) == 0
    assert n_sample_draws(10, 3) == 3 + 2
    assert n_sample_draws(3, 3) == 2 + 2  # the pick among one value takes no draw
