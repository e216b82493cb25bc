"""Runs of bounded integer draws, value for value those of ``numpy.random.Generator``, in one call.

The simulator writes each rationale from a dozen small draws (``integers(k)`` and a
``choice(n, size, replace=False)``), about 300 per question; at ~3 µs of call overhead each
(~17 µs for ``choice``), the calls cost more than the text.  A Generator draws a bounded integer
below ``2**32`` from the bit generator's 32-bit stream (``next_uint32``, which PCG64 buffers in its
state: two per 64-bit output) by Lemire's multiply-and-reject method, and ``choice(n, size,
replace=False)`` (``n <= 10000``) by Floyd's algorithm then a Fisher-Yates shuffle of the picks,
each step one such bounded draw.  :class:`U32Run` fetches a run of that 32-bit stream with one
``integers(0, 2**32, dtype=uint32)`` call and applies the same arithmetic in Python, so a run gives
the values the scalar calls give and leaves the generator in the same state (tested against
numpy for many bounds and seeds, interleaved with float draws, ``tests/test_simulate_draws.py``).

A run must not be interleaved with other draws from the same generator: fetch it, take exactly
the planned draws, then :meth:`U32Run.close` checks that nothing fetched is left over.
"""

from __future__ import annotations

import numpy as np

__all__ = ["U32Run", "n_sample_draws"]

_M32 = 0xFFFFFFFF


def n_sample_draws(n: int, size: int) -> int:
    """Bounded draws of :meth:`U32Run.sample` (``size`` Floyd picks, ``size - 1`` shuffle swaps),
    not counting picks with one possible value (numpy takes no draw for them)."""
    return sum(1 for j in range(n - size, n) if j > 0) + max(size - 1, 0)


class U32Run:
    """A planned run of ``n`` bounded draws from ``rng``'s 32-bit stream (see the module docstring)."""

    __slots__ = ("_rng", "_buf", "_i")

    def __init__(self, rng: np.random.Generator, n: int):
        self._rng = rng
        self._buf: list[int] = rng.integers(0, 1 << 32, size=n, dtype=np.uint32).tolist() if n > 0 else []
        self._i = 0

    def _next(self) -> int:
        if self._i < len(self._buf):
            self._i += 1
            return self._buf[self._i - 1]
        # a rejection (probability < high / 2**32) needs one value beyond the plan: the next of the stream
        return int(self._rng.integers(0, 1 << 32, dtype=np.uint32))

    def below(self, high: int) -> int:
        """``int(rng.integers(high))`` for ``1 <= high < 2**32`` (Lemire's method, as numpy draws it)."""
        if high == 1:
            return 0  # numpy returns the only value without drawing
        m = self._next() * high
        if (m & _M32) < high:
            threshold = ((1 << 32) - high) % high
            while (m & _M32) < threshold:
                m = self._next() * high
        return m >> 32

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

    def close(self) -> None:
        """Check that the run took every value it fetched (a plan that overshot would shift the stream)."""
        if self._i != len(self._buf):
            raise RuntimeError(f"U32Run: {len(self._buf) - self._i} of {len(self._buf)} fetched draws unused")
