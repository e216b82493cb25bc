"""The simulator's parameters and cells (issue 3; ``params.yaml``, DESIGN 2.7).

Every input of the generative model (:mod:`probeguard_core.simulate.model`) is a rate or a
shape read from ``params.yaml`` with its source or the assumption it rests on
(:func:`load_params` refuses a leaf without one); :data:`CELLS` names the release's cells and
:func:`rng_for` derives every random stream from :data:`probeguard_core.SEED` and names.
"""

from __future__ import annotations

import copy
import functools
import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from probeguard_core import SEED

__all__ = [
    "ARMS", "CELLS", "CELL_INDEX", "PARAMS_PATH", "STATES", "Sections", "cell_size", "cell_spec", "load_params",
    "load_yaml", "rng_for", "v",
]

#: The latent states of a question (knowledge-backed, shared misconception, genuinely uncertain).
STATES = ("knowledge", "misconception", "uncertain")
#: The probe's arms (DESIGN 2.2): Algorithm 1 and its three controls (App. G).
ARMS = ("counter_evidence", "instruction_only", "irrelevant_docs", "neutral_instruction")
PARAMS_PATH = Path(__file__).with_name("params.yaml")


def _check_leaves(node: Any, where: str) -> None:
    """Every input is ``{value, source}`` or ``{value, assumed}`` (specialty rows: ``{n, error, source}``)."""
    if not isinstance(node, dict):
        raise ValueError(f"params: {where} must be a mapping with value and source/assumed, got {node!r}")
    if "value" in node or "n" in node:
        has = [k for k in ("source", "assumed") if k in node]
        if len(has) != 1 or not str(node[has[0]]).strip():
            raise ValueError(f"params: {where} needs exactly one non-empty 'source' or 'assumed'")
        return
    for k, v in node.items():
        _check_leaves(v, f"{where}.{k}" if where else str(k))


def load_params(path: str | Path | None = None) -> dict[str, Any]:
    """Read and check ``params.yaml``; raises ValueError naming a leaf without a source/assumption."""
    p = Path(path) if path is not None else PARAMS_PATH
    return copy.deepcopy(_parse_params(p.read_text(encoding="utf-8"), str(p)))  # callers may edit their copy


#: libyaml's parser where PyYAML has it (the same SafeConstructor, so the same values), else PyYAML's own.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_SafeLoader)


@functools.lru_cache(maxsize=8)
def _parse_params(text: str, where: str) -> dict[str, Any]:
    """The checked parameters of one file's text (parsed once per text; :func:`load_params` copies)."""
    raw = load_yaml(text)
    if not isinstance(raw, dict) or "cells" not in raw:
        raise ValueError(f"{where}: not a simulator parameter file (no 'cells')")
    for key in ("panel", "datasets", "backbones", "mechanism", "specialties", "cells"):
        _check_leaves(raw[key], key)
    return raw


def v(node: dict[str, Any]) -> Any:
    """The value of a ``{value, source | assumed}`` leaf."""
    return node["value"]


#: (path, dataset, backbone, role); the augmentation pool is a MedQA cell with role "augment".
CELLS: tuple[tuple[str, str, str, str], ...] = (
    ("medqa/qwen3-8b", "medqa", "Qwen/Qwen3-8B", "main"),
    ("mmlu_pro_med/qwen3-8b", "mmlu_pro_med", "Qwen/Qwen3-8B", "main"),
    ("medmcqa/qwen3-8b", "medmcqa", "Qwen/Qwen3-8B", "main"),
    ("medxpertqa/qwen3-8b", "medxpertqa", "Qwen/Qwen3-8B", "main"),
    ("medqa/huatuogpt-o1-8b", "medqa", "FreedomIntelligence/HuatuoGPT-o1-8B", "main"),
    ("mmlu_pro_med/huatuogpt-o1-8b", "mmlu_pro_med", "FreedomIntelligence/HuatuoGPT-o1-8B", "main"),
    ("medqa/llama-3.1-8b-instruct", "medqa", "meta-llama/Llama-3.1-8B-Instruct", "main"),
    ("mmlu_pro_med/llama-3.1-8b-instruct", "mmlu_pro_med", "meta-llama/Llama-3.1-8B-Instruct", "main"),
    ("medqa-augment/qwen3-8b", "medqa", "Qwen/Qwen3-8B", "augment"),
)
CELL_INDEX = {c[0]: c for c in CELLS}


def cell_spec(path: str) -> tuple[str, str, str, str]:
    """``(path, dataset, backbone, role)`` of a cell path such as ``"medqa/qwen3-8b"``."""
    if path not in CELL_INDEX:
        raise ValueError(f"unknown cell {path!r}; expected one of {sorted(CELL_INDEX)}")
    return CELL_INDEX[path]


def rng_for(*parts: str | int) -> np.random.Generator:
    """A Generator seeded from SEED and the given names/indices (stable across runs and platforms)."""
    key = [SEED] + [p if isinstance(p, int) else zlib.crc32(str(p).encode("utf-8")) for p in parts]
    return np.random.default_rng(key)


def cell_size(cell: str, params: dict[str, Any], scale: float = 1.0) -> int:
    """The number of questions of ``cell`` at ``scale`` (a scaled cell is a prefix of the full one)."""
    if not (0 < scale <= 1.0):
        raise ValueError(f"scale must be in (0, 1], got {scale!r}")
    n = int(v(params["cells"][cell]["n_questions"]))
    return max(1, int(round(n * scale)))


class Sections:
    """Parameter sections as an ``lru_cache`` key: equal when their canonical JSON texts are."""

    def __init__(self, sections: tuple[dict[str, Any], ...]):
        self.sections = sections
        self.key = json.dumps(sections, sort_keys=True)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sections) and other.key == self.key
