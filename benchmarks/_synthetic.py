"""Synthetic certification data shared by the certification benchmarks (not the paper's data)."""

from __future__ import annotations

import numpy as np


# Synthetic certification data (not the paper's data): MedQA-sized (n = 1,273), about 59%
# unanimous-first-round (S1), 29% contested-converged (S2), the rest never converged (S3, no
# score). Scores are rounded to 3 decimals so ties occur; both certified strata certify something
# at alpha = 0.10-0.20.
def synthetic_medqa(n: int = 1273, seed: int = 42) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    strata = rng.choice(np.array(["S1", "S2", "S3"]), size=n, p=[0.59, 0.29, 0.12])
    s = np.round(rng.uniform(size=n), 3)
    base = np.where(strata == "S1", 0.30, np.where(strata == "S2", 0.60, 0.8))
    errors = rng.uniform(size=n) < base * (1.0 - s) ** 2
    s[strata == "S3"] = np.nan
    return s, errors, strata


def calibration_sets(s: np.ndarray, e: np.ndarray, strata: np.ndarray, n_splits: int, seed: int = 42,
                     certified: tuple[str, ...] = ("S1", "S2")):
    """``(split, stratum, scores, errors)`` of the calibration half of ``n_splits`` even splits."""
    n = s.size
    for j in range(n_splits):
        perm = np.random.default_rng(seed + j).permutation(n)
        cal = np.zeros(n, dtype=bool)
        cal[perm[: n // 2]] = True
        for S in certified:
            sel = cal & (strata == S)
            yield j, S, s[sel], e[sel]
