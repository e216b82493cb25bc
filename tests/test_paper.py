"""Tests of ``probeguard_core.paper`` and of the transcription ``data/paper/reported.csv``.

The transcription is checked against the paper text itself: for every row, the token
printed in ``printed`` must occur in the section named by ``source``, and ``value`` must
equal that number (divided by 100 for a percentage).  The text is looked up at
``$PROBEGUARD_PAPER_TEXT``, ``data/paper/probeguard-paper.txt`` or
``../shared/paper/probeguard-paper.txt`` beside the repository;
those tests skip, saying so, when it is absent.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import paper_text_path

from probeguard_core import paper
from probeguard_core.logs import LogFormatError
from probeguard_core.paper import (
    BACKBONES,
    COLUMNS,
    KEY_COLUMNS,
    approaches,
    beside_paper,
    format_beside,
    load_reported,
    paper_dir,
    reported,
    reported_value,
    unit_of,
)

REPO = Path(__file__).resolve().parent.parent
Q, H, L = BACKBONES
NUMBER = re.compile(r"^\d+(?:\.\d+)?%?$")


# --------------------------------------------------------------------------------------------
# The paper text, cut into the sections a row's ``source`` names
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def paper_lines() -> list[str]:
    path = paper_text_path()
    if path is None:
        pytest.skip("paper text not found: set PROBEGUARD_PAPER_TEXT to probeguard-paper.txt")
    return path.read_text(encoding="utf-8").replace("\u00a0", " ").splitlines()


HEADING = re.compile(r"^(\d+(?:\.\d+)?) [A-Z]")


def section(lines: list[str], source: str) -> str:
    """The text of one source: a table (caption + rows), a figure caption, a § or an appendix."""
    kind, _, ident = source.partition(" ")
    if kind == "Table":
        start = next(i for i, line in enumerate(lines) if line.startswith(f"Table {ident}:"))
        out, j = [lines[start]], start + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        while j < len(lines) and lines[j].strip():
            out.append(lines[j])
            j += 1
        return "\n".join(out)
    if kind == "Figure":
        return next(line for line in lines if line.startswith(f"Figure {ident}:"))
    if kind == "Appendix":
        start = next(i for i, line in enumerate(lines) if line.startswith(f"Appendix {ident} "))
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("Appendix ")), len(lines))
        return "\n".join(lines[start:end])
    assert source.startswith("§"), source
    number = source[1:]
    start = next(i for i, line in enumerate(lines) if (m := HEADING.match(line)) and m.group(1) == number)
    end = next((i for i in range(start + 1, len(lines))
                if HEADING.match(lines[i]) or lines[i].startswith("Appendix ")), len(lines))
    return "\n".join(lines[start:end])


def occurs(token: str, text: str) -> bool:
    """``token`` occurs in ``text`` and, if it is a number, not as part of a longer number."""
    if not NUMBER.match(token):
        return token in text
    return re.search(r"(?<![\d.])" + re.escape(token) + r"(?![\d]|\.\d)", text) is not None


def printed_value(printed: str, unit: str) -> float:
    number = float(printed.rstrip("%"))
    percent = printed.endswith("%") or (unit == "fraction" and number > 1)
    return number / 100 if percent else number


# --------------------------------------------------------------------------------------------
# Transcription against the paper text
# --------------------------------------------------------------------------------------------

def test_helpers_catch_wrong_tokens(paper_lines):
    table2 = section(paper_lines, "Table 2")
    assert occurs("0.696", table2) and not occurs("0.69", table2) and not occurs("0.697", table2)
    assert occurs("14.0%", section(paper_lines, "Table 6"))
    assert not occurs("0.696", section(paper_lines, "Table 6"))
    assert occurs("58.2%", section(paper_lines, "§4.2"))
    assert not occurs("58.2%", section(paper_lines, "§4.3"))
    assert "Appendix H" not in section(paper_lines, "Appendix G")


def test_every_row_is_printed_in_its_source(paper_lines):
    frame = load_reported()
    missing = []
    for row in frame.itertuples(index=False):
        if not occurs(row.printed, section(paper_lines, row.source)):
            missing.append((row.source, row.quantity, row.printed))
    assert not missing, f"not found in their source section: {missing}"


def test_every_value_equals_its_printed_number():
    frame = load_reported()
    for row in frame.itertuples(index=False):
        if NUMBER.match(row.printed):
            assert math.isclose(row.value, printed_value(row.printed, row.unit), abs_tol=1e-12), row
        elif row.note.startswith("stated in words"):
            assert row.value == 0.0 and row.quantity == "certified_coverage", row
        else:  # a short phrase whose first number is the value, e.g. "0 of 50"
            first = re.search(r"\d+(?:\.\d+)?", row.printed)
            assert first is not None and float(first.group()) == row.value, row


SIGNAL_LABELS = {
    "terminal_agreement": "Terminal agreement", "first_round_agreement": "First-round agreement",
    "sequence_logprob": "Sequence log-probability", "answer_entropy": "Answer entropy",
    "verbalized_confidence": "Verbalized confidence", "p_true": "P(True)",
    "process_score": "ProbeGuard (process score)",
}
ARM_LABELS = {"counter_evidence": "Counter-evidence probe", "instruction_only": "Instruction only",
              "irrelevant_docs": "Irrelevant documents", "neutral_instruction": "Neutral instruction"}
DS_COLUMN = {"medqa": 0, "mmlu_pro_med": 1, "medmcqa": 2}
FAMILY_ORDER = ["agreement", "distribution", "minority", "rationale", "retrieval"]


def table_cell(lines: list[str], row) -> str:
    """The table cell a row's keys point to, located independently of the transcription."""
    body = section(lines, row.source).splitlines()
    if row.source in ("Table 2", "Table 5"):
        if row.source == "Table 5":  # the backbone's block
            start = body.index(paper.BACKBONE_LABELS[row.backbone])
            body = body[start + 1:]
        line = next(b for b in body if b.startswith(SIGNAL_LABELS[row.signal]))
        column = 1 + DS_COLUMN[row.dataset] + (3 if row.quantity == "aurc" else 0)
    elif row.source == "Table 3":
        line = next(b for b in body if b.startswith(paper.BACKBONE_LABELS[row.backbone] + "\t"))
        column = (1 + 4 * DS_COLUMN[row.dataset] + 2 * (row.quantity == "aurc")
                  + (row.signal == "terminal_agreement"))
    elif row.source == "Table 6":
        line = next(b for b in body if b.startswith(ARM_LABELS[row.arm] + "\t"))
        column = {"flip_wrong": 3, "flip_right": 4}[row.quantity]
    elif row.source == "Table 7":
        if row.arm == "gbt_classifier":
            line = next(b for b in body if b.startswith("GBT"))
        else:
            marks = ["\u2717" if f == row.dropped_family else "\u2713" for f in FAMILY_ORDER]
            line = next(b for b in body if b.startswith("\t".join(marks) + "\t"))
        column = 5 + DS_COLUMN[row.dataset]
    elif row.source == "Table 8":
        line = next(b for b in body if b.startswith(row.specialty + "\t"))
        column = {"n_unanimous": 1, "unanimous_error": 2,
                  "certified_coverage": 3, "realized_risk": 4}[row.quantity]
    else:
        raise AssertionError(row.source)
    return line.split("\t")[column]


def test_table_rows_sit_in_the_cell_their_keys_name(paper_lines):
    frame = load_reported()
    tables = frame[frame["source"].isin(["Table 2", "Table 3", "Table 5", "Table 6", "Table 7", "Table 8"])]
    assert len(tables) == 38 + 24 + 78 + 8 + 21 + 44
    wrong = [(r.source, r.backbone, r.dataset, r.signal, r.arm, r.specialty, r.quantity, r.printed, cell)
             for r in tables.itertuples(index=False) if (cell := table_cell(paper_lines, r)) != r.printed]
    assert not wrong, wrong


def test_table1_matches_paper(paper_lines):
    text = section(paper_lines, "Table 1").splitlines()[2:]  # caption, header, then the rows
    printed = [[cell.replace("\u2717", "none") for cell in line.split("\t")] for line in text]
    assert approaches().values.tolist() == printed


# --------------------------------------------------------------------------------------------
# Shape of the transcription
# --------------------------------------------------------------------------------------------

EXPECTED_ROWS = {
    "Table 2": 7 * 6 - 4,            # 7 signals x (3 AUROC + 3 AURC), minus 4 dashes
    "Table 3": 3 * 8,                # 3 backbones x 8 cells
    "Table 5": 38 + 5 * 4 + 5 * 4,   # Qwen block as Table 2; HuatuoGPT and Llama: 5 signals x 2 x 2
    "Table 6": 4 * 2,
    "Table 7": 7 * 3,
    "Table 8": 11 * 4,
    "Figure 3": 2,
    "§1": 2,
    "§3.1": 1,
    "§4.2": 2,
    "§4.3": 28,
    "§4.4": 18,
    "§5.1": 8,
    "§5.2": 1,
    "Table 9": 13,
    "Appendix E": 1,
    "Appendix G": 4,
    "Appendix I": 2,
    "Appendix J": 3,
}


def test_row_counts_per_source():
    assert dict(Counter(load_reported()["source"])) == EXPECTED_ROWS


def test_table5_blocks():
    t5 = reported(source="Table 5")
    assert t5.groupby("backbone")["signal"].nunique().to_dict() == {Q: 7, H: 5, L: 5}
    assert Counter(t5["backbone"]) == {Q: 38, H: 20, L: 20}
    assert set(reported(source="Table 5", backbone=[H, L])["dataset"]) == {"medqa", "mmlu_pro_med"}
    # the dashes: self-reports never on MedMCQA
    assert reported(source="Table 5", signal=["p_true", "verbalized_confidence"], dataset="medmcqa").empty


def _values(frame: pd.DataFrame, keys: list[str]) -> dict:
    return {tuple(r[k] for k in keys): r["value"] for _, r in frame.iterrows()}


def test_tables_agree_with_each_other():
    keys = ["backbone", "dataset", "signal", "quantity"]
    t2, t3, t5 = (_values(reported(source=s), keys) for s in ("Table 2", "Table 3", "Table 5"))
    assert t2 == {k: v for k, v in t5.items() if k[0] == Q}
    assert all(t5[k] == v for k, v in t3.items())
    full = reported(source="Table 7", dropped_family=None, arm=None)
    assert _values(full, ["dataset"]) == _values(reported(source="Table 2", signal="process_score",
                                                          quantity="auroc"), ["dataset"])


def test_table8_shape_and_sizes():
    t8 = reported(source="Table 8")
    assert t8["specialty"].nunique() == 11
    assert Counter(t8["quantity"]) == {"n_unanimous": 11, "unanimous_error": 11,
                                       "certified_coverage": 11, "realized_risk": 11}
    n = reported(source="Table 8", quantity="n_unanimous")["value"]
    assert (n >= 25).all()  # specialties with fewer than 25 unanimous questions are omitted
    assert n.sum() <= reported_value(source="Appendix I", quantity="n_specialty_unanimous")
    assert reported_value(source="Table 8", quantity="realized_risk", specialty="Emergency medicine") > 0.15


def test_reported_numbers_are_mutually_consistent():
    wrong = reported_value(source="§1", quantity="n_unanimous_wrong")
    total = reported_value(source="§1", quantity="n_unanimous")
    err = reported_value(source="§4.3", quantity="unanimous_error", dataset="medqa", backbone=Q)
    assert round(wrong / total, 3) == err
    share = reported_value(source="§4.3", quantity="unanimous_share", dataset="medqa", backbone=Q)
    cov = reported_value(source="§4.4", quantity="certified_coverage", backbone=Q, arm="stratified_ltt",
                         dataset="medqa", alpha=0.15)
    # "about 32%": 0.553 x 0.59 = 0.326 (the 59% share is itself rounded)
    assert abs(share * cov - reported_value(source="§4.4", quantity="certified_share_of_all")) < 0.01
    assert reported_value(source="§4.3", quantity="flip_wrong_min", backbone=Q) == reported_value(
        source="Table 6", quantity="flip_wrong", arm="counter_evidence")


def test_keys_and_units():
    frame = load_reported()
    assert list(frame.columns) == list(COLUMNS)
    assert not frame.duplicated(subset=list(KEY_COLUMNS)).any()
    assert frame.groupby("quantity")["unit"].nunique().max() == 1
    assert set(frame.loc[frame["backbone"] != "", "backbone"]) == set(BACKBONES)
    assert frame.loc[frame["unit"] == "fraction", "value"].between(0, 1).all()
    assert unit_of("auroc") == "auroc" and unit_of("flip_wrong") == "fraction"
    with pytest.raises(ValueError, match="unknown quantity"):
        unit_of("accuracy")


# --------------------------------------------------------------------------------------------
# reported / reported_value
# --------------------------------------------------------------------------------------------

def test_reported_filters():
    assert len(reported(table=2)) == len(reported(source="Table 2")) == 38
    assert len(reported(table="Table 6")) == 8
    assert len(reported(source="§4.4", alpha=0.1)) == len(reported(source="§4.4", alpha=0.10000000001))
    both = reported(source="Table 6", arm=["instruction_only", "irrelevant_docs"])
    assert set(both["arm"]) == {"instruction_only", "irrelevant_docs"} and len(both) == 4
    assert reported(source="§4.2", round=4)["value"].tolist() == [0.582]
    assert (reported(source="Table 7", dropped_family=None, arm=None)["value"].tolist()
            == [0.696, 0.704, 0.659])
    with pytest.raises(ValueError, match="unknown filter 'datset'"):
        reported(datset="medqa")
    with pytest.raises(ValueError, match="dataset='MedQA' is not in the reported table"):
        reported(dataset="MedQA")
    with pytest.raises(ValueError, match="either table= or source="):
        reported(table=2, source="Table 2")


def test_reported_value():
    value = reported_value(source="Table 2", quantity="auroc", signal="process_score", dataset="medqa")
    assert value == 0.696
    assert reported_value(source="Table 6", quantity="flip_wrong", arm="counter_evidence") == 0.14
    assert reported_value(source="Appendix J", quantity="probe_completion_tokens_median") == 4381
    with pytest.raises(ValueError, match=r"matches 3 rows.*differ in \['backbone'\]"):
        reported_value(source="Table 5", quantity="auroc", signal="process_score", dataset="medqa")
    with pytest.raises(ValueError, match="matches 0 rows"):
        reported_value(source="Table 2", quantity="auroc", signal="p_true", dataset="medmcqa")


def test_returned_frames_are_copies():
    first = reported(source="Table 2")
    first.loc[0, "value"] = -1.0
    assert reported(source="Table 2").loc[0, "value"] == 0.512


# --------------------------------------------------------------------------------------------
# beside_paper / format_beside
# --------------------------------------------------------------------------------------------

def test_beside_paper_adds_paper_and_diff_keeping_every_row():
    ours = pd.DataFrame({
        "signal": ["terminal_agreement", "p_true", "process_score", "keep_rate"],
        "dataset": ["medqa", "medmcqa", "mmlu_pro_med", "medqa"],
        "value": [0.5, 0.6, 0.75, 0.61],
    }, index=[10, 11, 12, 13])
    out = beside_paper(ours, on=["signal", "dataset"], source="Table 2", quantity="auroc")
    assert list(out.index) == [10, 11, 12, 13]
    assert out["signal"].tolist() == ours["signal"].tolist()
    np.testing.assert_allclose(out["paper"].to_numpy(), [0.512, np.nan, 0.704, np.nan])
    np.testing.assert_allclose(out["diff"].to_numpy(), [0.5 - 0.512, np.nan, 0.75 - 0.704, np.nan])
    assert out["unit"].tolist() == ["auroc"] * 4
    assert "paper" not in ours.columns  # input untouched


def test_beside_paper_on_alpha_and_empty_keys():
    ours = pd.DataFrame({"backbone": [Q, H, H, L], "alpha": [0.15, 0.10, 0.15, 0.10],
                         "coverage": [0.5, 0.4, 1.0, 0.2]})
    out = beside_paper(ours, on=["backbone", "alpha"], value_col="coverage", source="§4.4",
                       quantity="certified_coverage", arm="stratified_ltt", dataset="medqa")
    np.testing.assert_allclose(out["paper"].to_numpy(), [0.553, 0.410, 0.997, np.nan])
    # None in ours matches a key the paper leaves empty
    ours = pd.DataFrame({"dataset": [None, "medqa"], "value": [0.5, 0.2]})
    out = beside_paper(ours, on=["dataset"], source="§4.3", quantity="flip_wrong", backbone=L)
    np.testing.assert_allclose(out["paper"].to_numpy(), [0.542, np.nan])


def test_beside_paper_rejects_ambiguity_and_bad_input():
    ours = pd.DataFrame({"dataset": ["medqa"], "value": [0.7]})
    with pytest.raises(ValueError, match="not unique on \\['dataset'\\]"):
        beside_paper(ours, on=["dataset"], source="Table 5", quantity="auroc", signal="process_score")
    with pytest.raises(ValueError, match="not a column of ours"):
        beside_paper(ours, on=["signal"], source="Table 2")
    with pytest.raises(ValueError, match="not a key column"):
        beside_paper(ours, on=["note"], source="Table 2")
    with pytest.raises(ValueError, match="value_col='auroc'"):
        beside_paper(ours, on=["dataset"], value_col="auroc", source="Table 2")
    with pytest.raises(ValueError, match="must be numeric"):
        beside_paper(ours.assign(value=["x"]), on=["dataset"], source="Table 2")
    with pytest.raises(ValueError, match="already has a column 'paper'"):
        beside_paper(ours.assign(paper=1.0), on=["dataset"], source="Table 2")


def test_format_beside():
    frame = pd.DataFrame({"quantity": ["flip_wrong", "auroc", "n_unanimous"],
                          "value": [0.152, 0.7, 750.0], "paper": [0.14, np.nan, 746.0]})
    frame["diff"] = frame["value"] - frame["paper"]
    shown = format_beside(frame)
    assert shown["value"].tolist() == ["15.2%", "0.700", "750"]
    assert shown["paper"].tolist() == ["14.0%", "–", "746"]
    assert shown["diff"].tolist() == ["+1.2 pp", "–", "+4"]
    decimals = format_beside(frame, percent=False)
    assert decimals["value"].tolist()[0] == "0.152"
    assert format_beside(frame[["value"]], unit="auroc")["value"].tolist() == ["0.152", "0.700", "750.000"]
    with pytest.raises(ValueError, match="unit='percent'"):
        format_beside(frame, unit="percent")


# --------------------------------------------------------------------------------------------
# Locating and validating the CSV
# --------------------------------------------------------------------------------------------

def _copy_csv(tmp_path: Path, edit=None) -> Path:
    text = (REPO / "data" / "paper" / "reported.csv").read_text(encoding="utf-8")
    lines = text.splitlines()
    if edit is not None:
        lines = edit(lines)
    (tmp_path / "reported.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


def test_paper_dir_default_and_override(tmp_path, monkeypatch):
    monkeypatch.delenv(paper.ENV_VAR, raising=False)
    assert paper_dir() == REPO / "data" / "paper"
    monkeypatch.setenv(paper.ENV_VAR, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="PROBEGUARD_PAPER_DIR"):
        paper_dir()
    _copy_csv(tmp_path, lambda lines: lines[:3])
    assert len(reported()) == 2


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        (",medqa,", ",MedQA,", "dataset"),
        (",process_score,", ",procscore,", "signal"),
        (",0.696,auroc,", ",0.6x96,auroc,", "value"),
        (",0.696,auroc,", ",0.696,percent,", "unit"),
        (",0.696,auroc,0.696,", ",0.696,auroc,,", "printed"),
    ],
)
def test_malformed_csv_names_line_and_field(tmp_path, monkeypatch, old, new, field):
    def edit(lines):
        index = next(i for i, line in enumerate(lines) if old in line)
        lines[index] = lines[index].replace(old, new, 1)
        edit.line = index + 1
        return lines

    monkeypatch.setenv(paper.ENV_VAR, str(_copy_csv(tmp_path, edit)))
    with pytest.raises(LogFormatError) as info:
        reported()
    assert info.value.line == edit.line and info.value.field == field
    assert f"reported.csv:{edit.line}: {field}:" in str(info.value)


def test_malformed_csv_duplicates_and_units(tmp_path, monkeypatch):
    monkeypatch.setenv(paper.ENV_VAR, str(_copy_csv(tmp_path, lambda lines: lines + [lines[1]])))
    with pytest.raises(LogFormatError, match="duplicates the key of line 2"):
        reported()
    fresh = tmp_path / "units"
    fresh.mkdir()
    monkeypatch.setenv(paper.ENV_VAR, str(_copy_csv(
        fresh, lambda lines: lines[:2] + [lines[2].replace(",auroc,0.504,", ",aurc,0.504,")])))
    with pytest.raises(LogFormatError, match="quantity 'auroc' has unit 'aurc'"):
        reported()
