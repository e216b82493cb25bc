"""Referral dossiers (issue 12 §1, §5.3): one per referred question, checked against the raw log.

The shipped MedQA cell (simulated release, Qwen3-8B) is certified through the command line;
dossiers are then compared field by field with the log lines read here with plain ``json``
(not through the package's readers), so a dossier that mis-copies a vote, a claim or a
document id fails.
"""

from __future__ import annotations

import gzip
import html
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import markupsafe
import pytest
from helpers import make_log, make_nli, make_probe, write_records

from probeguard_core.claims import extract_claims
from probeguard_core.cli import main

ROOT = Path(__file__).resolve().parents[1]
CELL = ROOT / "data" / "simulated-v1" / "medqa" / "qwen3-8b"
ALPHA = 0.1


def _raw(path: Path) -> dict[str, dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return {r["qid"]: r for r in map(json.loads, fh)}


def _raw_probe(path: Path) -> dict[str, dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return {r["qid"]: r for r in map(json.loads, fh) if r["arm"] == "counter_evidence"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A MedCorp-shaped corpus holding every probe document id, with hostile titles."""
    ids = sorted({d for r in _raw_probe(CELL / "probe.jsonl.gz").values() for d in r["doc_ids"]})
    p = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    write_records(p, [{"id": d, "title": f"<b>Title of {d}</b> & co",
                       "content": f"First line of {d}.\nSecond <i>line</i>.\nThird line, not shown."} for d in ids])
    return p


@pytest.fixture(scope="module")
def certified(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("medqa") / "out"
    rc = main(["certify", "--logs", str(CELL / "logs.jsonl.gz"), "--probe", str(CELL / "probe.jsonl.gz"),
               "--nli", str(CELL / "nli.jsonl.gz"), "--corpus", str(corpus), "--alpha", str(ALPHA), "--out", str(out)])
    assert rc == 0
    return out


def _dossiers(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "dossiers.jsonl").read_text(encoding="utf-8").splitlines()]


def test_one_dossier_per_referred_question(certified: Path, tmp_path: Path) -> None:
    dossiers = _dossiers(certified)
    dec = tmp_path / "d.jsonl"
    assert main(["apply", "--certificate", str(certified / "certificate.json"), "--logs", str(CELL / "logs.jsonl.gz"),
                 "--probe", str(CELL / "probe.jsonl.gz"), "--nli", str(CELL / "nli.jsonl.gz"), "--out", str(dec)]) == 0
    decisions = [json.loads(x) for x in dec.read_text().splitlines()]
    referred = [d["qid"] for d in decisions if d["decision"] == "abstain"]
    assert [d["qid"] for d in dossiers] == referred and len(referred) > 100
    # apply writes the same dossiers (no corpus: titles are null)
    applied = [json.loads(x) for x in (tmp_path / "d.dossiers.jsonl").read_text().splitlines()]
    assert [d["qid"] for d in applied] == referred
    assert {d["schema_version"] for d in dossiers} == {1}
    codes = Counter(d["referral"]["code"] for d in dossiers)
    assert codes["s3_not_converged"] == sum(1 for d in decisions if d["base_stratum"] == "S3")
    cert = json.loads((certified / "certificate.json").read_text())
    for d in dossiers:
        st = next(s for s in cert["strata"] if s["name"] == d["stratum"])
        if d["referral"]["code"] == "below_threshold":
            assert d["referral"]["threshold"] == st["threshold"] and d["referral"]["score"] <= st["threshold"]
        elif d["referral"]["code"] == "stratum_not_certified":
            assert st["threshold"] is None and st["tested"]


def _modal(votes: dict[str, int], keys: list[str]) -> str:
    top = max(votes[k] for k in keys)
    return next(k for k in keys if votes[k] == top)  # ties -> alphabetically first key (DESIGN 3)


def _check_against_log(d: dict[str, Any], log: dict[str, Any], probe: dict[str, Any] | None) -> None:
    for key in ("qid", "dataset", "backbone", "specialty", "question", "options"):
        assert d[key] == log[key], key
    keys = sorted(log["options"])
    last = Counter(c["answer"] for c in log["rounds"][-1]["candidates"] if c["answer"] is not None)
    top = max(last.values()) if last else 0
    winners = [a for a, k in last.items() if k == top]
    assert d["system_answer"] == (winners[0] if len(winners) == 1 else None)
    assert d["dissent"]["n_candidates"] == log["n_candidates"]
    assert len(d["dissent"]["rounds"]) == len(log["rounds"])
    modal = []
    for got, rnd in zip(d["dissent"]["rounds"], log["rounds"]):
        assert got["round"] == rnd["round"]
        votes = {k: 0 for k in keys} | {"null": 0}
        for c in rnd["candidates"]:
            votes["null" if c["answer"] is None else c["answer"]] += 1
        assert got["votes"] == votes
        m = _modal(votes, keys)
        modal.append(m)
        assert got["modal_answer"] == m
        minority: dict[str, list[int]] = {}
        for i, c in enumerate(rnd["candidates"]):
            if c["answer"] not in (None, m):
                minority.setdefault(c["answer"], []).append(i)
        assert [x["answer"] for x in got["minority"]] == sorted(minority)
        for x in got["minority"]:
            assert x["candidates"] == minority[x["answer"]]
            assert x["claims"] == [extract_claims(rnd["candidates"][i]["rationale"]) for i in x["candidates"]]
        want_r = None if rnd["retrieval"] is None else {"queries": rnd["retrieval"]["queries"],
                                                         "doc_ids": rnd["retrieval"]["doc_ids"]}
        assert got["retrieval"] == want_r
    flips = [{"after_round": t + 1, "from": modal[t], "to": modal[t + 1]}
             for t in range(len(modal) - 1) if modal[t + 1] != modal[t]]
    assert d["dissent"]["majority_flips"] == flips
    if probe is None:
        assert d["probe"] is None
        return
    p = d["probe"]
    assert p["consensus"] == probe["consensus"] and p["n_reanswers"] == len(probe["reanswers"])
    assert p["keep_rate"] == sum(r["answer"] == probe["consensus"] for r in probe["reanswers"]) / len(probe["reanswers"])
    assert [(f["index"], f["answer"]) for f in p["flipped"]] == [
        (i, r["answer"]) for i, r in enumerate(probe["reanswers"]) if r["answer"] != probe["consensus"]]
    for f in p["flipped"]:
        assert f["claims"] == extract_claims(probe["reanswers"][f["index"]]["rationale"])
    assert p["queries"] == probe["queries"]
    assert [doc["id"] for doc in p["challenge_documents"]] == probe["doc_ids"]
    for doc in p["challenge_documents"]:
        assert doc["title"] == f"<b>Title of {doc['id']}</b> & co"
        assert doc["first_lines"] == f"First line of {doc['id']}. Second <i>line</i>."


def test_dossiers_field_by_field_against_the_log(certified: Path) -> None:
    logs = _raw(CELL / "logs.jsonl.gz")
    probes = _raw_probe(CELL / "probe.jsonl.gz")
    dossiers = _dossiers(certified)
    # the richest contested dossier (most rounds with minority answers) and a flipped unanimous one
    contested = max((d for d in dossiers if d["base_stratum"] != "S1"),
                    key=lambda d: (len(d["dissent"]["majority_flips"]), len(d["dissent"]["rounds"]), d["qid"]))
    unanimous = next(d for d in dossiers if d["probe"] and d["probe"]["flipped"])
    assert contested["dissent"]["majority_flips"] and any(r["minority"] for r in contested["dissent"]["rounds"])
    for d in (contested, unanimous):
        _check_against_log(d, logs[d["qid"]], probes.get(d["qid"]) if d["base_stratum"] == "S1" else None)
    for d in dossiers[:200]:  # and a broad sweep
        _check_against_log(d, logs[d["qid"]], probes.get(d["qid"]) if d["base_stratum"] == "S1" else None)


def test_report_section_is_browsable_and_escaped(certified: Path) -> None:
    page = (certified / "report.html").read_text(encoding="utf-8")
    dossiers = _dossiers(certified)
    assert page.count('<details class="dossier" id="dossier-') == len(dossiers)
    assert page.count('href="#dossier-') == len(dossiers)
    assert "<script" not in page and "<b>Title" not in page and html.escape("<b>Title of") in page
    assert re.search(r"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\"",
                     page)
    assert not re.search(r"(src|href)=\"(https?:)?//", page)


def test_hostile_strings_are_escaped_everywhere(tmp_path: Path) -> None:
    evil = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
    common = {"dataset": "medqa", "backbone": "Qwen/Qwen3-8B"}
    logs, probes, nlis = [], [], []
    for i in range(40):
        qid = f"q{i}{evil}"
        ok = i % 4 != 0
        a = "A" if ok else "B"
        logs.append(make_log([[a] * 4], gold="A", qid=qid, specialty=evil, **common) | {"question": evil})
        probes.append(make_probe([a, a, "C", a], consensus=a, qid=qid, queries=[evil], doc_ids=[f"d{i}{evil}"], **common))
        nlis.append(make_nli(claims=[evil] * 4, entailment=[[1.0, 0.8, 0.8, 0.8]] * 4, candidates=[0, 1, 2, 3],
                             qid=qid, **common))
    for i in range(20):
        logs.append(make_log([["A", "B", "A", "C"], ["A"] * 4], gold="A", qid=f"c{i}{evil}",
                             rationales=[[evil] * 4, ["x"] * 4], doc_ids=[[evil], None], **common))
    files = {k: write_records(tmp_path / f"{k}.jsonl", v) for k, v in
             (("logs", logs), ("probe", probes), ("nli", nlis))}
    corpus = write_records(tmp_path / "corpus.jsonl", [{"id": f"d{i}{evil}", "title": evil, "content": evil}
                                                       for i in range(40)])
    out = tmp_path / "o"
    rc = main(["certify", "--logs", str(files["logs"]), "--probe", str(files["probe"]), "--nli", str(files["nli"]),
               "--corpus", str(corpus), "--alpha", "0.3", "--out", str(out)])
    assert rc == 0
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "<script" not in page and "<img" not in page and "onerror=alert(2)>" not in page
    assert str(markupsafe.escape(evil)) in page
    assert page.count('<details class="dossier"') == len(_dossiers(out)) > 0
