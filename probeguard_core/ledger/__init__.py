"""The claims ledger (issue 22): which of the paper's results-section claims hold on a release.

:mod:`~probeguard_core.ledger.registry` reads the claims (``data/paper_claims.yaml``: the paper's
sentence, section, quantity, cells and rule); :mod:`~probeguard_core.ledger.verdict` turns a value
and its 95 % interval into ``holds`` / ``fails`` / ``undetermined`` under the claim's rule;
:mod:`~probeguard_core.ledger.evaluate` computes each quantity on a release, one evaluator per
kind of claim, the way the book's pages compute it; :mod:`~probeguard_core.ledger.report` writes
``claims.csv`` / ``claims.json`` and the book's scorecard and per-page verdict lines.
"""

from __future__ import annotations

from probeguard_core.ledger.registry import Claim, load_claims
from probeguard_core.ledger.verdict import EQUIVALENCE_MARGIN, VERDICTS, verdict

__all__ = ["EQUIVALENCE_MARGIN", "VERDICTS", "Claim", "load_claims", "verdict"]
