"""Core modules import only what they use (issue 15): the binomial tail without scipy.stats,
scikit-learn only when a score is fitted; and that tail is binom.cdf to the last bit."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy.stats import binom

from probeguard_core.certify import DEFAULT_ALPHAS, binom_cdf, binomial_pvalue


def _ns() -> list[int]:
    return [*range(1, 201), 300, 500, 818, 875, 1273, 2450, 4183]


@pytest.mark.parametrize("alpha", sorted({*np.round(np.arange(0.01, 0.51, 0.01), 2).tolist(), *DEFAULT_ALPHAS, 0.123456}))
def test_binom_cdf_is_scipy_binom_cdf_bit_for_bit(alpha: float) -> None:
    """Every E in 0..n for the calibration sizes of the releases and the alpha slider's grid."""
    for n in _ns():
        k = np.arange(0, n + 1)
        assert binom_cdf(k, n, alpha).tobytes() == binom.cdf(k, n, alpha).tobytes(), (n, alpha)


def test_binomial_pvalue_broadcasts_like_before() -> None:
    E = np.array([[0, 3], [5, 10]])
    n = np.array([[0, 10], [20, 10]])
    expect = np.where(n == 0, 1.0, binom.cdf(E, n, 0.1))
    assert binomial_pvalue(E, n, 0.1).tobytes() == expect.tobytes()
    assert binomial_pvalue(3, 40, 0.2) == float(binom.cdf(3, 40, 0.2))


def _modules_after(stmt: str) -> set[str]:
    code = f"import sys, json; {stmt}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out))


def test_certify_does_not_import_scipy_stats() -> None:
    mods = _modules_after("import probeguard_core.certify as C; C.binomial_pvalue(3, 40, 0.1)")
    assert "scipy.stats" not in mods


def test_scoring_imports_sklearn_only_when_fitting() -> None:
    assert not any(m == "sklearn" or m.startswith("sklearn.") for m in _modules_after("import probeguard_core.scoring"))
    assert "sklearn" in _modules_after("import probeguard_core.scoring as S; S.make_pipeline()")
