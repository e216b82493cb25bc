"""A claim's verdict from its value, 95 % interval and rule (issue 22, point 2).

Rules (``test`` against ``threshold``):

* ``greater``: holds when the interval lies above the threshold (``lo > t``), fails when it lies
  at or below it (``hi <= t``);
* ``less``: holds when ``hi < t``, fails when ``lo >= t``;
* ``at_most``: holds when ``hi <= t``, fails when ``lo > t`` (claims of "nothing" / "no more than");
* ``equivalent`` (the "at chance" claims, §4.2): holds when the interval lies inside
  ``t ± EQUIVALENCE_MARGIN``, fails when it lies wholly outside that band, one margin for every
  such claim (a two one-sided tests reading of the 95 % interval).

Anything else is ``undetermined``: the interval straddles the boundary, so the release is too
small to say. A value or interval that is not finite is ``untestable`` (the evaluator says why).
"""

from __future__ import annotations

import math

__all__ = ["EQUIVALENCE_MARGIN", "TESTS", "VERDICTS", "verdict"]

#: The verdicts, in the order the ledger counts them.
VERDICTS: tuple[str, ...] = ("holds", "fails", "undetermined", "untestable")

#: The rule tests a claim may use.
TESTS: tuple[str, ...] = ("greater", "less", "at_most", "equivalent")

#: Half-width of the band around the threshold inside which an "at chance" claim holds (AUROC
#: units; the same for every ``equivalent`` claim): 0.05, the width of the paper's own "at chance"
#: values around 0.5 (Table 3's terminal agreement, 0.504-0.551).
EQUIVALENCE_MARGIN: float = 0.05


def verdict(value: float, lo: float, hi: float, test: str, threshold: float,
            margin: float = EQUIVALENCE_MARGIN) -> str:
    """``holds`` / ``fails`` / ``undetermined`` for a value with 95 % interval ``[lo, hi]`` under
    the rule ``test`` against ``threshold`` (module docstring); ``untestable`` when any of the
    three is not finite.

    >>> verdict(0.7, 0.65, 0.75, "greater", 0.5), verdict(0.52, 0.47, 0.54, "equivalent", 0.5)
    ('holds', 'holds')
    >>> verdict(0.6, 0.45, 0.7, "greater", 0.5), verdict(0.0, 0.0, 0.0, "at_most", 0.0)
    ('undetermined', 'holds')
    """
    if test not in TESTS:
        raise ValueError(f"rule test must be one of {TESTS}, got {test!r}")
    if not all(isinstance(x, (int, float)) and math.isfinite(x) for x in (value, lo, hi)):
        return "untestable"
    if lo > hi:
        raise ValueError(f"interval [{lo}, {hi}] has lo > hi")
    t = float(threshold)
    if test == "greater":
        return "holds" if lo > t else "fails" if hi <= t else "undetermined"
    if test == "less":
        return "holds" if hi < t else "fails" if lo >= t else "undetermined"
    if test == "at_most":
        return "holds" if hi <= t else "fails" if lo > t else "undetermined"
    if t - margin <= lo and hi <= t + margin:
        return "holds"
    return "fails" if lo > t + margin or hi < t - margin else "undetermined"
