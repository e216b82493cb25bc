"""``probeguard simulate``: write the simulated release (issue 3; DESIGN 2.7).

    probeguard simulate --out data/simulated-v1                      # the shipped release, bit for bit
    probeguard simulate --out /tmp/x --cells medqa/huatuogpt-o1-8b   # one full cell (+ manifest, datasheet)
    probeguard simulate --out /tmp/x --scale 0.05                    # every cell, 5% of its questions
"""

from __future__ import annotations

import argparse

from probeguard_core.simulate import params as P


def _run(args: argparse.Namespace) -> int:
    from probeguard_core.cli import UsageError
    from probeguard_core.simulate.writer import simulate_release

    for c in args.cells or []:
        if c not in P.CELL_INDEX:
            raise UsageError(f"--cells: unknown cell {c!r}; choose from {', '.join(P.CELL_INDEX)}")
    if not (0 < args.scale <= 1.0):
        raise UsageError(f"--scale must be in (0, 1], got {args.scale}")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {args.jobs}")
    path = simulate_release(args.out, cells=args.cells, scale=args.scale, progress=not args.quiet, resume=args.resume,
                            jobs=args.jobs)
    print(f"wrote {path}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="write the simulated release (logs, probe, NLI, self-reports, manifest, datasheet)")
    p.add_argument("--out", required=True, help="release folder, e.g. data/simulated-v1")
    p.add_argument("--cells", action="append", metavar="DATASET/BACKBONE",
                   help=f"only these cells (repeatable): {', '.join(P.CELL_INDEX)}")
    p.add_argument("--scale", type=float, default=1.0, help="fraction of each cell's questions (a prefix), default 1.0")
    p.add_argument("--resume", action="store_true", help="keep cells whose logs file already exists")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--jobs", type=int, default=None, help="cells simulated at once (default: every core); output does not depend on it")
    p.set_defaults(handler=_run)
