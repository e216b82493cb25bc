"""Tests of probeguard_core.tables: the table builders of §4.3, §5.1, App. C, G-K and the
what-if chapter that the notebooks share.

A small hand-built cell (helpers.make_log / make_probe / make_nli) gives numbers that are
worked out by hand or cross-checked against the core and reference libraries.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from helpers import make_log, make_nli, make_probe, make_self_report
from sklearn.metrics import roc_auc_score
from statsmodels.stats.proportion import proportion_confint

from probeguard_core import tables as T
from probeguard_core import certify as C
from probeguard_core import logs as L
from probeguard_core.claims import extract_claims
from probeguard_core.tables.appendices import _case_of

BACKBONE = "Qwen/Qwen3-8B"
N_S1 = 30
N_S2 = 12


@dataclass
class FakeCell:
    """Duck-typed release Cell (attributes used by the builders)."""

    logs: list[L.QuestionLog]
    probe: list[L.ProbeRecord] | None
    nli: list[L.NLIRecord] | None
    self_report: list[L.SelfReport] | None = None
    dataset: str = "medqa"
    backbone: str = BACKBONE
    role: str = "main"
    label: str = "MedQA / test"
    extra: dict[str, Any] = field(default_factory=dict)

    def probe_by_arm(self, arm: str = "counter_evidence") -> list[L.ProbeRecord]:
        return [r for r in (self.probe or []) if r.arm == arm]


def _s1_wrong(i: int) -> bool:
    return i % 5 == 0  # 6 wrong of 30


def _s1_flipped(i: int) -> bool:
    # wrong consensus flips for i in {0, 10, 20}; correct flips only for i = 7
    return (_s1_wrong(i) and i % 10 == 0) or i == 7


def _specialty(i: int) -> str | None:
    if i % 9 == 8:
        return None
    return "Cardiology" if i % 3 == 0 else "Neurology" if i % 3 == 1 else "Dermatology"


def build_cell(with_cost: bool = True) -> FakeCell:
    kw = {"dataset": "medqa", "backbone": BACKBONE}
    logs, probe, nli, sr = [], [], [], []
    for i in range(N_S1):
        qid = f"q{i:02d}"
        gold = "B" if _s1_wrong(i) else "A"
        cost = {"wall_s": 10.0 + i, "completion_tokens": 100 + i} if (with_cost and i != 3) else None
        logs.append(make_log([["A"] * 4], gold=gold, qid=qid, specialty=_specialty(i), cost=cost, **kw))
        ce = ["B", "B", "B", "A"] if _s1_flipped(i) else (["A", "A", "A", "B"] if i % 4 == 0 else ["A"] * 4)
        probe.append(make_probe(ce, consensus="A", qid=qid, cost={"wall_s": 20.0 + i, "completion_tokens": 400 + i}, **kw))
        probe.append(make_probe(["A"] * 4, consensus="A", arm="instruction_only", qid=qid, **kw))
        # coherent rationales for correct consensus, less so for wrong; a spread inside each group
        base = (0.3 if _s1_wrong(i) else 0.7) + 0.01 * (i % 7)
        E = [[1.0 if a == b else base for b in range(4)] for a in range(4)]
        nli.append(make_nli(claims=[f"claim {j}" for j in range(4)], entailment=E, candidates=[0, 1, 2, 3], qid=qid, **kw))
        sr.append(make_self_report(qid=qid, verbalized_confidence=50.0 + i, p_true=0.5, **kw))
    for i in range(N_S2):
        qid = f"r{i:02d}"
        logs.append(make_log([["A", "B", "A", "A"], ["A"] * 4], gold="A" if i % 3 else "C", qid=qid,
                             doc_ids=[["d1", "d2"], None], specialty=_specialty(i),
                             cost={"wall_s": 50.0, "completion_tokens": 500} if with_cost else None, **kw))
        sr.append(make_self_report(qid=qid, **kw))
    return FakeCell(
        logs=[L.QuestionLog.model_validate(x) for x in logs],
        probe=[L.ProbeRecord.model_validate(x) for x in probe],
        nli=[L.NLIRecord.model_validate(x) for x in nli],
        self_report=[L.SelfReport.model_validate(x) for x in sr],
    )


@pytest.fixture(scope="module")
def cell() -> FakeCell:
    return build_cell()


# --------------------------------------------------------------------------- §4.3 / Figure 3
def test_unanimous_layer_table_hand_values(cell: FakeCell) -> None:
    t = T.unanimous_layer_table([cell])
    get = lambda q, s="": float(t.loc[(t["quantity"] == q) & (t["signal"] == s), "value"].iloc[0])  # noqa: E731
    assert get("unanimous_share") == pytest.approx(N_S1 / (N_S1 + N_S2))
    assert get("unanimous_error") == pytest.approx(6 / 30)
    assert get("n_unanimous") == 30
    ok = np.array([not _s1_wrong(i) for i in range(N_S1)])
    kappa = np.array([0.25 if _s1_flipped(i) else (0.75 if i % 4 == 0 else 1.0) for i in range(N_S1)])
    assert get("auroc", "keep_rate") == pytest.approx(roc_auc_score(ok, kappa))
    rse = np.array([(0.3 if _s1_wrong(i) else 0.7) + 0.01 * (i % 7) for i in range(N_S1)])
    assert get("auroc", "rse") == pytest.approx(roc_auc_score(ok, rse)) == pytest.approx(1.0)
    assert get("auroc", "verbalized_confidence") == pytest.approx(roc_auc_score(ok, 50.0 + np.arange(N_S1)))
    # sequence log-prob is constant in this cell: z = 0, so rse_keep_logprob ranks like rse_keep
    assert get("auroc", "rse_keep_logprob") == pytest.approx(get("auroc", "rse_keep"))


def test_flip_rates_and_wilson(cell: FakeCell) -> None:
    f = T.flip_rates([cell]).set_index("quantity")
    assert (f.loc["flip_wrong", "k"], f.loc["flip_wrong", "n"]) == (3, 6)
    assert (f.loc["flip_right", "k"], f.loc["flip_right", "n"]) == (1, 24)
    assert f.loc["flip_wrong", "value"] == pytest.approx(0.5)
    lo, hi = proportion_confint(1, 24, alpha=0.05, method="wilson")
    assert (f.loc["flip_right", "ci_low"], f.loc["flip_right", "ci_high"]) == pytest.approx((lo, hi))


def test_beside_sources_first_match_wins() -> None:
    ours = pd.DataFrame({
        "backbone": [BACKBONE, BACKBONE, "FreedomIntelligence/HuatuoGPT-o1-8B", BACKBONE],
        "dataset": ["medqa", "medqa", "medqa", "medxpertqa"],
        "quantity": ["flip_wrong", "flip_right", "flip_wrong", "flip_wrong"],
        "value": [0.2, 0.05, 0.1, 0.3],
    })
    b = T.beside_sources(ours, on=["backbone", "dataset", "quantity"],
                          sources=[{"source": "Table 6", "arm": "counter_evidence"},
                                   {"source": "§4.3", "arm": "counter_evidence"}])
    assert b["paper"].iloc[0] == pytest.approx(0.14) and b["paper_source"].iloc[0] == "Table 6"
    assert b["paper"].iloc[2] == pytest.approx(0.154) and b["paper_source"].iloc[2] == "§4.3"
    assert math.isnan(b["paper"].iloc[3]) and b["paper_source"].iloc[3] == ""
    assert b["diff"].iloc[0] == pytest.approx(0.2 - 0.14)


# --------------------------------------------------------------------------- Table 6
def test_probe_arm_table_asymmetry(cell: FakeCell) -> None:
    t = T.probe_arm_table(cell, n_boot=300, seed=1)
    v = lambda arm, q: float(t.loc[(t["arm"] == arm) & (t["quantity"] == q), "value"].iloc[0])  # noqa: E731
    assert v("instruction_only", "flip_wrong") == 0.0 and v("instruction_only", "flip_right") == 0.0
    est = v("instruction_only", "asymmetry_diff")
    assert est == pytest.approx((3 / 6 - 1 / 24) - 0.0)
    lo, hi = v("instruction_only", "asymmetry_diff_ci_low"), v("instruction_only", "asymmetry_diff_ci_high")
    assert lo <= est <= hi and lo < hi
    # neutral / irrelevant arms are absent from this cell: no rows for them
    assert set(t["arm"]) == {"counter_evidence", "instruction_only"}
    # same seed, same interval
    t2 = T.probe_arm_table(cell, n_boot=300, seed=1)
    pd.testing.assert_frame_equal(t, t2)


# --------------------------------------------------------------------------- §5.1
def test_hard_soft_table_and_saturation() -> None:
    c = build_cell()
    # wrong consensus has off-diagonal entailment 0.3-0.36 < 0.5: every claim its own cluster
    # (saturated at ln 4); make one of the six wrong ones fully coherent instead
    recs = []
    for r in c.nli:
        if r.qid == "q05":
            r = r.model_copy(update={"entailment": [[1.0] * 4 for _ in range(4)]})
        recs.append(r)
    c.nli = recs
    t = T.hard_soft_table(c).set_index(["signal", "quantity"])
    assert t.loc[("hard_se", "saturated_share"), "value"] == pytest.approx(5 / 30)
    # hard clustering at threshold 0.5 sees two values: one cluster (0.7+ pairs) or singletons
    # (0.3+ pairs); RSE keeps every level
    assert t.loc[("hard_se", "n_distinct"), "value"] == 2
    assert t.loc[("rse", "n_distinct"), "value"] > 2
    ok = np.array([not _s1_wrong(i) for i in range(N_S1)])
    hard = np.where(ok | (np.arange(N_S1) == 5), 0.0, -math.log(4))
    assert t.loc[("hard_se", "auroc"), "value"] == pytest.approx(roc_auc_score(ok, hard))
    rse = np.array([(0.3 if _s1_wrong(i) else 0.7) + 0.01 * (i % 7) for i in range(N_S1)])
    rse[5] = 1.0
    assert t.loc[("rse", "auroc"), "value"] == pytest.approx(roc_auc_score(ok, rse))


# --------------------------------------------------------------------------- Table 8
def test_specialty_breakdown_whole_layer_matches_repeated_splits(cell: FakeCell) -> None:
    alpha, n_splits = 0.3, 6
    t8 = T.specialty_breakdown(cell, alpha=alpha, n_splits=n_splits, seed=7, min_unanimous=9)
    counts = pd.Series([_specialty(i) for i in range(N_S1)]).value_counts()
    shown = sorted((k for k, v in counts.items() if v >= 9), key=lambda k: (-counts[k], k))
    assert list(t8["specialty"][: len(shown)]) == shown
    assert t8.attrs["omitted"] == sorted(k for k, v in counts.items() if v < 9)
    whole = t8[t8["specialty"] == "(whole layer)"].iloc[0]
    assert whole["n_unanimous"] == N_S1 and whole["unanimous_error"] == pytest.approx(6 / 30)
    df = T.certification_inputs([cell])
    rs = C.repeated_splits(df["score"].to_numpy(float), df["error"].to_numpy(bool), df["stratum"].to_numpy(str),
                           alphas=[alpha], n_splits=n_splits, seed=7)
    s = C.summarize(rs)
    s1 = s[s["stratum"] == "S1"].iloc[0]
    assert whole["certified_coverage"] == pytest.approx(s1["coverage_mean"])
    if not math.isnan(s1["risk_mean"]):
        assert whole["realized_risk"] == pytest.approx(s1["risk_mean"])
    # per-specialty coverages average (weighted by presence) back to the layer's in each split:
    # at least check they are proportions
    assert t8["certified_coverage"].between(0, 1).all()


# --------------------------------------------------------------------------- Appendix J
def test_cost_table_medians_and_missing(cell: FakeCell) -> None:
    t = T.cost_table([cell]).set_index("quantity")
    sub_wall = [10.0 + i for i in range(N_S1) if i != 3] + [50.0] * N_S2
    assert t.loc["substrate_wall_s", "value"] == pytest.approx(np.median(sub_wall))
    assert t.loc["substrate_wall_s", "n_missing"] == 1
    assert t.loc["probe_wall_s_median", "value"] == pytest.approx(np.median([20.0 + i for i in range(N_S1)]))
    assert t.loc["probe_completion_tokens_median", "value"] == pytest.approx(np.median([400 + i for i in range(N_S1)]))
    both = [i for i in range(N_S1) if i != 3]
    pw, sw = sum(20.0 + i for i in both), sum(10.0 + i for i in both)
    assert t.loc["probe_share_wall", "value"] == pytest.approx(pw / (pw + sw))
    assert t.loc["probe_share_wall", "n_missing"] == 1


# --------------------------------------------------------------------------- Appendix K
def test_case_details(cell: FakeCell) -> None:
    d = T.case_details(cell)
    cases = d["cases"].set_index("case")
    assert cases.loc["collapsed", "kappa"] == pytest.approx(0.25) and not cases.loc["collapsed", "correct"]
    assert cases.loc["kept", "kappa"] == 1.0 and cases.loc["kept", "correct"]
    assert bool(cases.loc["collapsed", "reanswer_plurality_is_gold"])  # B, B, B, A with gold B
    assert len(d["panel"]) == 8 and len(d["probe"]) == 8
    assert set(d["queries"]["kind"]) == {"counter-query", "document"}
    assert d["options"].groupby("case")["gold"].sum().tolist() == [1, 1]


# --------------------------------------------------------------------------- Appendix C
def test_explain_claims_branches() -> None:
    r = ("Intro sentence. The stem mentions fever. Option A fits poorly. Option B is plausible.\n"
         "Option C is wrong. Therefore the answer is B. The best choice is B. <answer>B</answer>")
    ex = T.explain_claims(r)
    assert list(ex["sentence"]) == ["Intro sentence.", "The stem mentions fever.", "Option A fits poorly.",
                                    "Option B is plausible.", "Option C is wrong.", "Therefore the answer is B.",
                                    "The best choice is B."]
    assert list(ex["in_tail"]) == [False, False, True, True, True, True, True]
    assert [s for s, k in zip(ex["sentence"], ex["kept"]) if k] == extract_claims(r)
    assert list(ex["kept"]) == [False] * 4 + [True] * 3
    assert ex.loc[6, "cues"] == "choice, best"
    assert _case_of(r) == "more than three cued: last three"
    no_cue = "First point. Second point. Final remark."
    ex2 = T.explain_claims(no_cue)
    assert list(ex2["kept"]) == [False, False, True] and _case_of(no_cue) == "no cue: last sentence"
    assert T.explain_claims("").empty and _case_of("  ") == "empty rationale"


def test_claim_rule_summary_and_examples(cell: FakeCell) -> None:
    s = T.claim_rule_summary(cell).set_index("quantity")
    assert s.loc["rationales", "value"] == (N_S1 + N_S2) * 4
    # default rationales end in "Therefore, the answer is A." -> one cued claim each
    assert s.loc["share: one to three cued", "value"] == 1.0
    assert s.loc["share with 1 claims", "value"] == 1.0
    # the fake NLI claims ("claim j") are not what the rule returns
    assert s.loc["NLI cache claims reproduced by extract_claims", "value"] == 0.0
    ex = T.claim_examples(cell)
    assert list(ex["case"]) == ["one to three cued"] and ex["qid"].iloc[0] == "q00"


# --------------------------------------------------------------------------- Table 7
def test_ablation_table_structure(cell: FakeCell) -> None:
    from probeguard_core.features import feature_table, is_correct
    from probeguard_core.scoring import process_score

    t = T.ablation_table(cell, n_folds=3, seed=3)
    assert t["variant"].iloc[0] == "full" and t["variant"].iloc[-1] == "gbt"
    assert {"without rationale", "without agreement"} <= set(t["variant"])
    X = feature_table(cell.logs, nli=cell.nli)
    y = np.array([is_correct(g) for g in cell.logs])
    p = process_score(X, y, n_splits=3, seed=3)
    assert t.loc[t["variant"] == "full", "value"].iloc[0] == pytest.approx(roc_auc_score(y, p))
    assert (t.loc[t["variant"] == "full", "n_features"] == X.shape[1]).all()


# --------------------------------------------------------------------------- what-if
def test_whatif_coverage_small() -> None:
    w = T.whatif_coverage([0.05], [40, 80], alpha=0.2, n_population=60, n_draws=4, seed=5)
    assert list(w["n_cal"]) == [40, 80]
    assert w["coverage_mean"].between(0, 1).all() and w["certified_share"].between(0, 1).all()
    assert (w["n_population"] == 60).all() and (w["base_error"] <= 1).all()
    with pytest.raises(ValueError, match="cal_sizes"):
        T.whatif_coverage([0.05], [0], n_population=10, n_draws=2)


# --------------------------------------------------------------------------- display helpers
def _beside_frame() -> pd.DataFrame:
    from probeguard_core.paper import beside_paper

    ours = pd.DataFrame({
        "backbone": BACKBONE,
        "dataset": ["medqa", "medqa", "medqa", "mmlu_pro_med"],
        "stratum": "S1",
        "quantity": ["unanimous_share", "n_unanimous", "auroc", "auroc"],
        "signal": ["", "", "rse", "rse"],
        "value": [0.6123, 17.0, 0.6004, np.nan],
    })
    return beside_paper(ours, on=["backbone", "dataset", "quantity", "signal"], source="§4.3")


def test_wide_beside_has_ours_paper_delta_subcolumns_formatted_by_unit() -> None:
    from probeguard_core.paper import reported_value

    b = _beside_frame()
    sty = T.wide_beside(b, index=["quantity", "signal"], columns=["dataset"])
    wide = sty.data
    assert wide.columns.nlevels == 2
    assert list(wide.columns) == [("MedQA", "ours"), ("MedQA", "paper"), ("MedQA", "Δ"),
                                  ("MMLU-Pro med", "ours"), ("MMLU-Pro med", "paper"), ("MMLU-Pro med", "Δ")]
    share = wide.loc[("unanimous share", "")]
    p_share = reported_value(source="§4.3", quantity="unanimous_share", backbone=BACKBONE, dataset="medqa")
    assert share[("MedQA", "ours")] == "61.2%"
    assert share[("MedQA", "paper")] == f"{100 * p_share:.1f}%"
    assert share[("MedQA", "Δ")] == f"{100 * (0.6123 - p_share):+.1f} pp"
    assert wide.loc[("n unanimous", ""), ("MedQA", "ours")] == "17"  # a count, not "17.000"
    auc = wide.loc[("AUROC", "RSE")]
    assert auc[("MedQA", "ours")] == "0.600"
    assert auc[("MMLU-Pro med", "ours")] == "–" and auc[("MMLU-Pro med", "Δ")] == "–"
    assert wide.loc[("n unanimous", ""), ("MMLU-Pro med", "ours")] == "–"  # no such row: a dash
    html = sty.to_html()
    assert 'class="probeguard-table probeguard-beside"' in html
    for cls in ("pg-ours", "pg-paper", "pg-diff"):
        assert cls in html
    assert T.wide_beside(b, index=["quantity", "signal"], columns=["dataset"]).to_html() == html  # reproducible ids
    with pytest.raises(ValueError, match="share their"):
        T.wide_beside(b, index=["signal"], columns=["dataset"])
    with pytest.raises(ValueError, match="not a column"):
        T.wide_beside(b, index=["nope"], columns=["dataset"])
    # the numbers themselves are untouched
    assert b["value"].iloc[0] == 0.6123


def test_departure_sizes_one_definition() -> None:
    """Issue 23 pt 6: Δ is sized by paper.departure (absolute on a 0-1 scale, relative otherwise)
    with the thresholds of paper.DEPARTURE_SIZES; the edges fall where the table says."""
    from probeguard_core.paper import DEPARTURE_SIZES, departure, departure_size

    small, medium = DEPARTURE_SIZES["absolute"]
    assert departure_size(0.003, 0.7, "auroc") == "small"
    assert departure_size(-small, 0.7, "auroc") == "medium"  # at the bound: the next size
    assert departure_size(0.986, 0.01, "fraction") == "large"  # +98.6 pp
    assert departure_size(medium - 1e-6, 0.5, "fraction") == "medium"
    rs, rm = DEPARTURE_SIZES["relative"]
    assert departure(30.0, 100.0, "count") == pytest.approx(0.30)
    assert departure_size(100 * rs / 2, 100.0, "count") == "small"
    assert departure_size(100 * rm, 100.0, "seconds") == "large"
    assert departure_size(5.0, 0.0, "count") == "large"  # paper 0: the absolute difference
    assert departure_size(float("nan"), 0.5, "auroc") == ""


def test_beside_tables_class_each_delta_by_its_size() -> None:
    """The Δ cells of wide_beside / long_beside carry pg-diff-small / -medium / -large, matching
    departure_size of their row (issue 23 pt 6), and the CSS styles each size."""
    from probeguard_core.paper import departure_size

    b = _beside_frame()
    units = {"unanimous_share": "fraction", "n_unanimous": "count", "auroc": "auroc"}
    want = [departure_size(d, p, units[q]) for d, p, q in zip(b["diff"], b["paper"], b["quantity"])]
    assert {w for w in want if w}, "the fixture has no difference to size"
    html = T.long_beside(b, keys=["dataset", "quantity", "signal"]).to_html()
    cells = re.findall(r'<td [^>]*class="([^"]*\bpg-diff\b[^"]*)"', html)  # one Δ cell per row, in order
    got = [next((c.removeprefix("pg-diff-") for c in cls.split() if c.startswith("pg-diff-")), "") for cls in cells]
    assert got == want
    wide = T.wide_beside(b, index=["quantity", "signal"], columns=["dataset"]).to_html()
    for size in {w for w in want if w}:
        assert f"pg-diff-{size}" in wide
    css = (Path(__file__).resolve().parents[1] / "book/_static/custom.css").read_text(encoding="utf-8")
    for size in ("small", "medium", "large"):
        assert f"td.pg-diff.pg-diff-{size}" in css


def test_wide_beside_bolds_as_the_paper_bolds() -> None:
    """Issue 23 pt 6: ours is bold only where it is the best of its column among ours (AUROC the
    highest, AURC the lowest, compared as shown; ties all bold), never a count or a fraction,
    and a long table (whose column mixes keys) bolds nothing."""
    rows = [("auroc", "rse", 0.6004), ("auroc", "keep_rate", 0.7001), ("auroc", "p_true", 0.6998),
            ("aurc", "rse", 0.21), ("aurc", "keep_rate", 0.12), ("aurc", "p_true", 0.30),
            ("unanimous_share", "rse", 0.9), ("unanimous_share", "keep_rate", 0.1)]
    df = pd.DataFrame([{"dataset": d, "quantity": q, "signal": s, "value": v + (0.01 if d == "mmlu_pro_med" and s == "rse" else 0),
                        "paper": np.nan, "diff": np.nan} for d in ("medqa", "mmlu_pro_med") for q, s, v in rows])
    html = T.wide_beside(df, index=["quantity", "signal"], columns=["dataset"]).to_html()
    bold = re.findall(r'<td [^>]*class="[^"]*\bpg-best\b[^"]*"[^>]*>([^<]*)</td>', html)
    # MedQA: 0.700 and 0.700 tie as shown (AUROC), 0.120 (AURC); MMLU-Pro med the same (rse's 0.610 < 0.700)
    assert sorted(bold) == sorted(["0.700", "0.700", "0.120"] * 2)
    assert html.count("pg-ours") == 2 * len(rows)
    long_html = T.long_beside(df, keys=["dataset", "quantity", "signal"]).to_html()
    assert "pg-best" not in long_html
    css = (Path(__file__).resolve().parents[1] / "book/_static/custom.css").read_text(encoding="utf-8")
    assert re.search(r"td\.pg-ours\.pg-best\s*\{[^}]*font-weight", css)
    assert not re.search(r"td\.pg-ours\s*\{[^}]*font-weight", css), "every ours cell is bold again"


def test_display_helpers_accept_an_empty_table() -> None:
    """A release without the inputs gives an empty table: it still renders (header only)."""
    e = pd.DataFrame({c: pd.Series(dtype=object) for c in ("arm", "quantity")}
                     | {c: pd.Series(dtype=float) for c in ("value", "paper", "diff", "n")})
    assert "probeguard-beside" in T.wide_beside(e, index=["arm"], columns=["quantity"]).to_html()
    assert T.long_beside(e, keys=["arm", "quantity"], extra=["n"]).data.empty
    assert T.styled(e).data.empty


def test_wide_beside_keeps_rows_with_an_empty_key() -> None:
    """The pooled stream (stratum None) is a row of its own ('all'), never dropped by the pivot."""
    long = pd.DataFrame({"arm": "global_ltt", "stratum": [None, "S1"], "alpha": 0.15, "quantity": "certified_coverage",
                         "value": [0.5, 0.25], "paper": np.nan, "diff": np.nan})
    wide = T.wide_beside(long, index=["arm", "stratum"], columns=["alpha"]).data
    assert list(wide.index) == [("global LTT", "all"), ("global LTT", "S1")]
    assert list(wide[("0.15", "ours")]) == ["50.0%", "25.0%"]


def test_long_beside_and_styled_format_for_reading() -> None:
    b = _beside_frame().assign(k=[3, 4, 5, 6], ci_low=[0.1, 0.2, 0.3, np.nan])
    t = T.long_beside(b, keys=["dataset", "quantity"], extra=["k", "ci_low"], extra_units={"ci_low": "fraction"}).data
    assert list(t.columns) == ["dataset", "quantity", "ours", "paper", "Δ", "k", "ci_low"]
    assert t["k"].tolist() == ["3", "4", "5", "6"] and t["ci_low"].tolist() == ["10.0%", "20.0%", "30.0%", "–"]
    with pytest.raises(ValueError, match="not a column"):
        T.long_beside(b, keys=["nope"])
    df = pd.DataFrame({"dataset": ["medqa", "x_bench"], "n": [17.0, 3.0], "auc": [1.0, 0.61234], "ok": [True, False],
                       "share": [0.5, np.nan]})
    s = T.styled(df, units={"share": "fraction"}, index=False)
    assert s.data["dataset"].tolist() == ["MedQA", "x_bench"]
    assert s.data["n"].tolist() == ["17", "3"] and s.data["auc"].tolist() == ["1.000", "0.612"]
    assert s.data["ok"].tolist() == ["yes", "no"] and s.data["share"].tolist() == ["50.0%", "–"]
    assert 'class="probeguard-table"' in s.to_html()
    rows = T.styled(pd.DataFrame({"quantity": ["rationales", "share"], "value": [240.0, 0.25]}),
                     row_units=["count", "fraction"], labels=False)
    assert rows.data["value"].tolist() == ["240", "25.0%"]
    with pytest.raises(ValueError, match="row_units"):
        T.styled(pd.DataFrame({"value": [1.0]}), row_units=["count", "count"])


def test_display_label() -> None:
    from probeguard_core.paper import display_label

    assert display_label("backbone", BACKBONE) == "Qwen3-8B"
    assert display_label("backbone", "org/own-model") == "org/own-model"
    assert display_label("dataset", "mmlu_pro_med") == "MMLU-Pro med"
    assert display_label("signal", "rse_keep") == "z(κ) + z(RSE)" and display_label("signal", "answer_entropy") == "answer entropy"
    assert display_label("arm", "stratified_ltt") == "stratified LTT"
    assert display_label("quantity", "auroc") == "AUROC" and display_label("quantity", "realized_risk") == "realized risk"
    assert display_label("alpha", 0.1) == "0.10"
    assert display_label("stratum", None) == "all" and display_label("dataset", None) == "–"


# --------------------------------------------------------------------------- the tables package
def test_tables_names_map_every_public_name_to_its_module() -> None:
    import importlib

    from probeguard_core import tables

    for mod in set(tables.NAMES.values()):
        m = importlib.import_module(f"probeguard_core.tables.{mod}")
        mine = {n for n, v in tables.NAMES.items() if v == mod}
        assert mine == set(m.__all__), mod
        for n in mine:
            assert getattr(tables, n) is getattr(m, n)
    with pytest.raises(AttributeError):
        tables.no_such_builder  # noqa: B018


def test_the_release_is_release_like_and_its_cells_cell_like() -> None:
    from pathlib import Path

    from probeguard_core.release import load_release
    from probeguard_core.tables.protocols import CellLike, ReleaseLike

    rel = load_release(Path(__file__).resolve().parents[1] / "data" / "simulated-v1", verify=False)
    assert isinstance(rel, ReleaseLike) and isinstance(rel.main_cells()[0], CellLike)


def test_certify_owns_the_even_split_and_the_bonferroni_level() -> None:
    masks = C.even_splits(11, 4, seed=42)
    for j, m in enumerate(masks):
        perm = np.random.default_rng(42 + j).permutation(11)
        assert set(np.flatnonzero(m)) == set(perm[:5])
    assert C.bonferroni_level(0.05, 20, 2) == 0.05 / 40
    s = np.random.default_rng(1).random((3, 50))
    e = np.random.default_rng(2).random((3, 50)) < 0.1
    got = C.resampled_thresholds(s, e, 0.2)
    want = [C.ltt_threshold(s[d], e[d], 0.2) for d in range(3)]
    assert [None if np.isnan(g) else g for g in got] == want
    with pytest.raises(ValueError, match="2-D"):
        C.resampled_thresholds(s[0], e[0], 0.2)


def test_compare_tables_finds_every_difference(tmp_path) -> None:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("compare_tables", Path(__file__).resolve().parents[1] / "tools"
                                                  / "compare_tables.py")
    ct = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ct)
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a / "nb", b / "nb"):
        d.mkdir(parents=True)
        (d / "t.csv").write_text("x\n1\n")
        (d / "results.json").write_text("{}\n")
    assert ct.compare(a, b) == [] and ct.main([str(a), str(b)]) == 0
    (b / "nb" / "t.csv").write_text("x\n2\n")
    (a / "nb" / "only.csv").write_text("y\n")
    assert ct.compare(a, b) == [f"only in {a}: nb/only.csv", "differs: nb/t.csv"]
    assert ct.main([str(a), str(b)]) == 1


def test_page_builders_own_what_a_release_lacks(tmp_path) -> None:
    """On a release with logs only (no probe, NLI, self-report, augment cell or second backbone),
    every page builder returns its tables with their schema and says why in a note: the
    notebooks never branch on what a release lacks."""
    from foreign_release import pubmedqa_logs_only

    from probeguard_core import tables
    from probeguard_core.release import load_release

    rel = load_release(pubmedqa_logs_only(tmp_path), verify=False)
    f1 = tables.figure1(rel)
    assert f1.cases.empty and list(f1.cases.columns) == list(tables.FIGURE1_COLUMNS) and f1.notes
    f4 = tables.figure4(rel, n_splits=2)
    assert f4.why and any("certification score" in n for n in f4.notes)
    assert set(f4.tables) == {"certification_methods", "alpha_sweep", "other_backbones", "pooled"}
    assert f4.tables["other_backbones"].empty and "coverage_mean" in f4.tables["other_backbones"].columns
    t6 = tables.table6_page(rel, n_boot=10)
    assert t6.tables["table6"].empty and "ci_low" in t6.tables["table6"].columns and t6.notes
    t8 = tables.table8(rel, n_splits=2)
    assert t8.t8.empty and list(t8.t8.columns) == list(tables.TABLE8_COLUMNS) and t8.notes
    hs = tables.hard_soft_page(rel)
    assert hs.tables["hard_vs_soft"].empty and hs.notes
    cell, k, why = tables.appendix_k(rel)
    assert why and all(k[n].empty for n in ("cases", "options", "panel", "probe", "queries"))
    audit, notes, n_layer, _, _ = tables.theorem1_audit(rel, [0.15], n_draws=10)
    assert set(audit.source) == {"synthetic"} and notes and n_layer == 0


# --------------------------------------------------------------------------- figures: numbers, captions, alt text
def test_every_book_figure_has_a_number_caption_and_alt_text() -> None:
    """Each figure a notebook writes (a ``.png`` of notebooks/registry.yml) has its number,
    caption and alt text in ``tables.FIGURES``."""
    import re

    import yaml

    from probeguard_core import tables

    reg = yaml.safe_load((Path(__file__).resolve().parent.parent / "notebooks" / "registry.yml").read_text())
    entries = reg["notebooks"] if isinstance(reg, dict) and "notebooks" in reg else reg
    pngs = {o.removesuffix(".png") for e in entries for o in e.get("outputs", []) if o.endswith(".png")}
    assert pngs <= set(tables.FIGURES), pngs - set(tables.FIGURES)
    numbers = [t.number for t in tables.FIGURES.values()]
    assert len(set(numbers)) == len(numbers), "two figures share a number"
    for name, t in tables.FIGURES.items():
        assert re.fullmatch(r"Figure (\d|[A-Z]\.\d)", t.number), (name, t.number)
        assert len(t.caption) > 40 and len(t.alt) > 40, name
        assert not re.search(r"\.(png|svg)\b|_", t.alt), f"{name}: alt text reads like a file or code name"


def test_captioned_writes_the_files_and_returns_one_numbered_figure(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from probeguard_core import tables
    from probeguard_core.book.outputs import Outputs

    out = Outputs(tmp_path)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    html = tables.captioned(out, "figure2", fig, "On this release: 1 < 2.").data
    assert (tmp_path / "figure2.png").is_file() and (tmp_path / "figure2.svg").is_file()
    assert html.count("<figure") == 1 and html.count("<figcaption>") == 1
    assert "<strong>Figure 2.</strong>" in html and "Fig." not in html
    assert 'src="data:image/png;base64,' in html and "1 &lt; 2" in html
    assert f'alt="{tables.FIGURES["figure2"].alt}"' in html
    # sharp on a HiDPI screen: the PNG has twice the pixels of the CSS width the page gives it
    import re

    from probeguard_core.book.outputs import png_size

    png_w = png_size((tmp_path / "figure2.png").read_bytes())[0]
    css_w = int(re.search(r'<img [^>]*width="(\d+)"', html).group(1))
    assert png_w >= 2 * css_w - 1 and css_w > 300, (png_w, css_w)
    assert not plt.fignum_exists(fig.number), "captioned leaves the figure open (it would also show raw)"
    with pytest.raises(KeyError, match="no number"):
        tables.captioned(out, "not_a_figure", plt.figure())
