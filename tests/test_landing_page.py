"""The landing page states the paper's claim and what this release is (issue 23, point 1): it
opens with two sentences quoted exactly from the paper's abstract and one sentence on the release
(``{{ release_summary }}``, :meth:`Release.summary`, from the manifest's provenance, never from the
release's name), before the ledger's scorecard."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from book_fixtures import book_copy
from helpers import paper_text

from probeguard_core.book import build as bb
from probeguard_core.release import Release, load_release

REPO = Path(__file__).resolve().parents[1]
INTRO = REPO / "book" / "intro.md"




def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_landing_page_opens_with_the_claim_then_the_release_then_the_scorecard() -> None:
    text = _flat(INTRO.read_text(encoding="utf-8"))
    claim = text.index("The paper's claim")
    summary = text.index("{{ release_summary }}")
    scorecard = text.index("{{ ours.ledger.scorecard }}")
    assert text.index("# ") < claim < summary < scorecard
    assert "release, manifest" not in text[:claim]  # nothing on the machinery before the claim


def test_the_claim_quotes_the_abstract_exactly() -> None:
    text = _flat(INTRO.read_text(encoding="utf-8"))
    para = text[text.index("The paper's claim"):text.index("{{ release_summary }}")]
    quotes = re.findall(r'"([^"]{20,})"', para)
    assert len(quotes) == 2, quotes
    paper = _flat(paper_text())
    abstract = paper[paper.index("Abstract"):paper.index("1 Introduction")]
    for q in quotes:
        assert q in abstract, f"not the abstract's words: {q!r}"


@pytest.mark.parametrize("folder", ["simulated-v1", "real-smollm2-135m-mmlu-med"])
def test_summary_of_each_shipped_release(folder: str) -> None:
    rel = load_release(REPO / "data" / folder, verify=False)
    s = rel.summary()
    assert s.count(". ") == 0 and s.endswith(".") and f"'{rel.name}'" in s  # one sentence
    assert str(rel.manifest["seed"]) in s and f"{len(rel.main_cells())} benchmark" in s
    if rel.is_simulated:
        assert "simulated release" in s and rel.manifest["generator"] in s and "not what the paper's models did" in s
    else:
        assert "real release" in s and rel.manifest["pipeline_command"] in s and "simulat" not in s
        assert f"{len(rel.manifest['stand_ins'])} components standing in" in s


def test_summary_follows_provenance_not_name() -> None:
    real = Release(Path("x"), {"name": "simulated-looking", "provenance": "real", "seed": 7,
                               "pipeline_command": "probeguard pipeline"})
    assert "real release" in real.summary() and "simulator" not in real.summary()
    sim = Release(Path("x"), {"name": "real-looking", "provenance": "simulated", "seed": 7,
                              "generator": "g", "generator_version": "1"})
    assert "simulated release" in sim.summary() and "seed 7" in sim.summary() and "0 benchmark" in sim.summary()


def test_build_substitutes_the_release_summary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """build_book hands jupyter-book the release's own summary (captured config, no sphinx run)."""
    book_copy(tmp_path)
    monkeypatch.setattr(bb.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    rel = REPO / "data" / "real-smollm2-135m-mmlu-med"
    bb.build_book(rel, root=tmp_path)
    cfg = yaml.safe_load((tmp_path / "_build" / "_config.generated.yml").read_text(encoding="utf-8"))
    assert cfg["parse"]["myst_substitutions"]["release_summary"] == load_release(rel, verify=False).summary()
    assert cfg["parse"]["myst_substitutions"]["link"]["ledger"] == "{doc}`/book/_generated/ledger`"
    default = yaml.safe_load((REPO / "_config.yml").read_text(encoding="utf-8"))
    assert "release_summary" in default["parse"]["myst_substitutions"]  # a build without build.py still renders
