"""Scalar draws of a ``numpy.random.Generator`` without its per-call overhead, value for value.

The simulator writes each question from a few hundred scalar draws (``integers(k)``, ``random()``,
``choice(n, size, replace=False)``); numpy spends ~2-3 µs per ``integers`` call and ~11 µs per
``choice`` on argument handling, more than the text costs.  :class:`Draws` takes the same values
from the generator's own bit stream through the bit generator's documented ctypes interface
(``BitGenerator.ctypes``: ``next_uint32``, ``next_double``, ~0.3 µs a call) and applies the
arithmetic numpy applies:

* ``integers(high)`` below ``2**32``: Lemire's multiply-and-reject on ``next_uint32`` (numpy's
  ``buffered_bounded_lemire_uint32``; PCG64 keeps the unused half of a 64-bit output in its state,
  so 32-bit and 64-bit draws interleave exactly as numpy's do);
* ``random()``: ``next_double``;
* ``choice(n, size, replace=False)`` (``n <= 10000``): Floyd's algorithm, then numpy's shuffle of
  the picks, each step one bounded draw.

:func:`weighted_sample` is ``choice(len(p), size, replace=False, p=p)`` (~110 µs a call): numpy's
own rounds of uniforms against the renormalized cumulative weights, without its validation and
its ``np.unique`` per round.

Every draw goes straight to the generator, so a :class:`Draws` and the Generator it wraps can be
used in any interleaving.  Tested value for value, and state for state, against numpy
(``tests/test_simulate_draws.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Draws", "draws_of", "weighted_sample"]

_M32 = 0xFFFFFFFF


class Draws:
    """Bounded integers, uniforms and small samples without replacement from ``rng``'s own stream."""

    __slots__ = ("_bg", "_next32", "_next_double", "_state")

    def __init__(self, rng: np.random.Generator):
        self._bg = rng.bit_generator  # keeps the state that ``_state`` points to alive
        c: Any = self._bg.ctypes
        self._next32, self._next_double, self._state = c.next_uint32, c.next_double, c.state

    def below(self, high: int) -> int:
        """``int(rng.integers(high))`` for ``1 <= high < 2**32``."""
        if high == 1:
            return 0  # numpy returns the only value without drawing
        m = self._next32(self._state) * high
        if (m & _M32) < high:
            threshold = ((1 << 32) - high) % high
            while (m & _M32) < threshold:
                m = self._next32(self._state) * high
        return m >> 32

    def between(self, low: int, high: int) -> int:
        """``int(rng.integers(low, high))`` for ``high - low < 2**32``."""
        return low + self.below(high - low)

    def uniform(self) -> float:
        """``rng.random()``."""
        return float(self._next_double(self._state))

    def sample(self, n: int, size: int) -> list[int]:
        """``rng.choice(n, size=size, replace=False).tolist()`` for ``size <= n <= 10000``."""
        picked: set[int] = set()
        out = []
        for j in range(n - size, n):  # Floyd's algorithm
            val = self.below(j + 1)
            val = j if val in picked else val
            picked.add(val)
            out.append(val)
        for i in range(size - 1, 0, -1):  # then numpy shuffles the picks
            k = self.below(i + 1)
            out[i], out[k] = out[k], out[i]
        return out


def draws_of(rng: np.random.Generator | Draws) -> Draws:
    """``rng`` itself when it is a :class:`Draws`, else a :class:`Draws` of that Generator."""
    return rng if isinstance(rng, Draws) else Draws(rng)


def weighted_sample(rng: np.random.Generator, p: np.ndarray, size: int) -> list[int]:
    """``rng.choice(len(p), size=size, replace=False, p=p).tolist()`` for float64 weights ``p``
    summing to 1 with at least ``size`` positive entries (as numpy draws it: per round one uniform
    per missing pick against the cumulative weights with the picks zeroed, the new values kept in
    order of first occurrence)."""
    p = p.copy()
    found: list[int] = []
    seen: set[int] = set()
    while len(found) < size:
        x = rng.random(size - len(found))
        if found:
            p[found] = 0
        cdf = np.cumsum(p)
        cdf /= cdf[-1]
        for val in cdf.searchsorted(x, side="right").tolist():
            if val not in seen:
                seen.add(val)
                found.append(val)
    return found
