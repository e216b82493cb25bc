"""Numbers that the landing page (``book/*.md``) quotes from the notebooks, as MyST substitutions.

myst-nb's ``glue`` pastes a value only inside the notebook that glued it, so a page that is not a
notebook cannot glue. Instead it writes ``{{ ours.<notebook>.<key> }}`` and the
build (:func:`probeguard_core.book.build.build_book`) substitutes the value ``<key>`` of
``book/_generated/<notebook>/results.json``, which that notebook computed and wrote with
``out.results``: the prose never holds a hand-typed result.

>>> quoted(0.3491341439), quoted(44), quoted(True), quoted(None), quoted("Qwen/Qwen3-8B", "backbone")
('0.349', '44', 'yes', '–', 'Qwen3-8B')
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

__all__ = ["NOT_RUN", "REFERENCE", "quoted", "results_substitutions"]

#: A reference in ``book/*.md``: ``{{ ours.<notebook>.<key> }}``.
REFERENCE = re.compile(r"\{\{\s*ours\.(\w+)\.(\w+)\s*\}\}")
#: What a reference reads when its notebook is not part of this build (a partial build).
NOT_RUN = "(not computed in this build)"


def quoted(value: Any, key: str = "") -> str:
    """A ``results.json`` value as the prose shows it: floats with three decimals, integers
    as they are, booleans as yes / no, a missing value (null) as '–', a ``backbone`` or
    ``dataset`` by its name (:func:`paper.display_label`)."""
    if key in ("backbone", "dataset") and isinstance(value, str):
        from probeguard_core.paper import display_label

        return display_label(key, value)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, str):
        return value
    raise TypeError(f"prose can only quote a number or a word of results.json, not {type(value).__name__}")


def results_substitutions(root: Path, generated: Path) -> dict[str, dict[str, str]]:
    """``{notebook: {key: text}}`` for every ``{{ ours.<notebook>.<key> }}`` of ``root/book/*.md``,
    read from ``generated/<notebook>/results.json``. A notebook without a ``results.json`` (not
    run in this build) reads :data:`NOT_RUN`; a key that its ``results.json`` lacks is an error
    naming the page, the file and the key (a typo must not print a dash)."""
    refs: dict[str, dict[str, Path]] = {}
    for md in sorted((root / "book").glob("*.md")):
        for nb, key in REFERENCE.findall(md.read_text(encoding="utf-8")):
            refs.setdefault(nb, {})[key] = md
    out: dict[str, dict[str, str]] = {}
    for nb, keys in sorted(refs.items()):
        path = generated / nb / "results.json"
        if not path.is_file():
            out[nb] = dict.fromkeys(keys, NOT_RUN)
            continue
        res = json.loads(path.read_text(encoding="utf-8"))
        missing = [f"{md.relative_to(root)}: {{{{ ours.{nb}.{k} }}}}" for k, md in keys.items() if k not in res]
        if missing:
            raise KeyError(f"{path}: no key for {', '.join(missing)} (keys: {', '.join(sorted(res))})")
        out[nb] = {k: quoted(res[k], k) for k in keys}
    return out
