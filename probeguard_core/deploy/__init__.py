"""Deployment (§5.3): a hospital certifies ProbeGuard on its own case mix, applies the certificate
to new questions, refers every question it does not answer with a dossier, and monitors the
guarantee as labels arrive (``probeguard certify | apply | monitor``).

===================  ==========================================================================
``errors``           ``DeployError``: a bad request, named (one line, exit 2 in the CLI)
``output``           all of a run's files or none (:mod:`probeguard_core.fileio`'s atomic writer)
``certificate``      the certificate (§3.3, Algorithm 2): typed, self-checking, read and written
``inputs``           a deployer's logs, probe and NLI files read strictly, with their sha256
``request``          certify, step 1 *validate*: levels, grid, stratification, one domain (§4.4)
``scores``           certify, step 2 *score*: stratum scores, frozen z constants (§3.2, Eq. 7)
``ltt``              certify, step 3 *certify*: the stratified Learn-then-Test (Eqs. 5-6)
``serialize``        certify, step 4 *serialize*: the typed certificate
``certify``          ``certify_logs``: the four steps, once down (``probeguard certify``)
``apply``            answer / abstain per question with a certificate (``probeguard apply``)
``dossier``          the referral dossier of every question not answered (§5.3)
``report``           the self-contained HTML report of a certificate (``templates/``)
``monitor``          the anytime-valid drift alarm and recalibration (``probeguard monitor``)
===================  ==========================================================================

Each module imports only modules above it in this table (``tests/test_architecture.py``).
What a deployer calls (:data:`NAMES`: reading inputs and certificates, ``certify_logs``,
``apply_certificate``, the dossiers, the report, the writers) is also an attribute of this
package, imported on first use (``deploy.certify_logs`` imports
:mod:`probeguard_core.deploy.certify`); importing the package itself imports no submodule.  The
steps of certification and the monitor are reached through their modules
(``from probeguard_core.deploy import monitor``).
"""

from __future__ import annotations

from probeguard_core.lazy import lazy_names

#: Which submodule defines each name of the package (checked by ``tests/test_architecture.py``).
NAMES: dict[str, str] = {
    "DeployError": "errors",
    **dict.fromkeys(["atomic_write_text", "write_files_atomically"], "output"),
    **dict.fromkeys([
        "CERTIFICATE_FORMAT", "CERTIFICATE_VERSION", "STRATIFY_CHOICES", "CertificateError",
        "DeploymentCertificate", "GridPoint", "StratumCertificate", "certificate_bytes", "load_certificate",
        "validate_certificate",
    ], "certificate"),
    **dict.fromkeys(["Inputs", "load_inputs"], "inputs"),
    "UNSPECIFIED": "request",
    **dict.fromkeys(["ASSUMPTION", "SCORE_DEFINITIONS"], "serialize"),
    "certify_logs": "certify",
    **dict.fromkeys(["DECISION_COLUMNS", "REASONS", "apply_certificate", "calibration_table", "decisions_bytes",
                     "write_decisions"], "apply"),
    **dict.fromkeys(["DOSSIER_SCHEMA_VERSION", "REFERRAL_CODES", "build_dossiers", "dossiers_bytes",
                     "load_corpus_excerpts"], "dossier"),
    **dict.fromkeys(["render_report", "risk_coverage_svg"], "report"),
}

__getattr__, __dir__ = lazy_names(__name__, NAMES)
