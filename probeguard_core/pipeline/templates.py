"""Versioned prompt templates (paper Appendix A), stored as ``prompts/<version>/<name>.txt``.

Template variables appear in double braces, ``{{name}}``.  Rendering is strict: a variable
missing from the call, or a keyword the template does not use, raises ``ValueError``.

Each version folder has an ``index.yaml`` that says where every template comes from (the
paper's box, MA-RAG's source, or ours), which (system, user) pair each self-report call uses,
and the output formats its parsers expect (:func:`prompt_format`).

* ``v2`` (default): the paper's own prompts verbatim; the two control-arm prompts the paper
  does not print are ours and marked ``source: ours``.
* ``v1``: the first prompts (probe and self-report paraphrased); still loadable, so logs made
  with it stay interpretable.  Every record the pipeline writes names its ``prompt_version``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import Any

import yaml

__all__ = ["PROMPT_VERSION", "PROMPT_VERSIONS", "load_template", "render", "template_names", "prompt_index",
           "prompt_format", "chat_messages", "template_source"]

PROMPT_VERSION = "v2"
PROMPT_VERSIONS = ("v1", "v2")
_VAR = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def _folder(version: str):
    if version not in PROMPT_VERSIONS:
        raise ValueError(f"unknown prompt version {version!r}; expected one of {list(PROMPT_VERSIONS)}")
    return resources.files("probeguard_core.pipeline").joinpath("prompts", version)


@lru_cache(maxsize=None)
def load_template(name: str, version: str = PROMPT_VERSION) -> str:
    """The raw text of ``prompts/<version>/<name>.txt`` (trailing newline removed)."""
    path = _folder(version).joinpath(f"{name}.txt")
    if not path.is_file():
        raise ValueError(f"unknown prompt template {version}/{name}.txt")
    return path.read_text(encoding="utf-8").rstrip("\n")


def template_names(version: str = PROMPT_VERSION) -> list[str]:
    return sorted(p.name.removesuffix(".txt") for p in _folder(version).iterdir() if p.name.endswith(".txt"))


@lru_cache(maxsize=None)
def prompt_index(version: str = PROMPT_VERSION) -> dict[str, Any]:
    """``prompts/<version>/index.yaml``, checked against the folder's templates."""
    path = _folder(version).joinpath("index.yaml")
    index = yaml.safe_load(path.read_text(encoding="utf-8"))
    listed, present = set(index.get("templates", {})), set(template_names(version))
    if listed != present:
        raise ValueError(f"prompts/{version}/index.yaml: templates {sorted(listed ^ present)} are listed "
                         "but missing, or present but not listed")
    for name, spec in index["templates"].items():
        if spec.get("source") not in ("paper", "ma-rag", "ours"):
            raise ValueError(f"prompts/{version}/index.yaml: templates.{name}.source must be paper, ma-rag or ours")
    return index


def prompt_format(version: str = PROMPT_VERSION) -> dict[str, Any]:
    """Output formats the version's prompts ask for (``confidence_tag``, ``counter_queries``)."""
    return dict(prompt_index(version)["formats"])


def template_source(name: str, version: str = PROMPT_VERSION) -> dict[str, str]:
    """Where a template comes from: ``{"source": "paper" | "ma-rag" | "ours", ...}``."""
    try:
        return dict(prompt_index(version)["templates"][name])
    except KeyError:
        raise ValueError(f"unknown prompt template {version}/{name}.txt") from None


def chat_messages(purpose: str, version: str = PROMPT_VERSION, **values: str) -> list[dict[str, str]]:
    """System + user messages of a self-report call (``purpose`` a key of the index's ``chats``)."""
    chats = prompt_index(version)["chats"]
    if purpose not in chats:
        raise ValueError(f"prompts/{version}: no chat {purpose!r}; expected one of {sorted(chats)}")
    system, user = chats[purpose]
    return [{"role": "system", "content": render(system, version)},
            {"role": "user", "content": render(user, version, **values)}]


def render(name: str, version: str = PROMPT_VERSION, **values: str) -> str:
    """Fill ``{{var}}`` placeholders of a template; every placeholder and every value must match."""
    text = load_template(name, version)
    wanted = set(_VAR.findall(text))
    missing = wanted - values.keys()
    extra = values.keys() - wanted
    if missing or extra:
        raise ValueError(f"prompt {version}/{name}: missing {sorted(missing)}, unexpected {sorted(extra)}")
    return _VAR.sub(lambda m: str(values[m.group(1)]), text)
