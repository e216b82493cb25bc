"""Step 1 of certifying a deployer's logs, *validate* (§4.4, §5.3): the request's levels, grid,
stratification and domain, checked before anything is scored.

:func:`validate_request` returns a :class:`Request`, the input of step 2
(:func:`probeguard_core.deploy.scores.score`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from probeguard_core import certify as C
from probeguard_core import logs as L
from probeguard_core.deploy.certificate import STRATIFY_CHOICES
from probeguard_core.deploy.errors import DeployError

__all__ = ["UNSPECIFIED", "Request", "validate_request"]

#: Group of questions whose specialty is null under ``stratify_by="specialty"`` (never dropped).
UNSPECIFIED = "unspecified"


@dataclass(frozen=True)
class Request:
    """A validated certification request (the output of :func:`validate_request`)."""

    logs: list[L.QuestionLog]
    probe: Sequence[L.ProbeRecord] | None
    nli: Sequence[L.NLIRecord] | None
    alpha: float
    delta: float
    grid_desc: np.ndarray
    stratify_by: str | None
    allow_mixed_datasets: bool
    allow_empty_strata: bool
    files: tuple[Mapping[str, str], ...]
    created_by: str
    datasets: list[str]
    recalibration: Mapping[str, Any] | None = None  # the data window a recalibration used, as given


def validate_request(logs: Sequence[L.QuestionLog], probe: Sequence[L.ProbeRecord] | None,
                     nli: Sequence[L.NLIRecord] | None, *, alpha: float, delta: float, stratify_by: str | None,
                     allow_mixed_datasets: bool, allow_empty_strata: bool, grid: Sequence[float] | None,
                     files: Sequence[Mapping[str, str]] | None, created_by: str | None,
                     recalibration: Mapping[str, Any] | None = None) -> Request:
    """Levels, grid, stratification, one dataset (§4.4); nothing is read or scored."""
    logs = list(logs)
    alpha = C.check_level("alpha", alpha, DeployError)
    delta = C.check_level("delta", delta, DeployError)
    if stratify_by not in STRATIFY_CHOICES:
        raise DeployError(f"stratify_by must be None or 'specialty', got {stratify_by!r}")
    try:
        grid_desc = C._check_grid(grid)
    except ValueError as exc:
        raise DeployError(f"grid: {exc}") from None
    if not logs:
        raise DeployError("no calibration questions: the logs are empty")
    datasets = sorted({log.dataset for log in logs})
    if len(datasets) > 1 and not allow_mixed_datasets:
        counts = {d: sum(1 for log in logs if log.dataset == d) for d in datasets}
        raise DeployError(
            f"the calibration logs mix {len(datasets)} datasets {counts}; calibration is per domain, "
            "pooling breaks the certificate (§4.4: pooled MedQA + MMLU-Pro medicine certifies nothing) "
            "and Assumption 1 asks for one distribution per stratum. Certify each dataset separately, "
            "or pass --allow-mixed-datasets if the pooled mix really is your deployment distribution"
        )
    if stratify_by == "specialty" and any(log.specialty == UNSPECIFIED for log in logs):
        raise DeployError(
            f"a question's specialty is literally {UNSPECIFIED!r}, the name of the group of questions "
            "with a null specialty; rename that specialty"
        )
    return Request(logs, probe, nli, alpha, delta, grid_desc, stratify_by, bool(allow_mixed_datasets),
                   bool(allow_empty_strata), tuple(files or ()), created_by or "probeguard_core.deploy.certify_logs",
                   datasets, recalibration)
