"""Certify a deployer's own logs (§3.3, §4.4, §5.3, App. I): ``probeguard certify``.

A hospital calibrates ProbeGuard on its own case mix (§5.3): :func:`certify_logs` takes the
calibration logs (plus probe and NLI records when present) and passes them once down four
steps, each a module that takes the previous step's result:

1. *validate* (:func:`probeguard_core.deploy.request.validate_request`): levels, grid,
   stratification, one dataset;
2. *score* (:func:`probeguard_core.deploy.scores.score`): the score of each question's stratum
   (:func:`probeguard_core.scoring.stratum_scores`: S1 by z(kappa)+z(RSE) on frozen z constants,
   S2 by the trajectory-averaged agreement, S3 abstains);
3. *certify* (:func:`probeguard_core.deploy.ltt.run_ltt`): the stratified Learn-then-Test of
   Algorithm 2 (:func:`probeguard_core.certify.stratified_certify`) on *all* of it;
4. *serialize* (:func:`probeguard_core.deploy.serialize.build_certificate`): the typed certificate.

No step calls back into this module, and it holds no arithmetic of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from probeguard_core import logs as L
from probeguard_core.deploy.certificate import DeploymentCertificate
from probeguard_core.deploy.inputs import Inputs, unpack
from probeguard_core.deploy.ltt import run_ltt
from probeguard_core.deploy.request import validate_request
from probeguard_core.deploy.scores import score
from probeguard_core.deploy.serialize import build_certificate

__all__ = ["certify_logs"]


def certify_logs(
    logs: Sequence[L.QuestionLog] | Inputs,
    probe: Sequence[L.ProbeRecord] | None = None,
    nli: Sequence[L.NLIRecord] | None = None,
    *,
    alpha: float,
    delta: float = 0.05,
    stratify_by: str | None = None,
    allow_mixed_datasets: bool = False,
    allow_empty_strata: bool = False,
    grid: Sequence[float] | None = None,
    files: Sequence[Mapping[str, str]] | None = None,
    created_by: str | None = None,
    recalibration: Mapping[str, Any] | None = None,
) -> DeploymentCertificate:
    """Certify the calibration logs (Algorithm 2 on all of them); return the certificate.

    Four steps: validate the request, score every question (S1 by z(kappa) + z(RSE) with
    frozen constants, S2 by a-bar, S3 none), run the stratified Learn-then-Test, serialize into a
    :class:`~probeguard_core.deploy.certificate.DeploymentCertificate` (``to_json()`` is the
    ``certificate.json`` object: alpha, delta, grid, per stratum n, errors, threshold,
    calibration coverage and every grid p-value, the score definitions, the frozen z constants,
    the inputs' sha256, the package version and the content hashes).  ``files`` (role, path,
    sha256), ``created_by`` and ``recalibration`` (the data window a recalibration used) are
    recorded as given.

    Raises :class:`~probeguard_core.deploy.errors.DeployError` when the logs mix datasets (§4.4)
    without ``allow_mixed_datasets``, when S1 or S2 has no calibration question without
    ``allow_empty_strata``, when probe and NLI records are given but do not cover every S1
    question (or only one of the two is given), or for alpha / delta outside (0, 1).
    """
    if files is None and isinstance(logs, Inputs):
        files = logs.files
    logs, probe, nli = unpack(logs, probe, nli)
    req = validate_request(logs, probe, nli, alpha=alpha, delta=delta, stratify_by=stratify_by,
                           allow_mixed_datasets=allow_mixed_datasets, allow_empty_strata=allow_empty_strata,
                           grid=grid, files=files, created_by=created_by, recalibration=recalibration)
    cert = build_certificate(run_ltt(score(req)))
    DeploymentCertificate.from_json(cert.to_json(), "certify_logs")  # the self-check holds by construction
    return cert
