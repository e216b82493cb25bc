"""The paper's testable claims (issue 22, point 1): ``data/paper_claims.yaml`` read and checked.

Each :class:`Claim` quotes the paper's sentence and section, names the quantity, the cells it is
computed on, the evaluator kind (:data:`probeguard_core.ledger.evaluate.EVALUATORS`) and the rule
(:func:`probeguard_core.ledger.verdict.verdict`), in words and in code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from probeguard_core.ledger.verdict import TESTS
from probeguard_core.tables.departures import MECHANISMS

__all__ = ["CLAIMS_PATH", "KINDS", "Claim", "load_claims"]

#: The packaged registry.
CLAIMS_PATH: Path = Path(__file__).resolve().parent.parent / "data" / "paper_claims.yaml"

#: The evaluator kinds a claim may name (one evaluator per kind, :mod:`.evaluate`).
KINDS: tuple[str, ...] = ("auroc", "auroc_margin", "aurc_margin", "round_error_rise", "flip_asymmetry",
                          "arm_asymmetry", "certification", "violations", "hard_soft", "ablation")

_FIELDS = ("id", "section", "page", "mechanism", "quote", "quantity", "kind", "params", "cells", "rule", "rule_text")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper's results sections (fields as in ``data/paper_claims.yaml``)."""

    id: str
    section: str
    page: str
    quote: str
    quantity: str
    kind: str
    rule_test: str
    threshold: float
    rule_text: str
    backbones: str | tuple[str, ...]
    datasets: str | tuple[str, ...]
    params: dict[str, Any] = field(default_factory=dict)
    #: The simulator mechanism behind the claim's number on a simulated release (a key of
    #: :data:`probeguard_core.tables.departures.MECHANISMS`).
    mechanism: str = ""


def _fail(path: Path, i: int, name: str, msg: str) -> ValueError:
    return ValueError(f"{path}: claim {i + 1} ({name}): {msg}")


def _selector(v: Any, path: Path, i: int, name: str, what: str) -> str | tuple[str, ...]:
    if isinstance(v, str) and v in ("all", "primary"):
        return v
    if isinstance(v, list) and v and all(isinstance(x, str) and x for x in v):
        return tuple(v)
    raise _fail(path, i, name, f"field cells.{what} must be 'all', 'primary' or a list of names, got {v!r}")


def load_claims(path: str | Path | None = None) -> list[Claim]:
    """Every claim of the registry at ``path`` (default :data:`CLAIMS_PATH`), checked: each field
    present and typed, ids unique, the kind known, the rule test one of :data:`verdict.TESTS`.
    A bad registry raises ``ValueError`` naming the file, the claim and the field."""
    p = Path(path) if path is not None else CLAIMS_PATH
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ValueError(f"{p}: not valid YAML ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("claims"), list) or not doc["claims"]:
        raise ValueError(f"{p}: field claims must be a non-empty list")
    out: list[Claim] = []
    seen: set[str] = set()
    for i, c in enumerate(doc["claims"]):
        name = c.get("id", "?") if isinstance(c, dict) else "?"
        if not isinstance(c, dict):
            raise _fail(p, i, name, "must be a mapping")
        for f in _FIELDS:
            if f not in c:
                raise _fail(p, i, name, f"field {f} is missing")
        for f in ("id", "section", "page", "mechanism", "quote", "quantity", "kind", "rule_text"):
            if not isinstance(c[f], str) or not c[f].strip():
                raise _fail(p, i, name, f"field {f} must be a non-empty string")
        if c["id"] in seen:
            raise _fail(p, i, name, "field id repeats an earlier claim's id")
        seen.add(c["id"])
        if c["kind"] not in KINDS:
            raise _fail(p, i, name, f"field kind must be one of {KINDS}, got {c['kind']!r}")
        if c["mechanism"] not in MECHANISMS:
            raise _fail(p, i, name, f"field mechanism must be one of {sorted(MECHANISMS)}, got {c['mechanism']!r}")
        if not isinstance(c["params"], dict):
            raise _fail(p, i, name, "field params must be a mapping")
        rule, cells = c["rule"], c["cells"]
        if not isinstance(rule, dict) or rule.get("test") not in TESTS:
            raise _fail(p, i, name, f"field rule.test must be one of {TESTS}")
        thr = rule.get("threshold")
        if isinstance(thr, bool) or not isinstance(thr, (int, float)):
            raise _fail(p, i, name, f"field rule.threshold must be a number, got {thr!r}")
        if not isinstance(cells, dict) or set(cells) != {"backbones", "datasets"}:
            raise _fail(p, i, name, "field cells must have exactly backbones and datasets")
        out.append(Claim(id=c["id"], section=c["section"], page=c["page"], quote=" ".join(c["quote"].split()),
                         quantity=c["quantity"], kind=c["kind"], rule_test=rule["test"], threshold=float(thr),
                         rule_text=c["rule_text"],
                         backbones=_selector(cells["backbones"], p, i, name, "backbones"),
                         datasets=_selector(cells["datasets"], p, i, name, "datasets"), params=dict(c["params"]),
                         mechanism=c["mechanism"]))
    return out
