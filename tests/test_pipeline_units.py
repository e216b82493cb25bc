"""Unit tests of the pipeline's parsers, prompts and helpers (no models)."""

from __future__ import annotations

import argparse
import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import entropy as scipy_entropy

from probeguard_core.logs import Candidate
from probeguard_core.pipeline.engines import Generation, top_entropy
from probeguard_core.pipeline.nli_run import entailment_label_id
from probeguard_core.pipeline.parsing import format_options, parse_answer, parse_confidence, parse_queries
from probeguard_core.pipeline.probe_run import donor_map
from probeguard_core.pipeline.runio import AppendOnlyJsonl, chunking_config, chunks, derive_seed
from probeguard_core.pipeline.self_report import p_true_from_top_logprobs
from probeguard_core.pipeline.substrate import answers_block
from probeguard_core.pipeline.templates import load_template, render, template_names

OPTS = {"A": "a", "B": "b", "C": "c", "D": "d"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("reasoning <answer>B</answer>", "B"),
        ("<answer> C </answer>", "C"),
        ("first <answer>A</answer> then <answer>D</answer>", "D"),  # last tag wins
        ("format <answer>X</answer> ... <answer>A</answer>", "A"),
        ("<answer>A</answer> later <answer>E</answer>", None),  # last tag not an option: never fall back
        ("<answer>A or B</answer>", None),
        ("<answer>a</answer>", None),  # lower case is not a key
        ("The answer is B.", None),  # no tag: never guess
        ("", None),
        ("<answer>B", None),
    ],
)
def test_parse_answer(text, expected):
    assert parse_answer(text, OPTS) == expected


@given(st.text())
def test_parse_answer_never_invents(text):
    got = parse_answer(text, OPTS)
    assert got is None or (got in OPTS and "<answer>" in text)


def test_parse_queries_order_dedupe_limit():
    text = "[Query 1] iron deficiency\n[Query 2]  b12 \n[Query 3] iron deficiency\n[Query 4]\n[Query 5] e\n[Query 6] f"
    assert parse_queries(text) == ["iron deficiency", "b12", "e", "f"]
    assert parse_queries(text, limit=2) == ["iron deficiency", "b12"]
    assert parse_queries("no queries here") == []
    with pytest.raises(ValueError):
        parse_queries(text, limit=0)


@pytest.mark.parametrize("text, expected", [
    ("<confidence>85</confidence>", 85.0), ("<confidence> 42.5% </confidence>", 42.5),
    ("<confidence>101</confidence>", None), ("<confidence>high</confidence>", None), ("85", None),
    ("<confidence>10</confidence> <confidence>90</confidence>", 90.0),
])
def test_parse_confidence(text, expected):
    assert parse_confidence(text, tag="confidence") == expected  # v1's tag
    v2 = text.replace("confidence>", "conf>")
    assert parse_confidence(v2) == expected  # v2 (the paper): <conf>N</conf>
    assert parse_confidence(v2, tag="confidence") is None  # the other version's tag is not read


def test_p_true_variants_and_fallback():
    top = [(" True", math.log(0.6)), ("true", math.log(0.1)), ("False", math.log(0.1)), ("Tr", math.log(0.1))]
    assert p_true_from_top_logprobs(top) == pytest.approx(0.7 / 0.8)
    assert p_true_from_top_logprobs([("False", -1.0)]) == 0.0
    assert p_true_from_top_logprobs([(" TRUE", -1.0)]) == 1.0
    assert p_true_from_top_logprobs([("Yes", -0.1), ("No", -2.0)]) is None  # stated fallback: null


def test_top_entropy_matches_scipy():
    lp = np.log(np.array([0.5, 0.2, 0.1]))
    assert top_entropy(lp) == pytest.approx(scipy_entropy(np.exp(lp)))
    assert top_entropy([0.0]) == 0.0
    with pytest.raises(ValueError):
        top_entropy([])


def test_generation_aggregates():
    g = Generation(text="x", n_tokens=3, token_logprobs=[-1.0, -0.5], token_entropies=[1.0, 2.0])
    assert g.logprob == -1.5 and g.mean_token_entropy == 1.5
    assert Generation(text="", n_tokens=0, token_logprobs=[], token_entropies=[]).mean_token_entropy is None
    assert Generation(text="", n_tokens=1).logprob is None
    assert Generation(text="", n_tokens=2, token_logprobs=[], token_entropies=[]).logprob is None


def test_templates_render_strictly():
    common = {"system_answer", "user_round1", "user_round_next", "system_query", "user_query", "user_probe_devil",
              "user_probe_instruction_only", "user_probe_neutral", "user_counter_query", "system_counter_query",
              "user_verbalized_confidence", "user_p_true"}
    assert common | {"system_verbalized_confidence", "system_p_true"} == set(template_names())
    assert common | {"system_self_report"} == set(template_names("v1"))
    key = "do not change your answer unless the evidence genuinely warrants it"
    for v in ("v1", "v2"):
        assert key in load_template("user_probe_devil", v).replace("\n", " ")
        assert key in load_template("user_probe_instruction_only", v).replace("\n", " ").lower()
        assert "devil" not in load_template("user_probe_neutral", v)
    nxt = load_template("user_round_next")
    assert "lower entropy" in nxt and "cannot accurately reflect" in nxt
    out = render("user_round1", question="Q {{x}}", options="A. a")
    assert "Q {{x}}" in out  # values are not re-scanned
    with pytest.raises(ValueError, match="missing"):
        render("user_round1", question="Q")
    with pytest.raises(ValueError, match="unexpected"):
        render("user_round1", question="Q", options="o", extra="e")
    with pytest.raises(ValueError, match="unknown prompt"):
        load_template("nope")


def test_answers_block_entropy_order():
    cands = [Candidate(answer="A", rationale=f"r{i}", logprob=None, n_tokens=1, mean_token_entropy=e) for i, e in enumerate([0.2, 0.9, None, 0.5])]
    text = answers_block(cands, by_entropy=True)
    order = [text.index(f"r{i}") for i in (2, 1, 3, 0)]  # missing first, then highest -> lowest
    assert order == sorted(order)
    assert "(Entropy 0.90)" in text and "(Entropy n/a)" in text
    plain = answers_block(cands, by_entropy=False)
    assert [plain.index(f"r{i}") for i in range(4)] == sorted(plain.index(f"r{i}") for i in range(4))


def test_format_options_sorted():
    assert format_options({"B": "y", "A": "x"}) == "A. x\nB. y"


def test_derive_seed_stable_and_distinct():
    assert derive_seed(42, "q1", "answer", 1) == derive_seed(42, "q1", "answer", 1)
    assert len({derive_seed(42, f"q{i}", "answer", 1) for i in range(200)}) == 200
    assert derive_seed(42, "q1") != derive_seed(43, "q1")
    assert 0 <= derive_seed(1, "x") < 2**31


def test_donor_map_is_a_derangement():
    qids = [f"q{i}" for i in range(7)]
    d = donor_map(qids, 42)
    assert sorted(d) == qids and sorted(d.values()) == qids and all(k != v for k, v in d.items())
    assert d == donor_map(list(reversed(qids)), 42)  # independent of input order
    assert donor_map(["only"], 42) == {}


def test_entailment_label_id_from_config():
    cfg = SimpleNamespace(id2label={0: "NEUTRAL", 1: "ENTAILMENT", 2: "CONTRADICTION"}, label2id={})
    assert entailment_label_id(cfg) == 1
    cfg = SimpleNamespace(id2label={0: "entailment", 1: "not_entailment"}, label2id={})
    assert entailment_label_id(cfg) == 0
    with pytest.raises(ValueError, match="entailment"):
        entailment_label_id(SimpleNamespace(id2label={0: "LABEL_0", 1: "LABEL_1"}, label2id={}))


def test_append_only_truncates_partial_line_and_rejects_bad_lines(tmp_path, capsys):
    from probeguard_core.logs import LogFormatError, read_self_report

    p = tmp_path / "self_report.jsonl"
    good = '{"schema_version":1,"qid":"a","dataset":"d","backbone":"b","verbalized_confidence":null,"p_true":0.5}\n'
    p.write_text(good + '{"schema_version":1,"qid":"b","dat')
    sink = AppendOnlyJsonl(p, read_self_report, key=lambda r: r.qid)
    assert sink.done == {"a"} and p.read_text() == good
    assert "unfinished last line" in capsys.readouterr().err
    p.write_text(good + '{"schema_version":1,"qid":"b"}\n')  # complete but malformed: an error, not repaired
    with pytest.raises(LogFormatError):
        AppendOnlyJsonl(p, read_self_report, key=lambda r: r.qid)
    with pytest.raises(ValueError, match="plain .jsonl"):
        AppendOnlyJsonl(tmp_path / "x.jsonl.gz", read_self_report, key=lambda r: r.qid)


def test_chunks_cut_from_input_order_and_yielded_whole():
    done = {0, 1, 2, 4}
    assert list(chunks(range(7), 3, done.__contains__)) == [[3, 4, 5], [6]]  # [0, 1, 2] all done: skipped
    assert list(chunks(range(7), 3, lambda i: False)) == [[0, 1, 2], [3, 4, 5], [6]]
    with pytest.raises(ValueError, match="batch_size"):
        list(chunks([1], 0, lambda i: False))


def test_chunking_config_only_for_batched_engines():
    from types import SimpleNamespace

    assert chunking_config(SimpleNamespace(batch_prompts=4), 16) == {"batch_prompts": 4, "batch_size": 16}
    assert chunking_config(SimpleNamespace(batch_prompts=None), 16) == {}
    assert chunking_config(object(), 16) == {}  # vLLM, scripted engines: no such attribute


def test_hyperparameters_are_the_one_source():
    """Table 9 lives in data/hyperparameters.yaml; configs, retrieval, NLI and the CLI read it."""
    from probeguard_core import SEED
    from probeguard_core.cli import pipeline as cli
    from probeguard_core.pipeline import nli_run, retrieval
    from probeguard_core.pipeline.hyperparameters import hp, table9_rows
    from probeguard_core.pipeline.probe_run import ProbeConfig
    from probeguard_core.pipeline.substrate import SubstrateConfig

    rows = table9_rows()
    assert [r[1] for r in rows] == ["Panel size N", "Maximum rounds T", "Candidate temperature",
                                    "Candidate max new tokens", "Query temperature (thinking mode)", "BM25 (k1, b)",
                                    "Candidates per query", "Kept after reranking", "Documents per round",
                                    "NLI input limit (tokens)", "Classifier", "Cross-validation folds",
                                    "Random seed (all stages)"]
    assert ("Retrieval", "BM25 (k1, b)", "(0.9, 0.4)") in rows
    cfg = SubstrateConfig(dataset="d", backbone="b")
    assert (cfg.n_candidates, cfg.max_rounds, cfg.temperature, cfg.max_new_tokens) == (8, 8, 0.7, 2048)
    assert cfg.n_candidates == hp("consensus_generation", "n_candidates")
    assert ProbeConfig().temperature == hp("consensus_generation", "temperature")
    assert (retrieval.K1, retrieval.B, retrieval.CANDIDATES_PER_QUERY, retrieval.KEEP_PER_QUERY,
            retrieval.MAX_DOCS) == (0.9, 0.4, 32, 2, 8)
    assert nli_run.MAX_LENGTH == hp("rationale_scoring", "nli_max_length") == 256
    assert SEED == hp("rationale_scoring", "seed")
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["substrate", "--questions", "q", "--dataset", "d", "--model", "m", "--out", "o"])
    assert (args.n, args.rounds, args.temperature) == (8, 8, 0.7)
