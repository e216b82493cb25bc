"""``probeguard certify`` and ``probeguard apply``: certify a deployer's own logs (§5.3).

``certify`` runs the stratified Learn-then-Test (§3.3, Algorithm 2) on all the calibration logs
given and writes ``DIR/certificate.json`` and a self-contained ``DIR/report.html``;
``apply`` decides answer / abstain for every question of new logs with a certificate.
Both write a referral dossier for every question they do not answer (``dossiers.jsonl``,
:mod:`probeguard_core.deploy.dossier`), and refuse to write over any of their inputs.
Both write their files as one set (:func:`probeguard_core.fileio.write_files_atomically`): on any
error the old files are kept, and a set a kill left half written is refused on read.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from probeguard_core import deploy
from probeguard_core.certify import check_level
from probeguard_core.cli import UsageError, refuse_overwriting_inputs
from probeguard_core.deploy.dossier import build_dossiers, dossiers_bytes

#: The files ``certify`` writes into ``--out``.
CERTIFY_OUTPUTS = ("certificate.json", "report.html", "dossiers.jsonl")


def _levels(args: argparse.Namespace) -> None:
    """alpha and delta must lie in (0, 1): checked before any file is read (one-line error),
    by the one level validator :func:`probeguard_core.certify.check_level`."""
    for name in ("alpha", "delta"):
        setattr(args, name, check_level(f"--{name}", getattr(args, name), UsageError))


def _command_line(args: argparse.Namespace) -> str:
    """The canonical command that produced the certificate (deterministic: no timestamps)."""
    parts = ["probeguard", "certify"]
    for p in args.logs:
        parts += ["--logs", p]
    for p in args.probe or []:
        parts += ["--probe", p]
    for p in args.nli or []:
        parts += ["--nli", p]
    if args.corpus:
        parts += ["--corpus", args.corpus]
    parts += ["--alpha", repr(args.alpha), "--delta", repr(args.delta)]
    if args.stratify_by:
        parts += ["--stratify-by", args.stratify_by]
    if args.allow_mixed_datasets:
        parts.append("--allow-mixed-datasets")
    if args.allow_empty_strata:
        parts.append("--allow-empty-strata")
    parts += ["--out", args.out]
    return shlex.join(parts)


def _certify(args: argparse.Namespace) -> int:
    from probeguard_core.deploy.report import render_report

    _levels(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a folder")
    refuse_overwriting_inputs([*args.logs, *(args.probe or []), *(args.nli or []), args.corpus],
                              [out / name for name in CERTIFY_OUTPUTS])
    try:
        inputs = deploy.load_inputs(args.logs, args.probe, args.nli)
        cert = deploy.certify_logs(
            inputs,
            alpha=args.alpha,
            delta=args.delta,
            stratify_by=args.stratify_by,
            allow_mixed_datasets=args.allow_mixed_datasets,
            allow_empty_strata=args.allow_empty_strata,
            created_by=_command_line(args),
        )
        table = deploy.calibration_table(cert, inputs)
        dossiers = build_dossiers(table, inputs.logs, inputs.probe, alpha=cert["alpha"], corpus=args.corpus)
        html = render_report(cert, table, dossiers=dossiers)
        deploy.write_files_atomically({
            out / "certificate.json": deploy.certificate_bytes(cert),
            out / "report.html": html.encode("utf-8"),
            out / "dossiers.jsonl": dossiers_bytes(dossiers),
        })
    except deploy.DeployError as exc:
        raise UsageError(str(exc)) from None
    for note in cert["notes"]:
        print(f"probeguard certify: note: {note}", file=sys.stderr)
    print(f"certified {cert['n']} questions at alpha={cert['alpha']:g}, delta={cert['delta']:g}: "
          f"answers {cert['n_answered']} ({cert['coverage']:.3f}), "
          f"{cert['n_certified_strata']} certified strata (with a threshold) of {cert['n_tested_strata']} tested")
    for st in cert["strata"]:
        thr = "-" if st["threshold"] is None else f"{st['threshold']:.6g}"
        cov = "-" if st["coverage"] is None else f"{st['coverage']:.3f}"
        print(f"  {st['name']:<28} n={st['n']:<6} {st['status']:<14} threshold={thr:<12} coverage={cov}")
    print(f"wrote {out / 'certificate.json'}, {out / 'report.html'} and {out / 'dossiers.jsonl'} "
          f"({len(dossiers)} referral dossiers)")
    return 0


def dossiers_path(out: Path) -> Path:
    """Default ``apply --dossiers``: ``decisions.csv`` -> ``decisions.dossiers.jsonl`` beside it."""
    stem = out.name.removesuffix(".csv").removesuffix(".jsonl")
    return out.with_name(f"{stem}.dossiers.jsonl")


def _apply(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if not out.name.endswith((".csv", ".jsonl")):
        raise UsageError(f"--out {out} must end in .csv or .jsonl")
    dossier_out = Path(args.dossiers) if args.dossiers else dossiers_path(out)
    if os.path.realpath(dossier_out) == os.path.realpath(out):
        raise UsageError(f"--dossiers {dossier_out} is the --out file")
    refuse_overwriting_inputs([args.certificate, *args.logs, *(args.probe or []), *(args.nli or []), args.corpus],
                              [out, dossier_out])
    try:
        cert = deploy.load_certificate(args.certificate)
        inputs = deploy.load_inputs(args.logs, args.probe, args.nli)
        table = deploy.apply_certificate(cert, inputs)
        dossiers = build_dossiers(table, inputs.logs, inputs.probe, alpha=cert["alpha"], corpus=args.corpus)
        deploy.write_files_atomically({out: deploy.decisions_bytes(table, out), dossier_out: dossiers_bytes(dossiers)})
    except deploy.DeployError as exc:
        raise UsageError(str(exc)) from None
    n = len(table)
    k = int((table["decision"] == "answer").sum())
    missing = int((table["reason"] == deploy.REASONS["no_score"]).sum())
    if missing:
        print(f"probeguard apply: note: {missing} question(s) have no score (probe or NLI record missing) "
              "and are referred", file=sys.stderr)
    print(f"{n} questions: answer {k} ({k / n:.3f}), refer {n - k}; wrote {out} and {dossier_out} "
          f"({len(dossiers)} referral dossiers)")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``certify`` and ``apply`` sub-commands."""
    p = sub.add_parser(
        "certify",
        help="certify abstention thresholds on your own logs (stratified Learn-then-Test, §3.3)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--logs", action="append", required=True, metavar="L",
                   help="execution logs .jsonl[.gz] (repeat for several files; qids unique across files)")
    p.add_argument("--probe", action="append", metavar="P", help="probe records .jsonl[.gz] (repeatable)")
    p.add_argument("--nli", action="append", metavar="N", help="NLI cache .jsonl[.gz] (repeatable)")
    p.add_argument("--alpha", required=True, help="target selective risk, in (0, 1)")
    p.add_argument("--delta", default="0.05", help="error budget, in (0, 1) (default 0.05)")
    p.add_argument("--stratify-by", choices=["specialty"], default=None,
                   help="certify within (stratum x specialty) cells (Appendix I); null specialty = 'unspecified'")
    p.add_argument("--allow-mixed-datasets", action="store_true",
                   help="allow logs of several datasets in one calibration (§4.4: pooling breaks the certificate)")
    p.add_argument("--allow-empty-strata", action="store_true",
                   help="let S1 or S2 abstain as a whole when it has no calibration question (default: refuse)")
    p.add_argument("--corpus", metavar="C",
                   help="corpus .jsonl[.gz] or folder (DESIGN 2.6): titles and first lines of challenge documents")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder for certificate.json, report.html and dossiers.jsonl")
    p.set_defaults(handler=_certify)

    a = sub.add_parser("apply", help="decide answer / abstain per question with a certificate",
                       description="Apply a ProbeGuard certificate to new logs: one decision per question.")
    a.add_argument("--certificate", required=True, metavar="C", help="certificate.json written by `probeguard certify`")
    a.add_argument("--logs", action="append", required=True, metavar="L", help="execution logs (repeatable)")
    a.add_argument("--probe", action="append", metavar="P", help="probe records (repeatable)")
    a.add_argument("--nli", action="append", metavar="N", help="NLI cache (repeatable)")
    a.add_argument("--corpus", metavar="C", help="corpus for the dossiers' challenge documents (DESIGN 2.6)")
    a.add_argument("--out", required=True, metavar="FILE", help="decisions.csv or decisions.jsonl")
    a.add_argument("--dossiers", metavar="FILE",
                   help="referral dossiers .jsonl (default: OUT with .dossiers.jsonl, e.g. decisions.dossiers.jsonl)")
    a.set_defaults(handler=_apply)
