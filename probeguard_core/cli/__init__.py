"""``probeguard`` command line: one sub-command module per concern.

Each module in :data:`SUBCOMMAND_MODULES` exposes ``register(subparsers)`` adding its commands;
every command's handler returns an exit code.  Bad input raises a ``ValueError``
(:class:`~probeguard_core.logs.LogFormatError`, :class:`UsageError`, ...) or an ``OSError``,
printed as one clear line with exit code 2 (set ``PROBEGUARD_DEBUG=1`` for the traceback).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from probeguard_core import __version__

#: Modules contributing sub-commands (pipeline stages, certification, simulator, ...).
SUBCOMMAND_MODULES = (
    "probeguard_core.cli.validate",
    "probeguard_core.cli.convert",
    "probeguard_core.cli.certify",
    "probeguard_core.cli.pipeline",
    "probeguard_core.cli.simulate",
)


class UsageError(ValueError):
    """A bad argument value (alpha out of range, unwritable output folder, ...)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="probeguard",
        description="ProbeGuard: certified abstention from how multi-round consensus forms "
        "(certify/apply your logs, run the pipeline stages, simulate a release).",
    )
    parser.add_argument("--version", action="version", version=f"probeguard_core {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # sub-command module not shipped in this build
                continue
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (ValueError, OSError) as exc:
        # LogFormatError, ReleaseError, DeployError and UsageError are ValueErrors; OSError covers
        # unreadable inputs and unwritable outputs. PROBEGUARD_DEBUG=1 shows the traceback.
        if os.environ.get("PROBEGUARD_DEBUG"):
            raise
        print(f"probeguard {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"probeguard {args.command}: interrupted; finished work is kept, re-run to resume", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
