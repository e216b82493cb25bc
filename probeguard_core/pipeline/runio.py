"""Append-only, resumable output for the pipeline stages (issue: running it).

Each stage appends one JSON line per finished unit (question, (question, arm), (question,
round)), flushed and fsynced, so a run killed at any moment - even by SIGKILL - loses at most
the unit in flight.  On restart:

* a partial last line (no trailing newline: an interrupted write) is truncated, and said so;
* every complete line is validated with the DESIGN 2 reader; a malformed complete line is an
  error (:class:`LogFormatError`), never repaired;
* finished units are skipped.  Seeds are derived from ``(seed, qid, ...)`` (:func:`derive_seed`),
  so the order and the chunking of the work do not change results: with the transformers
  engine a resumed run ends byte-identical to an uninterrupted one.

The run's settings are stored beside the output (``<out>.run.json``); resuming with different
settings is refused rather than mixing two configurations in one file.  An engine whose records
depend on which prompts share a call (the batched transformers engine, ``batch_prompts``) adds
its chunking to those settings (:func:`chunking_config`), and every stage cuts its chunks from
the input order and decodes a chunk whole (:func:`chunks`), so a resumed run decodes the same
chunks as an uninterrupted one.

Wall-clock seconds are not reproducible.  With ``reproducible=True`` the inline ``cost`` is
``null`` and the cost goes to a sidecar ``<out>.cost.jsonl`` (one line per unit; on a resumed
run a unit can appear twice - readers take the last line per key).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from probeguard_core.logs import json_line

__all__ = ["AppendOnlyJsonl", "append_cost", "check_run_config", "chunking_config", "chunks", "derive_seed", "sidecar"]


def derive_seed(seed: int, *parts: object) -> int:
    """A 31-bit seed from the run seed and the unit's identity (e.g. ``qid``, stage, round)."""
    text = "|".join([str(seed), *map(str, parts)])
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "big") & 0x7FFFFFFF


def sidecar(path: str | os.PathLike[str], suffix: str) -> Path:
    p = Path(path)
    return p.with_name(p.name.removesuffix(".jsonl") + suffix)


T = TypeVar("T")


def chunking_config(engine: Any, batch_size: int) -> dict[str, Any]:
    """The settings a stage's records depend on through the engine's batching, for ``<out>.run.json``.

    A batched engine (``engine.batch_prompts`` set: pipeline/batched.py) decodes the prompts of
    one call in chunks of ``batch_prompts``, and a record depends on its chunk's composition in
    the last bits of floating point: its ``batch_prompts`` and the stage's ``batch_size``
    (questions per call) are recorded, so a resumed run with another chunking is refused; so is
    its decode mode when it is not the default dynamic cache (``decode``: the static cache,
    compiled or not, changes the last bits of the records).  Engines whose records do not
    depend on the batch (the batch-invariant default, vLLM with per-request seeds, scripted
    engines) add nothing: their runs may resume with any chunking.
    """
    k = getattr(engine, "batch_prompts", None)
    if k is None:
        return {}
    decode = getattr(engine, "decode", "dynamic")
    return {"batch_prompts": k, "batch_size": batch_size, **({} if decode == "dynamic" else {"decode": decode})}


def chunks(items: Sequence[T], batch_size: int, done: Callable[[T], bool]) -> Iterator[list[T]]:
    """``items`` in chunks of ``batch_size`` cut from their input order (not from what is left to
    do), skipping only the chunks whose every item is ``done``.  A chunk with any unfinished item
    is yielded whole (the caller decodes all of it and appends the unfinished records), so a run
    resumed after a kill, even one that cut the chunk's write short, decodes the same chunks as
    an uninterrupted run."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    for i in range(0, len(items), batch_size):
        chunk = list(items[i:i + batch_size])
        if not all(map(done, chunk)):
            yield chunk


def check_run_config(out: str | os.PathLike[str], config: dict[str, Any]) -> None:
    """Write ``<out>.run.json``, or check that an existing one holds the same settings."""
    path = sidecar(out, ".run.json")
    text = json.dumps(config, indent=1, sort_keys=True) + "\n"
    if Path(out).exists() and path.exists():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old != json.loads(text):
            diff = sorted(k for k in set(old) | set(config) if old.get(k) != config.get(k))
            raise ValueError(f"{out}: existing output was produced with different settings {diff}; "
                             f"use another output path or delete it (see {path})")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


class AppendOnlyJsonl:
    """Resumable JSONL writer; ``done`` holds the keys of the records already in the file."""

    def __init__(self, path: str | os.PathLike[str], reader: Callable[[Path], list[Any]],
                 key: Callable[[Any], Hashable]):
        self.path = Path(path)
        if self.path.name.endswith(".gz"):
            raise ValueError(f"{self.path}: write plain .jsonl while running; compress the finished file")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done: set[Hashable] = set()
        if self.path.exists():
            self._truncate_partial_line()
            if self.path.stat().st_size > 0:
                self.done = {key(r) for r in reader(self.path)}

    def _truncate_partial_line(self) -> None:
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as fh:
                fh.truncate(keep)
            print(f"{self.path}: removed an unfinished last line ({len(data) - keep} bytes) left by an "
                  "interrupted run", file=sys.stderr)

    def append(self, records: Iterable[BaseModel | dict[str, Any]], keys: Iterable[Hashable] = ()) -> None:
        """Append records as ONE write, flushed and fsynced."""
        text = "".join(map(json_line, records))
        if not text:
            return
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        self.done.update(keys)


def append_cost(out: str | os.PathLike[str], key: dict[str, Any], wall_s: float, completion_tokens: int) -> None:
    """One line of the reproducible-mode cost sidecar ``<out>.cost.jsonl``."""
    path = sidecar(out, ".cost.jsonl")
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({**key, "wall_s": wall_s, "completion_tokens": completion_tokens}) + "\n")
        fh.flush()
        os.fsync(fh.fileno())

