"""Versioned prompt templates (paper Appendix A), stored as ``prompts/<version>/<name>.txt``.

Template variables appear in double braces, ``{{name}}``.  Rendering is strict: a variable
missing from the call, or a keyword the template does not use, raises ``ValueError``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

__all__ = ["PROMPT_VERSION", "load_template", "render", "template_names"]

PROMPT_VERSION = "v1"
_VAR = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@lru_cache(maxsize=None)
def load_template(name: str, version: str = PROMPT_VERSION) -> str:
    """The raw text of ``prompts/<version>/<name>.txt`` (trailing newline removed)."""
    path = resources.files("probeguard_core.pipeline").joinpath("prompts", version, f"{name}.txt")
    if not path.is_file():
        raise ValueError(f"unknown prompt template {version}/{name}.txt")
    return path.read_text(encoding="utf-8").rstrip("\n")


def template_names(version: str = PROMPT_VERSION) -> list[str]:
    folder = resources.files("probeguard_core.pipeline").joinpath("prompts", version)
    return sorted(p.name.removesuffix(".txt") for p in folder.iterdir() if p.name.endswith(".txt"))


def render(name: str, version: str = PROMPT_VERSION, **values: str) -> str:
    """Fill ``{{var}}`` placeholders of a template; every placeholder and every value must match."""
    text = load_template(name, version)
    wanted = set(_VAR.findall(text))
    missing = wanted - values.keys()
    extra = values.keys() - wanted
    if missing or extra:
        raise ValueError(f"prompt {version}/{name}: missing {sorted(missing)}, unexpected {sorted(extra)}")
    return _VAR.sub(lambda m: str(values[m.group(1)]), text)
