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
from collections.abc import Iterable, Sequence
from pathlib import Path

from probeguard_core import __version__

#: Modules contributing sub-commands (pipeline stages, certification, simulator, ...).
SUBCOMMAND_MODULES = (
    "probeguard_core.cli.validate",
    "probeguard_core.cli.convert",
    "probeguard_core.cli.certify",
    "probeguard_core.cli.monitor",
    "probeguard_core.cli.pipeline",
    "probeguard_core.cli.simulate",
    "probeguard_core.cli.claims",
)


class UsageError(ValueError):
    """A bad argument value (alpha out of range, unwritable output folder, ...)."""


def refuse_overwriting_inputs(
    inputs: Iterable[str | os.PathLike[str] | None], outputs: Iterable[str | os.PathLike[str]],
    folders: Iterable[str | os.PathLike[str]] = (),
) -> None:
    """No command writes over one of its own inputs, however either path is spelled.

    Paths are compared after resolving ``..``, relative spellings and symlinks
    (:func:`os.path.realpath`), and by inode where both exist (hard links).  An output inside
    one of ``folders`` (input trees a command walks) is refused too.  Raises :class:`UsageError`.
    """
    ins = [Path(p) for p in inputs if p is not None]
    trees = [Path(p) for p in folders]
    for out in (Path(o) for o in outputs):
        ro = os.path.realpath(out)
        for src in ins:
            same = ro == os.path.realpath(src)
            if not same and out.exists() and src.exists():
                try:
                    same = os.path.samefile(out, src)
                except OSError:
                    same = False
            if same:
                raise UsageError(f"output {out} is the input {src} (the same file); a command never writes "
                                 "over one of its own inputs: choose another output path")
        for tree in trees:
            rt = os.path.realpath(tree)
            if ro == rt or ro.startswith(rt.rstrip(os.sep) + os.sep):
                raise UsageError(f"output {out} lies inside the input folder {tree}; write it elsewhere")


_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def byte_size(text: str) -> int:
    """A positive number of bytes, optionally with a binary unit: ``1048576``, ``64M``, ``2G``."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _SIZE_UNITS else ""
    try:
        n = int(t[: len(t) - len(unit)]) * _SIZE_UNITS[unit]
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of bytes such as 1048576, 64M or 2G, got {text!r}")
    return n


def _add_read_limits(p: argparse.ArgumentParser) -> None:
    """Every command that reads artifacts reads them with bounded memory (:mod:`probeguard_core.jsonl`)."""
    from probeguard_core.jsonl import MAX_FILE_BYTES, MAX_LINE_BYTES

    g = p.add_argument_group("read limits")
    g.add_argument("--max-line-bytes", type=byte_size, default=None, metavar="N",
                   help=f"refuse an artifact line, or a whole .json[.gz] questions document, longer than N "
                        f"bytes after gunzip (default {MAX_LINE_BYTES // 2**20}M; a gzip bomb fails within this bound)")
    g.add_argument("--max-file-bytes", type=byte_size, default=None, metavar="N",
                   help=f"refuse an artifact file longer than N bytes after gunzip (default {MAX_FILE_BYTES // 2**30}G)")


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
    for command in _leaves(parser):
        _add_read_limits(command)
    return parser


def _leaves(p: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers that run a command (``validate``, ``convert ma-rag``, ...): those without sub-commands."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return [leaf for a in subs for child in a.choices.values() for leaf in _leaves(child)] if subs else [p]


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from probeguard_core.jsonl import read_limits

    try:
        with read_limits(args.max_line_bytes, args.max_file_bytes):
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
