"""``probeguard certify`` on a normal cell vs the same cell with one 1 MiB hostile rationale (issue 25).

The hostile rationale is made of repeated, never closed ``<answer>`` tags: before issue 25 the
claim extractor's pattern ``<answer>.*?</answer>`` re-scanned to the end of the text from every
opening tag (quadratic; a few hundred KiB kept ``apply`` busy for minutes), now
:func:`probeguard_core.claims.strip_answer_tags` is one linear scan.  The shipped MedQA /
Qwen3-8B cell of ``data/simulated-v1`` is copied twice; in the second copy one minority
candidate of a question that certify refers (so its claims go into ``dossiers.jsonl``) gets the
hostile rationale.  The two certify runs take turns within each repeat (same load); the last
line prints the ratio and the difference.

    .venv/bin/python benchmarks/hostile_rationale.py [--repeats 3] [--mib 1]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _timing import timed_side_by_side  # noqa: E402 (after the sys.path set-up)

from probeguard_core.cli import main  # noqa: E402

CELL = ROOT / "data" / "simulated-v1" / "medqa" / "qwen3-8b"


def hostile_text(mib: float) -> str:
    """Repeated opening answer tags with an option letter, ``mib`` MiB of them, never closed."""
    unit = "<answer>A "
    return unit * int(mib * 2**20 / len(unit))


def _plant(lines: list[bytes], text: str) -> str:
    """Give one minority candidate of a question that never converges (always referred) ``text``."""
    for k, raw in enumerate(lines):
        log = json.loads(raw)
        first, last = log["rounds"][0], log["rounds"][-1]
        if len({c["answer"] for c in last["candidates"]}) < 2:
            continue  # converged: may be answered, no dossier
        answers = [c["answer"] for c in first["candidates"]]
        modal = max(set(answers), key=answers.count)
        for c in first["candidates"]:
            if c["answer"] is not None and c["answer"] != modal:
                c["rationale"] = text
                lines[k] = json.dumps(log, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
                return str(log["qid"])
    raise SystemExit("no referred question with a minority candidate in the cell")


def main_(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mib", type=float, default=1.0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        lines = gzip.decompress((CELL / "logs.jsonl.gz").read_bytes()).splitlines(keepends=True)
        normal, hostile = base / "normal.jsonl", base / "hostile.jsonl"
        normal.write_bytes(b"".join(lines))
        qid = _plant(lines, hostile_text(args.mib))
        hostile.write_bytes(b"".join(lines))

        def certify(logs: Path, name: str) -> int:
            argv = ["certify", "--logs", str(logs), "--probe", str(CELL / "probe.jsonl.gz"),
                    "--nli", str(CELL / "nli.jsonl.gz"), "--alpha", "0.1", "--out", str(base / name)]
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                rc = main(argv)
            if rc != 0:
                raise SystemExit(f"certify {name} exited {rc}")
            return rc

        certify(normal, "n")  # warm-up: imports and first-use set-up out of the timed runs
        res = timed_side_by_side({"normal": lambda: certify(normal, "n"), "hostile": lambda: certify(hostile, "h")},
                                 args.repeats)
        dossiers = [json.loads(x) for x in (base / "h" / "dossiers.jsonl").read_text().splitlines()]
        assert any(d["qid"] == qid for d in dossiers), "the hostile question was not referred"
    t_n, t_h = res["normal"][0], res["hostile"][0]
    print(f"cell {CELL.relative_to(ROOT)}: {len(lines)} questions; hostile rationale "
          f"{args.mib:g} MiB in question {qid} (referred, claims in its dossier)")
    print(f"certify normal:  {t_n:.3f} s (median of {args.repeats})")
    print(f"certify hostile: {t_h:.3f} s (median of {args.repeats})")
    print(f"hostile / normal = {t_h / t_n:.3f}x ({t_h - t_n:+.3f} s)")


if __name__ == "__main__":
    main_()
