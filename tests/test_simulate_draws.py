"""``simulate.draws.Draws`` gives the values of numpy's own scalar draws and leaves the generator
where numpy's calls leave it (issue 15: the simulator's speed, never its numbers)."""

from __future__ import annotations

import numpy as np
import pytest

from probeguard_core.simulate.draws import Draws, draws_of, weighted_sample


def _after(rng: np.random.Generator) -> tuple[float, int, int, float]:
    """Draws that expose the generator's state, the 32-bit half buffer included."""
    return float(rng.random()), int(rng.integers(7)), int(rng.integers(1 << 31)), float(rng.standard_normal())


def _plan(seed: int, n: int = 80) -> list[tuple[str, int, int]]:
    src = np.random.default_rng(1000 + seed)
    plan = []
    for _ in range(n):
        op = ("below", "between", "uniform", "sample", "normal")[int(src.integers(5))]
        hi = int(src.integers(1, 60))
        plan.append((op, hi, int(src.integers(0, hi + 1))))
    return plan


def _numpy(rng: np.random.Generator, op: str, a: int, b: int) -> object:
    if op == "below":
        return int(rng.integers(a))
    if op == "between":
        return int(rng.integers(b, b + a))
    if op == "uniform":
        return float(rng.random())
    if op == "sample":
        return rng.choice(a, size=b, replace=False).tolist()
    return float(rng.standard_normal())


def _ours(dr: Draws, rng: np.random.Generator, op: str, a: int, b: int) -> object:
    if op == "below":
        return dr.below(a)
    if op == "between":
        return dr.between(b, b + a)
    if op == "uniform":
        return dr.uniform()
    if op == "sample":
        return dr.sample(a, b)
    return float(rng.standard_normal())  # numpy's own draw, interleaved with ours


@pytest.mark.parametrize("seed", range(40))
def test_draws_equal_numpy_scalar_draws_in_any_interleaving(seed: int) -> None:
    ref, mine = np.random.default_rng(seed), np.random.default_rng(seed)
    for r in (ref, mine):  # an odd number of 32-bit draws first: the next one is PCG64's buffered half
        for _ in range(seed % 3):
            r.integers(5)
    dr = Draws(mine)
    plan = _plan(seed)
    assert [_ours(dr, mine, *step) for step in plan] == [_numpy(ref, *step) for step in plan]
    assert _after(mine) == _after(ref)


@pytest.mark.parametrize("seed", range(200))
def test_bounds_near_2_32_reject_and_redraw_as_numpy_does(seed: int) -> None:
    highs = [(1 << 32) - 1 - seed, 3 * (1 << 30) + 7 * seed, (1 << 31) + 1 + seed]
    ref, mine = np.random.default_rng(seed), np.random.default_rng(seed)
    want = [int(ref.integers(h)) for h in highs]
    assert [Draws(mine).below(h) for h in highs] == want
    assert _after(mine) == _after(ref)


def test_draws_of_reuses_a_draws_and_wraps_a_generator() -> None:
    rng = np.random.default_rng(1)
    dr = Draws(rng)
    assert draws_of(dr) is dr
    assert isinstance(draws_of(rng), Draws)
    assert Draws(np.random.default_rng(5)).below(1) == 0  # one value: no draw, as numpy
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    Draws(a).below(1)
    assert _after(a) == _after(b)


@pytest.mark.parametrize("seed", range(120))
def test_weighted_sample_equals_numpy_choice_with_p(seed: int) -> None:
    n = 2 + seed % 45
    size = 1 + (seed // 3) % n
    w = 1.0 / (1.0 + np.arange(n)) ** (0.2 + 0.4 * (seed % 4))  # the simulator's rank-biased pools
    if seed % 10 == 0:
        w = np.ones(n)
    if seed % 7 == 0 and n > size + 1:
        w[-1] = 0.0  # a zero weight is never picked
    p = w / w.sum()
    ref, mine = np.random.default_rng(seed), np.random.default_rng(seed)
    assert weighted_sample(mine, p, size) == ref.choice(n, size=size, replace=False, p=p).tolist()
    assert _after(mine) == _after(ref)
