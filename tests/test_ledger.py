"""The claims ledger (issue 22): registry, verdict rules, evaluation on small releases, the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from helpers import paper_text

from probeguard_core import metrics as M
from probeguard_core.cli import main
from probeguard_core.ledger import EQUIVALENCE_MARGIN, load_claims, verdict
from probeguard_core.ledger.evaluate import COLUMNS, EVALUATORS, evaluate_release
from probeguard_core.ledger.registry import CLAIMS_PATH, KINDS
from probeguard_core.ledger.report import (
    claim_verdicts,
    page_lines,
    page_verdicts_html,
    scorecard,
    scorecard_sentence,
    verdict_counts,
)
from probeguard_core.release import load_release

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "data" / "real-smollm2-135m-mmlu-med"




@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One simulated cell (MedQA / Qwen3-8B) at 20 % of its size (about 250 questions)."""
    from probeguard_core.simulate.writer import simulate_release

    out = tmp_path_factory.mktemp("ledger") / "tiny"
    simulate_release(out, cells=["medqa/qwen3-8b"], scale=0.2, progress=False, jobs=1)
    return out


@pytest.fixture(scope="module")
def tiny_ledger(tiny: Path):
    return evaluate_release(load_release(tiny))


# --------------------------------------------------------------------------- the registry
def test_every_quote_is_the_papers_sentence() -> None:
    text = " ".join(paper_text().replace("\u00a0", " ").split())
    for c in load_claims():
        assert c.quote in text, c.id


def test_registry_covers_the_issue_and_names_real_pages() -> None:
    claims = load_claims()
    ids = {c.id for c in claims}
    assert {"terminal_agreement_at_chance", "process_score_best_auroc", "process_score_lowest_aurc",
            "process_above_terminal_every_backbone", "error_rises_with_concluding_round",
            "sequence_logprob_inverted", "wrong_flips_more_than_correct", "keep_rate_discriminates",
            "keep_and_rse_beat_either", "counter_evidence_beats_content_free_arms", "naive_quantile_misses_target",
            "global_ltt_certifies_nothing", "stratified_ltt_certifies_layer", "pooled_domains_certify_nothing",
            "no_split_violates", "rse_above_hard_se", "dropping_rationale_lowers_auroc"} <= ids
    pages = {e["name"] for e in yaml.safe_load((REPO / "notebooks" / "registry.yml").read_text())}
    assert {c.page for c in claims} <= pages
    assert set(KINDS) == set(EVALUATORS)
    # one margin for every "at chance" claim: the registry cannot set its own
    assert all("margin" not in yaml.safe_dump(c.params) for c in claims)


@pytest.mark.parametrize("edit, field", [
    (lambda c: c.pop("quote"), "field quote is missing"),
    (lambda c: c.update(kind="mean"), "field kind"),
    (lambda c: c.update(mechanism="magic"), "field mechanism"),
    (lambda c: c.update(rule={"test": "bigger", "threshold": 0}), "field rule.test"),
    (lambda c: c.update(rule={"test": "greater", "threshold": "half"}), "field rule.threshold"),
    (lambda c: c.update(cells={"backbones": "some", "datasets": "all"}), "field cells.backbones"),
])
def test_bad_registry_is_named(tmp_path: Path, edit, field: str) -> None:
    doc = yaml.safe_load(CLAIMS_PATH.read_text(encoding="utf-8"))
    edit(doc["claims"][2])
    p = tmp_path / "claims.yaml"
    p.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    with pytest.raises(ValueError) as exc:
        load_claims(p)
    msg = str(exc.value)
    assert str(p) in msg and "claim 3" in msg and field in msg


# --------------------------------------------------------------------------- the verdict rule
@pytest.mark.parametrize("args, want", [
    ((0.7, 0.6, 0.8, "greater", 0.5), "holds"), ((0.4, 0.3, 0.5, "greater", 0.5), "fails"),
    ((0.55, 0.45, 0.65, "greater", 0.5), "undetermined"), ((0.3, 0.2, 0.4, "less", 0.5), "holds"),
    ((0.7, 0.5, 0.9, "less", 0.5), "fails"), ((0.0, 0.0, 0.0, "at_most", 0.0), "holds"),
    ((0.6, 0.5, 0.7, "at_most", 0.0), "fails"), ((0.1, 0.0, 0.3, "at_most", 0.0), "undetermined"),
    ((0.51, 0.46, 0.54, "equivalent", 0.5), "holds"), ((0.61, 0.58, 0.63, "equivalent", 0.5), "fails"),
    ((0.54, 0.52, 0.57, "equivalent", 0.5), "undetermined"), ((float("nan"), 0.1, 0.2, "greater", 0.0), "untestable"),
])
def test_verdict_hand_worked(args, want: str) -> None:
    assert verdict(*args) == want


@settings(max_examples=200, deadline=None)
@given(st.floats(-1, 1), st.floats(0, 1), st.floats(-1, 1), st.sampled_from(["greater", "less", "at_most", "equivalent"]))
def test_verdict_follows_the_interval(lo: float, width: float, t: float, test: str) -> None:
    hi = lo + width
    v = verdict((lo + hi) / 2, lo, hi, test, t)
    if test == "greater":
        assert (v == "holds") == (lo > t) and (v == "fails") == (hi <= t)
    elif test == "less":
        assert (v == "holds") == (hi < t) and (v == "fails") == (lo >= t)
    elif test == "at_most":
        assert (v == "holds") == (hi <= t) and (v == "fails") == (lo > t)
    else:
        m = EQUIVALENCE_MARGIN
        assert (v == "holds") == (t - m <= lo and hi <= t + m)
        assert (v == "fails") == (lo > t + m or hi < t - m)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 6))
def test_vectorized_metrics_equal_the_books(seed: int, levels: int) -> None:
    rng = np.random.default_rng(seed)
    s = rng.integers(0, levels, (8, 25)).astype(float)
    y = rng.random((8, 25)) < 0.6
    for i in range(8):
        a = M.auroc(s[i], y[i])
        assert (np.isnan(a) and np.isnan(M.auroc_rows(s, y)[i])) or abs(M.auroc_rows(s, y)[i] - a) < 1e-12
        assert abs(M.aurc_rows(s, y)[i] - M.aurc(s[i], y[i])) < 1e-12


# --------------------------------------------------------------------------- a small simulated release
def test_every_verdict_follows_from_value_interval_rule(tiny_ledger) -> None:
    t = tiny_ledger
    assert list(t.columns) == list(COLUMNS)
    for r in t.itertuples(index=False):
        assert r.verdict == verdict(r.value, r.ci_low, r.ci_high, r.test, r.threshold), r.claim
        if r.verdict == "untestable":
            assert r.reason
        else:
            assert r.ci_low <= r.ci_high and r.interval


def test_small_release_holds_fails_and_is_undetermined(tiny: Path, tiny_ledger) -> None:
    t = tiny_ledger.set_index(["claim", "dataset"])
    assert {"holds", "fails", "undetermined", "untestable"} <= set(t["verdict"])
    # the simulator's process score separates far above terminal agreement (about +0.3 AUROC)
    assert t.loc[("process_above_terminal_every_backbone", "medqa"), "verdict"] == "holds"
    # its sequence log-prob is informative (AUROC about 0.7), the paper's is inverted
    assert t.loc[("sequence_logprob_inverted", "medqa"), "verdict"] == "fails"
    # about 40 unanimous wrong answers cannot decide the flip asymmetry
    assert t.loc[("wrong_flips_more_than_correct", "medqa"), "verdict"] == "undetermined"
    # one benchmark: pooling domains cannot be tested, and the row says why
    pooled = t.loc[("pooled_domains_certify_nothing", "pooled")]
    assert pooled["verdict"] == "untestable" and "mmlu_pro_med" in pooled["reason"]
    # the ledger's AUROC is the page's (Table 2 on the same cell)
    from probeguard_core.tables.scores import cell_scores

    sc = cell_scores(load_release(tiny).cell("medqa"))
    assert t.loc[("terminal_agreement_at_chance", "medqa"), "value"] == pytest.approx(
        M.auroc(sc["terminal_agreement"].to_numpy(), sc["correct"].to_numpy()))


def test_scorecard_and_page_lines(tiny_ledger) -> None:
    card = scorecard(tiny_ledger)
    v = claim_verdicts(tiny_ledger)
    assert card["claims"] == len(load_claims()) == len(v)
    assert card["holds"] + card["fails"] + card["undetermined"] == card["testable"]
    assert scorecard_sentence(card).startswith(f"On this release, {card['holds']} of {card['testable']} testable")
    lines = page_lines(tiny_ledger, "table5_fig5_all_signals")
    assert [v for v, _ in lines] == ["fails"]
    assert lines[0][1].startswith("On this release the paper's claim does not hold: sequence log-probability AUROC is 0.")
    assert re.search(r"0\.\d{3}, 95 % interval 0\.\d{3} to 0\.\d{3} \(Qwen3-8B / MedQA\)\.$", lines[0][1])
    block = page_verdicts_html(tiny_ledger, "table5_fig5_all_signals", simulated=True)
    assert 'data-claim="sequence_logprob_inverted"' in block
    assert 'href="departures.html#mechanism-confidence-by-state"' in block
    assert "departures.html" not in page_verdicts_html(tiny_ledger, "table5_fig5_all_signals", simulated=False)
    assert page_verdicts_html(tiny_ledger, "departures", simulated=True) == ""
    assert "<summary><strong>The paper's claims this page tests</strong>: 1 does not hold (" in block
    assert block.startswith('<details class="probeguard-verdicts" open>')  # one line: shown, not folded
    assert verdict_counts(["holds", "holds", "fails", "undetermined"]) == \
        "2 hold, 1 does not hold, 1 cannot be decided at this size"


# --------------------------------------------------------------------------- the CLI
def test_cli_on_a_partial_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real release: one backbone, one benchmark, no probe records -> untestable rows with reasons;
    a second run writes the same bytes."""
    out = tmp_path / "c"
    assert main(["claims", str(REAL), "--out", str(out)]) == 0
    doc = json.loads((out / "claims.json").read_text(encoding="utf-8"))
    rows = {r["claim"]: r for r in doc["rows"]}
    assert rows["wrong_flips_more_than_correct"]["verdict"] == "untestable"
    assert "probe" in rows["wrong_flips_more_than_correct"]["reason"]
    assert doc["scorecard"]["untestable"] >= 1 and doc["scorecard"]["claims"] == len(load_claims())
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["claims", str(REAL), "--out", str(tmp_path / "d")]) == 0
    assert first == {p.name: p.read_bytes() for p in (tmp_path / "d").iterdir()}
    assert "testable claims" in capsys.readouterr().out


@pytest.mark.parametrize("make", ["no_folder", "broken_manifest", "inside"])
def test_cli_bad_release_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str) -> None:
    rel = tmp_path / "rel"
    out = tmp_path / "out"
    if make == "broken_manifest":
        rel.mkdir()
        (rel / "manifest.json").write_text("{ not json", encoding="utf-8")
    elif make == "inside":
        rel, out = REAL, REAL / "ledger"
    assert main(["claims", str(rel), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("probeguard claims: error:") and "Traceback" not in err[0]
    assert not out.exists()


def test_certification_values_are_the_section_4_4_pages(tiny: Path, tiny_ledger) -> None:
    """The ledger's §4.4 numbers are the means the certification page shows (tables.figure4)."""
    from probeguard_core.tables.certification import figure4

    m = figure4(load_release(tiny), alphas=[0.05, 0.10, 0.15, 0.20], n_splits=50).tables["certification_methods"]
    t = tiny_ledger.set_index("claim")

    def page(arm: str, stratum: str, alpha: float, col: str) -> float:
        return float(m[(m.arm == arm) & (m.stratum == stratum) & (m.alpha == alpha)][col].iloc[0])

    assert t.at["naive_quantile_misses_target", "value"] == pytest.approx(page("naive_quantile", "all", 0.10, "risk_mean"))
    assert t.at["stratified_ltt_certifies_layer", "value"] == pytest.approx(
        page("stratified_ltt", "S1", 0.15, "coverage_mean"))
    # the largest coverage over α per split, averaged, is at least the largest of the per-α means
    assert t.at["global_ltt_certifies_nothing", "value"] >= max(
        page("global_ltt", "all", a, "coverage_mean") for a in (0.05, 0.10, 0.15, 0.20)) - 1e-12


# --------------------------------------------------------------------------- once per release content
@pytest.mark.parametrize("page", ["table5_fig5_all_signals", "unanimous_layer_fig3"])
def test_page_lines_are_the_ledgers_rows_computed_once(tiny: Path, page: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A page's verdict block (open_page's) is the ledger's rows for that page, whether computed
    now (cache off), stored (first call) or read back (second call: the cache entries exist)."""
    import pandas as pd

    from probeguard_core.book.page import verdicts_html
    from probeguard_core.ledger.evaluate import release_key
    from probeguard_core.ledger.report import page_verdicts

    rel = load_release(tiny)
    claims = [c for c in load_claims() if c.page == page]
    monkeypatch.setenv("PROBEGUARD_CACHE", "0")
    direct = evaluate_release(rel, claims)
    monkeypatch.setenv("PROBEGUARD_CACHE", "1")
    monkeypatch.setenv("PROBEGUARD_CACHE_DIR", str(tmp_path / "cache"))
    stored = page_verdicts(rel, page)
    entries = sorted((tmp_path / "cache" / "ledger-claim").glob("*.json"))
    assert len(entries) == len(claims)
    again = page_verdicts(rel, page)
    assert sorted((tmp_path / "cache" / "ledger-claim").glob("*.json")) == entries  # nothing rebuilt
    for t in (stored, again):
        pd.testing.assert_frame_equal(t, direct, check_exact=True)
        assert page_lines(t, page) == page_lines(direct, page)
    assert verdicts_html(rel, page) == page_verdicts_html(direct, page, simulated=True)
    # keyed by content: every artifact's sha256; a release loaded unverified is computed, never cached
    from probeguard_core.release import sha256_file

    key = release_key(rel)
    assert key is not None
    artifacts = {p.relative_to(tiny).as_posix(): sha256_file(p) for p in sorted(tiny.rglob("*.jsonl*"))}
    assert artifacts and artifacts.items() <= key["files"].items()
    assert release_key(load_release(tiny, verify=False)) is None


def test_every_fails_line_links_a_mechanism_on_the_departures_page(tiny: Path, tiny_ledger) -> None:
    """On a simulated release each ``fails`` line links ``departures.html#<anchor>``, and that anchor
    is an id of the departures page's mechanism list (:func:`tables.departures.caveats`); a real
    release's caveats carry no mechanism list and its lines link none."""
    from probeguard_core.tables.departures import MECHANISMS, caveats

    page_text = caveats(tiny)
    ids = set(re.findall(r'id="([^"]+)"', page_text))
    assert ids == {f"mechanism-{k}" for k in MECHANISMS}
    assert {c.mechanism for c in load_claims()} <= set(MECHANISMS)
    n_fails = 0
    for page in sorted(set(tiny_ledger["page"])):
        block = page_verdicts_html(tiny_ledger, page, simulated=True)
        for item in re.findall(r"<li [^>]*probeguard-verdict-fails[^>]*>.*?</li>", block):
            n_fails += 1
            hrefs = re.findall(r'href="departures\.html#([^"]+)"', item)
            assert len(hrefs) == 1 and hrefs[0] in ids, item
    assert n_fails == int((tiny_ledger["verdict"] == "fails").sum()) > 0
    assert 'id="mechanism-' not in caveats(REAL)


def test_line_wording_names_size_and_reason() -> None:
    """Undetermined lines say over how many questions (or split tests), untestable ones why."""
    import pandas as pd

    base = {"claim": "c", "section": "§4.2", "page": "p", "quote": "q", "backbone": "", "dataset": "",
            "detail": "", "quantity": "keep-rate AUROC", "n": 1234, "value": 0.6, "ci_low": 0.45, "ci_high": 0.7,
            "interval": "bootstrap over questions", "rule": "r", "test": "greater", "threshold": 0.5,
            "verdict": "undetermined", "reason": ""}
    t = pd.DataFrame([base, {**base, "verdict": "untestable", "reason": "the release has no probe records",
                             "value": float("nan")},
                      {**base, "verdict": "undetermined", "n": 50, "interval": "Clopper-Pearson exact 95 %"}])
    (_, a), (_, b), (_, c) = page_lines(t, "p")
    assert a.startswith("On this release the paper's claim cannot be decided at this size (1,234 questions): "
                        "keep-rate AUROC is 0.600, 95 % interval 0.450 to 0.700")
    assert b.startswith("On this release the paper's claim cannot be tested here: the release has no probe records")
    assert "(50 split tests)" in c
