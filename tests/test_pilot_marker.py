"""The §5.2 probe-pilot marker (DESIGN 2.1 optional ``probe_pilot``): reader, simulator, §5.2 builder."""

from __future__ import annotations

import copy

import pytest
from helpers import make_log

from probeguard_core import logs as L
from probeguard_core.simulate import params as P
from probeguard_core.simulate import writer as W


def test_reader_accepts_bool_or_absent_and_names_the_field(tmp_path):
    base = make_log([["A", "A"]])
    assert L.QuestionLog.model_validate(base).probe_pilot is None
    assert L.QuestionLog.model_validate({**base, "probe_pilot": True}).probe_pilot is True
    assert L.QuestionLog.model_validate({**base, "probe_pilot": False}).probe_pilot is False
    bad = tmp_path / "logs.jsonl"
    L.write_jsonl(bad, [{**base, "probe_pilot": "yes"}])
    with pytest.raises(L.LogFormatError, match=r"logs\.jsonl:1: probe_pilot"):
        L.read_logs(bad)


def test_marker_changes_no_other_simulated_value():
    params = P.load_params()
    cell = "medqa/qwen3-8b"
    assert "probe_pilot" in params["cells"][cell]
    marked = W.simulate_cell(cell, n=40, params=params, progress=False)
    plain_params = copy.deepcopy(params)
    del plain_params["cells"][cell]["probe_pilot"]
    plain = W.simulate_cell(cell, n=40, params=plain_params, progress=False)
    assert all("probe_pilot" not in g for g in plain.logs)
    assert all(isinstance(g["probe_pilot"], bool) for g in marked.logs)
    stripped = [{k: v for k, v in g.items() if k != "probe_pilot"} for g in marked.logs]
    assert stripped == plain.logs and marked.probe == plain.probe and marked.nli == plain.nli
    # pilot questions are first-round unanimous (the probed ones), a scaled share of the parameter
    pilot = [g for g in marked.logs if g["probe_pilot"]]
    assert pilot and all(len({c["answer"] for c in g["rounds"][0]["candidates"]}) == 1 for g in pilot)
    again = W.simulate_cell(cell, n=40, params=params, progress=False)
    assert [g["probe_pilot"] for g in again.logs] == [g["probe_pilot"] for g in marked.logs]
