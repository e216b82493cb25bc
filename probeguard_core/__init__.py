"""ProbeGuard companion core: the paper's definitions, readers, certification and simulator.

Paper: "Unanimously Wrong: Certified Abstention from How Medical LLM Consensus Forms".
The contract for names, formats and arithmetic is ``shared/DESIGN.md``.
"""

from __future__ import annotations

__version__ = "0.1.0"

#: The single seed that governs generation, splits, cross-validation and bootstrap (Appendix L).
SEED = 42

__all__ = ["SEED", "__version__"]
