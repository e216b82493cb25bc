"""Builders of the method pages (tables/method.py): Table 4, Table 9, Appendices A, D, E."""

from __future__ import annotations

from pathlib import Path

from probeguard_core import tables as T
from probeguard_core.features import load_registry
from probeguard_core.pipeline.templates import PROMPT_VERSION

REPO = Path(__file__).resolve().parents[1]


def test_table4_is_the_registry():
    t4 = T.table4()
    assert list(t4["key"]) == ["agreement", "distribution", "minority", "rationale", "retrieval"]
    specs = load_registry()
    assert t4["n_features"].sum() == len(specs) == 34  # §3.1: 34 features across five families
    for row in t4.itertuples():
        assert row.features.split(", ") == [s.name for s in specs if s.family == row.key]


def test_table9_values_are_read_from_the_pipeline_and_match_the_paper():
    t9 = T.table9()
    assert t9.attrs["source"]
    numeric = t9[t9["quantity"] != "classifier"]
    assert len(numeric) == 13 and (numeric["paper"] != "—").all()
    assert [float(v) for v in numeric["value"]] == [float(p) for p in numeric["paper"]]
    clf = t9.loc[t9["quantity"] == "classifier", "value"].iloc[0]
    assert clf.startswith("LogisticRegression(") and "max_iter=100)" in clf  # scikit-learn's default


def test_appendix_a_renders_the_files_the_pipeline_sends():
    a = T.appendix_a_prompts()
    assert a.attrs["version"] == PROMPT_VERSION
    for r in a.itertuples():
        assert (REPO / r.path).read_text(encoding="utf-8").rstrip("\n") == r.text
    assert set(a.loc[a["ours"], "name"]) == {"user_probe_instruction_only", "user_probe_neutral"}
    md = T.prompts_markdown(a)
    assert all(name in md for name in a["name"])


def test_algorithm_lines_point_at_real_functions():
    lines = T.algorithm_lines()
    assert set(lines["algorithm"]) == {1, 2}
    for r in lines.itertuples():
        src = (REPO / r.path).read_text(encoding="utf-8").splitlines()
        name = r.function.rsplit(".", 1)[-1]
        assert f"def {name}(" in src[r.source_line - 1] or f"def {name}(" in "\n".join(src[r.source_line - 1:r.source_line + 2])
    assert "probeguard_core.probe.keep_rate" in set(lines["function"])
    assert "probeguard_core.certify.ltt_threshold" in set(lines["function"])


def test_appendix_e_protocol_constants():
    p = T.appendix_e_protocol().set_index("quantity")
    assert p.loc["coverage grid", "ours"].startswith("0.05 to 1.00 in steps of 0.05 (20 points)")
    assert p.loc["error budget δ", "ours"] == "0.05" and p.loc["repeated splits", "ours"] == "50"
