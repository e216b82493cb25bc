"""CITATION.cff is valid Citation File Format 1.2.0, cites the paper as its preferred citation,
and agrees with the package and the book's repository setting.

The schema (tests/fixtures/citation-file-format-1.2.0.schema.json) is the Citation File Format
project's 1.2.0 schema (CC-BY-4.0), as shipped in the ``cffconvert`` 2.0.0 wheel; ``cffconvert``
itself is not used because it requires ``jsonschema<4``, which the book's stack cannot take.
"""

from __future__ import annotations

import copy
import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

import probeguard_core
from probeguard_core.book import sphinx_ext

REPO = Path(__file__).resolve().parent.parent
SCHEMA = REPO / "tests" / "fixtures" / "citation-file-format-1.2.0.schema.json"
PAPER_TITLE = "Unanimously Wrong: Certified Abstention from How Medical LLM Consensus Forms"


def _cff() -> dict[str, Any]:
    # the schema validates the YAML's data model: dates and numbers as YAML types, not strings
    return yaml.safe_load((REPO / "CITATION.cff").read_text(encoding="utf-8"))


def _errors(data: dict[str, Any]) -> list[str]:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    return [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(data)]


def test_citation_file_is_valid_cff_1_2_0() -> None:
    data = _cff()
    assert data["cff-version"] == "1.2.0"
    errors = _errors(data)
    assert not errors, "CITATION.cff:\n" + "\n".join(errors)


@pytest.mark.parametrize("breakage", ["no authors", "bad type", "bad url"])
def test_the_schema_check_can_fail(breakage: str) -> None:
    data = copy.deepcopy(_cff())
    if breakage == "no authors":
        del data["preferred-citation"]["authors"]
    elif breakage == "bad type":
        data["preferred-citation"]["type"] = "paper"
    else:
        data["repository-code"] = "not a url"
    assert _errors(data)


def test_the_preferred_citation_is_the_paper() -> None:
    cite = _cff()["preferred-citation"]
    assert cite["title"] == PAPER_TITLE
    assert [(a["given-names"], a["family-names"]) for a in cite["authors"]] == [
        ("Xiaoyang", "Wang"), ("Tianrui", "Wang"), ("Christopher C.", "Yang")]
    paper_code = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]["Paper-code"]
    assert cite["repository-code"] == paper_code


def test_the_companion_entry_agrees_with_the_package_and_the_repository_setting() -> None:
    data = _cff()
    assert data["type"] == "software"
    assert str(data["version"]) == probeguard_core.__version__
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert data["license"] == project["license"]["text"]
    repo = sphinx_ext.repository(REPO)
    assert data["repository-code"] == repo.url
    assert data["url"] == repo.pages_url
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert repo.pages_url in readme, "README's Publishing section names where the book is deployed"
