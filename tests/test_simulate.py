"""Tests of the simulator (probeguard_core.simulate): parameters, text, mechanism, determinism, CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from probeguard_core import logs as L
from probeguard_core.claims import extract_claims
from probeguard_core.cli import main as cli_main
from probeguard_core.release import load_release, sha256_file
from probeguard_core.rse import rationale_semantic_entropy
from probeguard_core.simulate import calibration as CA
from probeguard_core.simulate import params as P
from probeguard_core.simulate import text as TX
from probeguard_core.simulate import (
    simulate_cell,
    simulate_release,
    simulate_unanimous_layer,
    unanimous_layer_table,
    write_cell,
)

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "data" / "simulated-v1"


@pytest.fixture(scope="module")
def params():
    return P.load_params()


@pytest.fixture(scope="module")
def small_cell(params):
    return simulate_cell("medqa/qwen3-8b", n=150, params=params, progress=False)


# ---------------------------------------------------------------- parameters

def test_every_input_has_a_source_or_assumption(params):
    # load_params checks it; a leaf without either is rejected with its name
    bad = {**params, "panel": {**params["panel"], "n_candidates": {"value": 8}}}
    with pytest.raises(ValueError, match="panel.n_candidates"):
        P._check_leaves(bad["panel"], "panel")


def test_no_output_metric_is_an_input():
    text = (Path(P.__file__).with_name("params.yaml")).read_text(encoding="utf-8")
    keys = [line.split(":")[0].strip().lower() for line in text.splitlines() if ":" in line and not line.strip().startswith("#")]
    for forbidden in ("auroc", "aurc", "coverage", "realized"):
        assert not any(forbidden in k for k in keys), forbidden


def test_mixture_solve_is_exact_and_rejects_infeasible():
    rates = {"knowledge": (0.9, 0.9), "misconception": (0.7, 0.0), "uncertain": (0.03, 0.01)}
    pi = CA.solve_mixture(0.59, 0.134, rates, "t")
    U = sum(pi[s] * rates[s][0] for s in P.STATES)
    R = sum(pi[s] * rates[s][1] for s in P.STATES)
    assert U == pytest.approx(0.59) and 1 - R / U == pytest.approx(0.134)
    with pytest.raises(ValueError, match="infeasible"):
        CA.solve_mixture(0.95, 0.5, rates, "cell x")


# ---------------------------------------------------------------- text

def test_rationale_claims_are_the_concluding_sentences():
    rng = np.random.default_rng(0)
    for _ in range(300):
        mech = (int(rng.integers(30)), int(rng.integers(30)))
        rat = TX.rationale(rng, letter="C", dx="aortic stenosis", mech=mech, knowledge=bool(rng.integers(2)),
                           n_sentences=int(rng.integers(2, 7)), findings=["syncope", "a murmur", "70"],
                           distractors=["gout", "asthma"])
        assert rat.endswith("<answer>C</answer>")
        claims = extract_claims(rat)
        assert 1 <= len(claims) <= 2 and all(TX.has_cue(c) for c in claims)
        assert TX.mechanisms_in(" ".join(claims), [mech]) == {mech}
        body = rat.split(claims[0])[0]
        assert not TX.has_cue(body), body


def test_no_cue_in_reasoning_vocabulary():
    for tpl in TX._REASONING:
        assert not TX.has_cue(tpl), tpl
    for terms in TX.ALL_TERMS.values():
        for w in terms["finding"] + terms["dx"]:
            assert not TX.has_cue(w), w
    for w in TX.PROCESSES + TX.STRUCTURES:
        assert not TX.has_cue(w), w


# ---------------------------------------------------------------- mechanism (latent truth)

def test_records_validate_and_nli_follows_design(small_cell):
    logs = [L.QuestionLog.model_validate(x) for x in small_cell.logs]
    probe = [L.ProbeRecord.model_validate(x) for x in small_cell.probe]
    L.check_probe_consensus(probe, logs, "<sim>")
    by_q = {g.qid: g for g in logs}
    seen = set()
    for rec in small_cell.nli:
        r = L.NLIRecord.model_validate(rec)
        rnd = by_q[r.qid].rounds[r.round - 1]
        answers = [c.answer for c in rnd.candidates]
        counts = {k: answers.count(k) for k in by_q[r.qid].options}
        top = max(counts.values())
        modal = min(k for k, c in counts.items() if c == top)
        assert r.candidates == [i for i, a in enumerate(answers) if a == modal]
        assert r.claims == [" ".join(extract_claims(rnd.candidates[i].rationale)) for i in r.candidates]
        assert all(r.entailment[i][i] == 1.0 for i in range(len(r.claims)))
        assert all(round(x, 4) == x for row in r.entailment for x in row)
        seen.add((r.qid, r.round))
    for g in logs:
        assert (g.qid, 1) in seen and (g.qid, len(g.rounds)) in seen
    unanimous = {g.qid for g in logs if len({c.answer for c in g.rounds[0].candidates}) == 1 and g.rounds[0].candidates[0].answer}
    assert {(p.qid, p.arm) for p in probe} == {(q, a) for q in unanimous for a in L.ARMS}


def test_knowledge_rationales_cohere_more_than_misconception(params):
    data = simulate_cell("medxpertqa/qwen3-8b", n=400, params=params, progress=False)
    state = {x["qid"]: x["state"] for x in data.latent}
    unan = {x["qid"] for x in data.latent if x["unanimous"]}
    rse = {"knowledge": [], "misconception": []}
    for r in data.nli:
        if r["round"] == 1 and r["qid"] in unan and state[r["qid"]] in rse:
            rse[state[r["qid"]]].append(rationale_semantic_entropy(r["entailment"]))
    assert len(rse["knowledge"]) >= 10 and len(rse["misconception"]) >= 30
    assert np.mean(rse["knowledge"]) > np.mean(rse["misconception"]) + 0.1


def test_retrieval_only_after_disagreement_and_repeats_rise(small_cell):
    repeat_late, repeat_early = [], []
    for g in small_cell.logs:
        rounds = g["rounds"]
        assert rounds[-1]["retrieval"] is None
        seen: set[str] = set()
        for t, r in enumerate(rounds[:-1], start=1):
            ret = r["retrieval"]
            assert ret is not None and 1 <= len(ret["doc_ids"]) <= 8 and 1 <= len(ret["queries"]) <= 4
            if t >= 2:
                rep = sum(d in seen for d in ret["doc_ids"]) / len(ret["doc_ids"])
                (repeat_early if t == 2 else repeat_late).append(rep)
            seen.update(ret["doc_ids"])
    assert np.mean(repeat_late) > np.mean(repeat_early)


# ---------------------------------------------------------------- determinism and release

def test_scaled_cell_is_a_prefix(params):
    a = simulate_cell("mmlu_pro_med/llama-3.1-8b-instruct", n=8, params=params, progress=False)
    b = simulate_cell("mmlu_pro_med/llama-3.1-8b-instruct", n=16, params=params, progress=False)
    assert a.logs == b.logs[:8]


def test_regeneration_reproduces_manifest(tmp_path):
    outs = []
    for name in ("a", "b"):
        rc = cli_main(["simulate", "--out", str(tmp_path / name), "--cells", "medqa/huatuogpt-o1-8b",
                       "--cells", "medqa-augment/qwen3-8b", "--scale", "0.02", "--quiet"])
        assert rc == 0
        outs.append((tmp_path / name / "manifest.json").read_bytes())
    assert outs[0] == outs[1]
    rel = load_release(tmp_path / "a")
    assert rel.provenance == "simulated" and rel.manifest["seed"] == 42
    assert {c.role for c in rel.cells} == {"main", "augment"}
    assert "DATASHEET.md" in rel.manifest["files"]


def test_full_cell_matches_shipped_hashes(tmp_path, params):
    """Regenerate one full cell and compare every file's sha256 with the shipped manifest."""
    manifest = json.loads((SHIPPED / "manifest.json").read_text())
    cell = "medqa/huatuogpt-o1-8b"
    paths = write_cell(tmp_path, simulate_cell(cell, params=params, progress=False))
    assert set(paths) == {"logs", "probe", "nli"}
    for p in paths.values():
        rel = p.relative_to(tmp_path).as_posix()
        assert sha256_file(p) == manifest["files"][rel], rel


def test_bad_inputs(tmp_path, capsys):
    with pytest.raises(ValueError, match="unknown cell"):
        simulate_cell("medqa/gpt-4", n=2)
    with pytest.raises(ValueError, match="scale"):
        simulate_cell("medqa/qwen3-8b", scale=0.0)
    with pytest.raises(ValueError, match="seed"):
        simulate_release(tmp_path, cells=["medqa/qwen3-8b"], seed=7)
    assert cli_main(["simulate", "--out", str(tmp_path), "--cells", "nope/x"]) == 2
    assert "unknown cell" in capsys.readouterr().err


# ---------------------------------------------------------------- what-if

def test_unanimous_layer_whatif_uses_core():
    logs, probe, nli = simulate_unanimous_layer(30, 0.3, seed=1)
    assert len(logs) == 30 and all(len(g.rounds) == 1 for g in logs)
    tab = unanimous_layer_table(120, 0.3, seed=1)
    assert list(tab.columns) == ["kappa", "rse", "correct"] and len(tab) == 120
    err = 1 - tab["correct"].mean()
    assert abs(err - 0.3) <= 3 * math.sqrt(0.3 * 0.7 / 120) + 0.02
    assert tab["kappa"].between(0, 1).all() and tab["rse"].notna().all()
    with pytest.raises(ValueError, match="error_rate"):
        simulate_unanimous_layer(5, 1.5)
