"""Step 3 of certifying a deployer's logs, *certify*: the stratified Learn-then-Test of
Algorithm 2 (Eqs. 5-6, §3.3) on every scored stratum, with :mod:`probeguard_core.certify`'s
arithmetic.

Certified strata and the Bonferroni ``m``: the strata on which a Learn-then-Test is run, i.e.
S1 and S2 (or, with ``stratify_by="specialty"``, every (S1|S2) x specialty cell) that hold at
least one scored calibration question.  A stratum that is not tested cannot produce a false
rejection, so it does not enter the union bound; with probe and NLI records and both strata
present, ``m = 2`` as in the paper (Appendix E).

:func:`run_ltt` turns :class:`~probeguard_core.deploy.scores.Scored` into :class:`Tested`, the
input of step 4 (:func:`probeguard_core.deploy.serialize.build_certificate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from probeguard_core import certify as C
from probeguard_core.deploy.errors import DeployError
from probeguard_core.deploy.scores import Scored, stratum_sort_key

__all__ = ["Tested", "run_ltt"]


@dataclass
class Tested:
    """The Learn-then-Test of every scored stratum: which were tested, every grid p-value, the
    thresholds (None = certifies nothing) and the Bonferroni level delta / (|grid| m)."""

    scored: Scored
    tested: list[str]
    pvalues: pd.DataFrame
    thresholds: dict[str, float | None]
    level: float | None


def run_ltt(sc: Scored) -> Tested:
    """Algorithm 2 on every scored (S1|S2)[x specialty] stratum."""
    req, df = sc.request, sc.table
    scored = df["score"].notna() & (df["stratum"] != "S3")
    tested = sorted(df.loc[scored, "stratum_name"].unique().tolist(), key=stratum_sort_key)
    if not tested:
        return Tested(sc, [], pd.DataFrame(columns=["stratum"]), {}, None)
    errors = ~df["correct"].to_numpy(dtype=bool)
    sel = df["stratum_name"].isin(tested).to_numpy()
    try:
        res = C.stratified_certify(df.loc[sel, "score"].to_numpy(), errors[sel], df.loc[sel, "stratum_name"].to_numpy(),
                                   req.alpha, req.delta, req.grid_desc, certified=tested)
    except ValueError as exc:
        raise DeployError(str(exc)) from None
    level = C.bonferroni_level(req.delta, req.grid_desc.size, len(tested))  # Algorithm 2, line 7
    if not np.array_equal(res.pvalues["rejected"].to_numpy(dtype=bool), res.pvalues["p_value"].to_numpy() <= level):
        raise AssertionError("certify.stratified_certify used a different Bonferroni level")
    return Tested(sc, tested, res.pvalues, dict(res.thresholds), level)
