"""The pipeline's hyperparameters (paper Table 9, Appendix L), read from one file.

``probeguard_core/data/hyperparameters.yaml`` holds every default the pipeline stages use,
each with its source: the Table 9 row it reproduces (``table9``) or, for settings Table 9 does
not list, where it comes from (``source``).  Configs take their defaults from :func:`hp`, and
the book renders Table 9 from :func:`table9_rows`, so the two cannot drift apart.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

__all__ = ["hp", "hyperparameters", "table9_rows", "HYPERPARAMETERS_FILE"]

HYPERPARAMETERS_FILE = "data/hyperparameters.yaml"


@lru_cache(maxsize=1)
def hyperparameters() -> dict[str, dict[str, dict[str, Any]]]:
    """The whole file, validated: every entry has ``value`` and exactly one of ``table9`` / ``source``."""
    path = resources.files("probeguard_core").joinpath(HYPERPARAMETERS_FILE)
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    for group, entries in data.items():
        for name, spec in entries.items():
            where = f"probeguard_core/{HYPERPARAMETERS_FILE}: {group}.{name}"
            if not isinstance(spec, dict) or "value" not in spec:
                raise ValueError(f"{where}: needs a 'value'")
            if ("table9" in spec) == ("source" in spec):
                raise ValueError(f"{where}: needs exactly one of 'table9' (the paper's row) or 'source'")
            if "table9" in spec and "shown" not in spec:
                raise ValueError(f"{where}: a Table 9 row needs 'shown' (the value as the paper prints it)")
    return data


def hp(group: str, name: str) -> Any:
    """The value of one hyperparameter, e.g. ``hp("consensus_generation", "n_candidates")`` -> 8."""
    try:
        return hyperparameters()[group][name]["value"]
    except KeyError:
        raise KeyError(f"no hyperparameter {group}.{name} in probeguard_core/{HYPERPARAMETERS_FILE}") from None


def table9_rows() -> list[tuple[str, str, str]]:
    """Table 9 as the paper prints it: ``(section, parameter, shown value)``, one row per paper row
    (BM25's k1 and b share one row)."""
    rows: list[tuple[str, str, str]] = []
    for entries in hyperparameters().values():
        for spec in entries.values():
            if "table9" in spec:
                section, label = (s.strip() for s in spec["table9"].split("/", 1))
                row = (section, label, str(spec["shown"]))
                if row not in rows:
                    rows.append(row)
    return rows
