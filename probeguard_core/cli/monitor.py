"""``probeguard monitor``: watch a certificate on newly labelled logs; alarm on drift; recalibrate (§5.3).

Reads a certificate and a stream of newly labelled logs (``--logs`` repeated, in time order,
one batch per file; probe / NLI records joined by qid), runs the anytime-valid test of
H0: risk <= alpha per certified stratum (:mod:`probeguard_core.deploy.monitor`) and writes
``monitor.json``, ``timeline.html`` and ``timeline.png`` into ``--out``.  Exit code 3 and one
``ALARM`` line per stratum when the test rejects.  With ``--recalibrate-window W`` it also
certifies the most recent W labelled questions with the same Learn-then-Test and writes
``recalibrated/certificate.json``, ``report.html`` and ``dossiers.jsonl`` (the data used is
recorded in the certificate's ``recalibration`` field).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from probeguard_core import deploy
from probeguard_core.cli import UsageError, refuse_overwriting_inputs

#: Exit code of a run that raised an alarm (2 is bad input, 0 no alarm).
ALARM_EXIT = 3
OUTPUTS = ("monitor.json", "timeline.html", "timeline.png")
RECAL_OUTPUTS = ("certificate.json", "report.html", "dossiers.jsonl")


def _suspicious(cert: deploy.DeploymentCertificate, batches: list, args: argparse.Namespace) -> list[str]:
    """Legal but suspicious input (issue 25), warned about with exit 0: a batch that is one of the
    certificate's own calibration logs files (same sha256: it tests nothing new), and ``--probe`` /
    ``--nli`` records that join some batches only (the others' unanimous, S1, questions get no
    score and are not monitored, as ``apply`` notes)."""
    out = []
    calib = {f.get("sha256") for f in cert.inputs if f.get("role") == "logs"}
    for b in batches:
        if b.sha256 in calib:
            out.append(f"{b.label}: logs: the same file (sha256) as the certificate's own calibration logs; "
                       "monitoring it tests nothing new")
    for flag, attr in (("--probe", "probe"), ("--nli", "nli")):
        if getattr(args, attr):
            bare = [b.label for b in batches if b.logs and not getattr(b, attr)]
            if bare and len(bare) < len(batches):
                out.append(f"{flag} holds no record for batch(es) {', '.join(bare)}: their unanimous (S1) questions "
                           "have no score and are not monitored")
    return out


def _run(args: argparse.Namespace) -> int:
    from probeguard_core.deploy import monitor as MO
    from probeguard_core.deploy.dossier import build_dossiers, dossiers_bytes
    from probeguard_core.deploy.report import render_report

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a folder")
    window = args.recalibrate_window
    if window is not None and window < 1:
        raise UsageError(f"--recalibrate-window must be a positive integer, got {window}")
    targets = [out / n for n in OUTPUTS] + ([out / "recalibrated" / n for n in RECAL_OUTPUTS] if window else [])
    refuse_overwriting_inputs([args.certificate, *args.logs, *(args.probe or []), *(args.nli or [])], targets)
    try:
        cert = deploy.load_certificate(args.certificate)
        batches = MO.batches_from_files(args.logs, args.probe, args.nli)
        warnings = _suspicious(cert, batches, args)
        result = MO.monitor(cert, batches, level=args.level)
        files = {
            out / "monitor.json": (json.dumps(result.to_json(), indent=2, allow_nan=False) + "\n").encode("utf-8"),
            out / "timeline.html": MO.timeline_html(result).encode("utf-8"),
            out / "timeline.png": MO.timeline_png(result),
        }
        if window:
            cmd = shlex.join(["probeguard", "monitor", "--certificate", args.certificate,
                              *[x for p in args.logs for x in ("--logs", p)],
                              "--recalibrate-window", str(window), "--out", args.out])
            new, used = MO.recalibrate(cert, batches, window, created_by=cmd,
                                       reason="alarm" if result.alarms else "requested")
            table = deploy.calibration_table(new, used)
            dossiers = build_dossiers(table, used.logs, used.probe, alpha=new["alpha"])
            files[out / "recalibrated" / "certificate.json"] = new.to_bytes()
            files[out / "recalibrated" / "report.html"] = render_report(new, table, dossiers=dossiers).encode("utf-8")
            files[out / "recalibrated" / "dossiers.jsonl"] = dossiers_bytes(dossiers)
        deploy.write_files_atomically(files)
    except deploy.DeployError as exc:
        raise UsageError(str(exc)) from None
    for w in warnings:
        print(f"probeguard monitor: warning: {w}", file=sys.stderr)
    print(f"monitored {result.n_questions} questions in {len(batches)} batches against alpha={result.alpha:g} "
          f"(level {result.level:g}, anytime-valid)")
    for row in result.summary().to_dict("records"):
        print(f"  {row['stratum']:<24} answered={row['answered']:<6} errors={row['errors']:<5} "
              f"risk={row['risk']:.4f} lower bound={row['lcb_last']:.4f} {'ALARM' if row['alarm'] else 'ok'}")
    if window:
        print(f"recalibrated on the last {min(window, result.n_questions)} labelled questions: "
              f"{out / 'recalibrated' / 'certificate.json'}")
    print(f"wrote {out / 'monitor.json'}, {out / 'timeline.html'} and {out / 'timeline.png'}")
    for line in result.alarm_lines():
        print(f"probeguard monitor: {line}", file=sys.stderr)
    return ALARM_EXIT if result.alarms else 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``monitor`` sub-command."""
    p = sub.add_parser("monitor", help="anytime-valid drift alarm on newly labelled logs; recalibrate (§5.3)",
                       description=__doc__.splitlines()[0])
    p.add_argument("--certificate", required=True, metavar="C", help="certificate.json written by `probeguard certify`")
    p.add_argument("--logs", action="append", required=True, metavar="L",
                   help="newly labelled logs, one batch per file, repeated in time order (gold = the clinician's label)")
    p.add_argument("--probe", action="append", metavar="P", help="probe records for the new logs (repeatable); "
                   "a warning when they join some batches only, or when a batch is the certificate's own "
                   "calibration logs file (exit 0: legal but suspicious)")
    p.add_argument("--nli", action="append", metavar="N", help="NLI cache for the new logs (repeatable); "
                   "a warning when it joins some batches only")
    p.add_argument("--level", type=float, default=0.05,
                   help="false-alarm probability of the whole stream, in (0, 1) (default 0.05)")
    p.add_argument("--recalibrate-window", type=int, metavar="W",
                   help="also certify the most recent W labelled questions (same Learn-then-Test)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for monitor.json and the timeline")
    p.set_defaults(handler=_run)
