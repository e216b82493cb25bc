"""Prompt version v2 against the paper's Appendix A boxes (issue 11 section 1).

The paper copy ``../shared/paper/probeguard-paper-full.md`` (relative to the repository) is read
at run time.  A box is found by its caption line; its text is the lines after the caption up to
the next caption, the closing code fence, or (outside a fence) a blank line.  The Markdown
conversion artifacts listed in the copy's README are undone before comparing, and nothing else:
code fences, the devil's-advocate box split into two fences, trailing spaces, and ``\\*\\*BM25\\*\\*``
escapes.  MA-RAG's substrate prompts are compared up to the paper's typesetting of them (line
wrapping, blank lines and ``---`` rules dropped, quotes curled), since v2 sends the source text
of the pinned commit that the paper says it ran unchanged.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from probeguard_core.pipeline.parsing import parse_counter_queries
from probeguard_core.pipeline.templates import (
    PROMPT_VERSION, chat_messages, load_template, prompt_format, prompt_index, template_names, template_source,
)

ROOT = Path(__file__).resolve().parents[1]
REL = Path("..") / "shared" / "paper" / "probeguard-paper-full.md"


def _paper() -> Path:
    """``../shared/paper/...`` beside the repository; in a git worktree, beside its main checkout."""
    here = ROOT / REL
    dotgit = ROOT / ".git"
    if not here.is_file() and dotgit.is_file():  # a worktree: "gitdir: <main>/.git/worktrees/<name>"
        gitdir = Path(dotgit.read_text(encoding="utf-8").split(":", 1)[1].strip())
        main = gitdir.parents[2] if gitdir.parent.name == "worktrees" else None
        if main is not None and (main / REL).is_file():
            return main / REL
    return here


PAPER = _paper()
FENCE = re.compile(r"^```")


@pytest.fixture(scope="module")
def paper_lines() -> list[str]:
    if not PAPER.is_file():
        pytest.skip(f"paper copy not found at {PAPER} (expected ../shared/paper/ beside the repository); "
                    "the verbatim-prompt test needs it")
    return PAPER.read_text(encoding="utf-8").splitlines()


def _captions() -> set[str]:
    return {spec["caption"] for v in ("v1", "v2") for spec in prompt_index(v)["templates"].values() if "caption" in spec}


def box(lines: list[str], caption: str) -> str:
    """The text of the box captioned ``caption``, conversion artifacts undone."""
    hits = [i for i, line in enumerate(lines) if line.rstrip() == caption]
    assert len(hits) == 1, f"caption {caption!r} found {len(hits)} times in the paper copy"
    i = hits[0]
    fenced = _inside_fence(lines, i)
    out: list[str] = []
    j = i + 1
    while j < len(lines):
        line = lines[j].rstrip()  # trailing spaces: a conversion artifact
        if line in _captions():
            break
        if fenced and FENCE.match(line):
            # the devil's-advocate box is split into two fences: continue into the next one
            k = j + 1
            while k < len(lines) and not lines[k].strip():
                k += 1
            if k < len(lines) and FENCE.match(lines[k]) and lines[k + 1].startswith("### Challenge Documents"):
                j = k + 1
                continue
            break
        if not fenced and not line:
            break
        out.append(line)
        j += 1
    return "\n".join(out).replace(r"\*", "*")


def _inside_fence(lines: list[str], i: int) -> bool:
    return sum(1 for x in lines[:i] if FENCE.match(x)) % 2 == 1


def part(text: str, which: str | None) -> str:
    """System or user part of a "system + user" box: the user part starts at ``### Question``."""
    if which is None:
        return text
    lines = text.split("\n")
    k = lines.index("### Question")
    return "\n".join(lines[:k] if which == "system" else lines[k:])


def typeset(text: str) -> str:
    """The paper's typesetting of a source prompt: rules and blank lines dropped, lines joined, quotes curled."""
    text = text.replace("`", "'").replace("‘", "'").replace("’", "'")
    return " ".join(w for line in text.split("\n") if line.strip() != "---" for w in line.split())


PAPER_TEMPLATES = [n for n in template_names("v2") if template_source(n, "v2")["source"] == "paper"]
MARAG_TEMPLATES = [n for n in template_names("v2")
                   if template_source(n, "v2")["source"] == "ma-rag" and "caption" in template_source(n, "v2")]


def test_v2_is_default_and_v1_loads():
    assert PROMPT_VERSION == "v2"
    assert load_template("user_probe_devil", "v1") != load_template("user_probe_devil", "v2")
    assert prompt_format("v1")["confidence_tag"] == "confidence" and prompt_format("v2")["confidence_tag"] == "conf"
    with pytest.raises(ValueError, match="unknown prompt version"):
        load_template("system_answer", "v9")


def test_every_template_has_a_source():
    sources = {n: template_source(n, "v2")["source"] for n in template_names("v2")}
    assert sorted(PAPER_TEMPLATES) == sorted(["system_counter_query", "user_counter_query", "user_probe_devil",
                                              "system_verbalized_confidence", "user_verbalized_confidence",
                                              "system_p_true", "user_p_true"])
    # the two control arms the paper does not print stay ours, and say so
    assert {n for n, s in sources.items() if s == "ours"} == {"user_probe_instruction_only", "user_probe_neutral"}


@pytest.mark.parametrize("name", PAPER_TEMPLATES)
def test_template_equals_its_paper_box(paper_lines, name):
    spec = template_source(name, "v2")
    expected = part(box(paper_lines, spec["caption"]), spec.get("part"))
    assert load_template(name, "v2") == expected


@pytest.mark.parametrize("name", MARAG_TEMPLATES)
def test_substrate_template_matches_its_typeset_box(paper_lines, name):
    spec = template_source(name, "v2")
    assert typeset(load_template(name, "v2")) == typeset(box(paper_lines, spec["caption"]))


def test_box_extraction_can_fail(paper_lines):
    """The comparison is not vacuous: v1's paraphrases differ from the boxes."""
    for name in ("system_counter_query", "user_probe_devil", "user_verbalized_confidence"):
        spec = template_source(name, "v2")
        assert load_template(name, "v1") != part(box(paper_lines, spec["caption"]), spec.get("part"))
    assert box(paper_lines, template_source("user_probe_devil", "v2")["caption"]).count("### Challenge Documents") == 1


def test_controls_mirror_the_devil_prompt():
    devil, instr = load_template("user_probe_devil"), load_template("user_probe_instruction_only")
    assert "do not change" in devil.replace("\n", " ") and "not change\nyour answer" in instr
    assert "{{documents}}" not in instr and "devil" not in load_template("user_probe_neutral")


def test_self_report_chats_use_the_papers_system_texts():
    msgs = chat_messages("verbalized_confidence", question="Q", options="A. a\nB. b", answer="A. a")
    assert msgs[0]["content"].endswith("justification.") and msgs[1]["content"].startswith("### Question\nQ")
    assert "<conf>N</conf>" in msgs[1]["content"]
    msgs = chat_messages("p_true", question="Q", options="A. a", answer="A. a")
    assert "True or\nFalse." in msgs[0]["content"]
    v1 = chat_messages("p_true", "v1", question="Q", options="A. a", answer="A. a")
    assert v1[0]["content"] == load_template("system_self_report", "v1")


@pytest.mark.parametrize("text, status, queries", [
    ("[Query 1] a\n[Query 2] b", "ok", ["a", "b"]),
    ("[Query 1] a\n[Query 2] b\n[Query 3] c\n[Query 4] d", "ok", ["a", "b", "c", "d"]),
    ("[Query 1] a", "too_few", ["a"]),
    ("[Query 1] a\n[Query 2] a", "too_few", ["a"]),
    ("[Query 1] a\n[Query 2] b\n[Query 3] c\n[Query 4] d\n[Query 5] e", "too_many", ["a", "b", "c", "d"]),
    ("no query lines at all", "none", []),
    ("[Query 1]\n[Query 2]   ", "none", []),
])
def test_counter_query_parse_categories(text, status, queries):
    got = parse_counter_queries(text, tuple(prompt_format("v2")["counter_queries"]))
    assert (got.status, got.queries) == (status, queries)
