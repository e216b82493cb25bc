"""The fast read inside the strict readers (:func:`probeguard_core.logs._read_fast`): it accepts
only what the pydantic path accepts.

Every malformed logs/NLI case of the foundation (``test_logs_malformed.CASES``) is written in
the canonical form the fast read accepts (compact JSON, DESIGN key order), so that the defect
itself, not the spelling, must be what it declines, and the reader then raises the case's
``file:line: field: reason``; a release whose file is malformed gives ``Cell.features()``
exactly that error.  On valid files the readers return the models themselves (DESIGN section 3),
built from the checked structs without re-validation, equal to the validated models (fields set
included), written back byte for byte, with the pydantic records' feature table.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers import make_log, make_nli
from test_logs_malformed import CASES, GOOD, Case

from probeguard_core import features as F
from probeguard_core import logs as L
from probeguard_core.release import load_release

RELEASE = Path(__file__).resolve().parents[1] / "data" / "simulated-v1"


def _order(value: Any, struct: Any) -> Any:
    """``value`` with its keys in the field order of ``struct`` (unknown keys last), recursively."""
    import msgspec

    if not isinstance(value, dict) or struct is None:
        return value
    fields = {f.name: f.type for f in msgspec.structs.fields(struct)}
    names = list(fields)
    out = {}
    for k in sorted(value, key=lambda k: names.index(k) if k in names else len(names)):
        out[k] = _sub(value[k], fields.get(k))
    return out


def _sub(value: Any, tp: Any) -> Any:
    """Descend into lists and optional structs along the annotation ``tp``."""
    import typing

    args = [a for a in typing.get_args(tp) if a is not type(None)]
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _sub(value, args[0])
    if origin is list and isinstance(value, list):
        return [_sub(v, args[0]) for v in value]
    if isinstance(tp, type) and hasattr(tp, "__struct_fields__"):
        return _order(value, tp)
    for a in args:  # X | None
        if isinstance(a, type) and hasattr(a, "__struct_fields__"):
            return _order(value, a)
    return value


def _line(rec: Any, struct: Any) -> bytes:
    if isinstance(rec, bytes):
        return rec
    if isinstance(rec, str):
        return rec.encode("utf-8")
    return json.dumps(_order(rec, struct), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _fast_logs(path: Path) -> list[Any] | None:
    return L._read_fast(L.QuestionLog, path, ("qid",))


def _fast_nli(path: Path) -> list[Any] | None:
    return L._read_fast(L.NLIRecord, path, ("qid", "round"))


def _strict(model: Any, path: Path) -> list[Any]:
    """The pydantic path alone (what the readers fall back to)."""
    out: list[Any] = []
    L._read_into(out, {}, model, path, ("qid",) if model is L.QuestionLog else ("qid", "round"))
    return out


def _write(path: Path, records: list[Any], struct: Any, case: Case | None = None) -> Path:
    if case is not None and case.raw_bytes is not None:
        path.write_bytes(case.raw_bytes)
        return path
    data = b"".join(_line(r, struct) + b"\n" for r in records)
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
        if case is not None and case.truncate:
            data = data[: len(data) - 12]
    path.write_bytes(data)
    return path


def test_canonical_valid_files_are_accepted(tmp_path: Path) -> None:
    """The positive control: without it, declining every case below would prove nothing."""
    logs = [GOOD, make_log([["A", "B", "C"], ["A", "A", "B"]], qid="q1", doc_ids=[["d1"], None])]
    lp = _write(tmp_path / "logs.jsonl", logs, L.QuestionLogStruct)
    nli = []
    for d in logs:
        log = L.QuestionLog.model_validate(d)
        for rnd in log.rounds:
            voters = [i for i, c in enumerate(rnd.candidates) if c.answer == L.modal_answer(rnd)]
            nli.append(make_nli([f"claim {i}." for i in voters], candidates=voters, qid=log.qid, round=rnd.round,
                                dataset=log.dataset, backbone=log.backbone))
    np_ = _write(tmp_path / "nli.jsonl.gz", nli, L.NLIRecordStruct)
    assert _fast_logs(lp) is not None and _fast_nli(np_) is not None
    got = L.read_logs(lp), L.read_nli(np_)
    assert type(got[0][0]) is L.QuestionLog and type(got[1][0]) is L.NLIRecord
    strict_logs = _strict(L.QuestionLog, lp)
    strict_nli = _strict(L.NLIRecord, np_)
    assert type(strict_logs[0]) is L.QuestionLog and got[0] == strict_logs
    assert _csv(F.feature_table(*got)) == _csv(F.feature_table(strict_logs, strict_nli))


LOG_CASES = [c for c in CASES if c.reader in ("logs", "nli")]


@pytest.mark.parametrize("case", LOG_CASES, ids=lambda c: c.name)
def test_every_malformed_case_is_declined_and_named(tmp_path: Path, case: Case) -> None:
    if case.reader == "logs":
        path = _write(tmp_path / case.filename, case.lines, L.QuestionLogStruct, case)
        assert _fast_logs(path) is None
        with pytest.raises(L.LogFormatError) as info:
            L.read_logs(path)
    else:
        logs = case.logs if case.logs is not None else [GOOD]
        lp = _write(tmp_path / "logs.jsonl", logs, L.QuestionLogStruct)
        if case.logs is not None:
            assert _fast_logs(lp) is not None  # the logs alone are fine
        path = _write(tmp_path / case.filename, case.lines, L.NLIRecordStruct, case)
        if case.logs is None:  # a fault of the NLI file itself (the cross-file ones are checked after reading)
            assert _fast_nli(path) is None
        with pytest.raises(L.LogFormatError) as info:
            L.read_nli(path, logs=L.read_logs(lp) if case.logs is not None else None)
    err = info.value
    assert (Path(err.path).name, err.line, err.field) == (case.filename, case.line, case.field)
    assert case.reason in err.reason, str(err)


def _csv(df: pd.DataFrame) -> bytes:
    buf = io.StringIO()
    df.to_csv(buf, float_format="%.17g")
    return buf.getvalue().encode()


def test_release_cell_is_read_fast_with_the_strict_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROBEGUARD_CACHE", "0")
    cell = load_release(RELEASE, verify=False).cell("medqa", role="augment")
    fast = _fast_logs(cell.file("logs")), _fast_nli(cell.file("nli"))
    assert fast[0] is not None and fast[1] is not None, "files written by write_jsonl must take the fast path"
    assert cell.logs == fast[0] and cell.nli == fast[1]
    strict = _strict(L.QuestionLog, cell.file("logs")), _strict(L.NLIRecord, cell.file("nli"))
    assert fast[0] == strict[0]
    assert _csv(cell.features()) == _csv(F.feature_table(*strict))


def test_pilot_marker_is_read_fast_when_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DESIGN 2.1's optional ``probe_pilot`` (the MedQA / Qwen3-8B cell carries it on every line)
    takes the fast path as the last field; anywhere else, or not a boolean, it is read strictly."""
    monkeypatch.setenv("PROBEGUARD_CACHE", "0")
    cell = load_release(RELEASE, verify=False).cell("medqa", "Qwen/Qwen3-8B")
    first = json.loads(gzip.decompress(cell.file("logs").read_bytes()).split(b"\n")[0])
    assert list(first)[-1] == "probe_pilot"
    fast = _fast_logs(cell.file("logs")), _fast_nli(cell.file("nli"))
    assert fast[0] is not None and fast[1] is not None and fast[0] == _strict(L.QuestionLog, cell.file("logs"))
    assert _csv(F.feature_table(*fast)) == _csv(F.feature_table(_strict(L.QuestionLog, cell.file("logs")), cell.nli))
    moved = {"probe_pilot": True, **{k: v for k, v in GOOD.items() if k != "probe_pilot"}}
    for bad in (json.dumps(moved, separators=(",", ":")), _line({**GOOD, "probe_pilot": "yes"}, L.QuestionLogStruct)):
        path = _write(tmp_path / "logs.jsonl", [bad], L.QuestionLogStruct)
        assert _fast_logs(path) is None
    ok = _write(tmp_path / "ok.jsonl", [{**GOOD, "probe_pilot": False}], L.QuestionLogStruct)
    assert _fast_logs(ok) is not None and L.read_logs(ok)[0].probe_pilot is False


def _release_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "rel"
    shutil.copytree(RELEASE, dst)
    return dst


@pytest.mark.parametrize("defect", ["duplicate_key", "answer_not_option", "nli_not_square", "extra_field"])
def test_cell_features_errors_are_the_strict_readers(defect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A malformed or unusual file in a release: ``Cell.features()`` raises (or returns) what the strict path does."""
    monkeypatch.setenv("PROBEGUARD_CACHE", "0")
    rel = _release_copy(tmp_path)
    cell = load_release(rel, verify=False).cell("medqa", role="augment")
    kind = "nli" if defect == "nli_not_square" else "logs"
    path = cell.file(kind)
    with gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb") as fh:
        lines = fh.read().split(b"\n")
    rec = json.loads(lines[2])
    if defect == "duplicate_key":
        lines[2] = lines[2].replace(b'"gold":', b'"gold":"A","gold":', 1)
    elif defect == "answer_not_option":
        rec["rounds"][0]["candidates"][0]["answer"] = "Z"
        lines[2] = json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode()
    elif defect == "nli_not_square":
        rec["entailment"][0] = rec["entailment"][0][:-1]
        lines[2] = json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode()
    else:  # a valid extra field: declined by the fast reader, read strictly, same table
        rec["note"] = "kept"
        lines[2] = json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode()
    data = b"\n".join(lines)
    path.write_bytes(gzip.compress(data, mtime=0) if path.name.endswith(".gz") else data)
    assert (_fast_nli if kind == "nli" else _fast_logs)(path) is None
    fresh = load_release(rel, verify=False).cell("medqa", role="augment")
    if defect == "extra_field":
        assert _csv(fresh.features()) == _csv(F.feature_table(L.read_logs(cell.file("logs")), cell.nli))
        return
    reader = L.read_logs if kind == "logs" else (lambda p: L.read_nli(p, logs=L.read_logs(cell.file("logs"))))
    with pytest.raises(L.LogFormatError) as strict:
        reader(path)
    with pytest.raises(L.LogFormatError) as got:
        fresh.features()
    assert str(got.value) == str(strict.value)
    assert (got.value.line, got.value.field) == (strict.value.line, strict.value.field) == (3, strict.value.field)


SMALL_RELEASE = RELEASE.parent / "real-smollm2-135m-mmlu-med"


#: every logs / NLI file of the small real release (not in write_jsonl's spelling, e.g. fields beyond
#: DESIGN's: the models validate them) and of the simulated cell whose logs end with ``probe_pilot``
#: (read fast): (file, read fast)
_FILES = [*((p, False) for p in sorted(SMALL_RELEASE.rglob("*.jsonl.gz")) if p.name.startswith(("logs", "nli"))),
          (RELEASE / "medqa" / "qwen3-8b" / "logs.jsonl.gz", True), (RELEASE / "medqa" / "qwen3-8b" / "nli.jsonl.gz", True)]


@pytest.mark.parametrize(("src", "read_fast"), _FILES, ids=lambda p: "/".join(p.parts[-3:]) if isinstance(p, Path) else str(p))
def test_readers_return_the_models_as_validated(tmp_path: Path, src: Path, read_fast: bool) -> None:
    """DESIGN section 3: ``read_logs`` / ``read_nli`` return the models (read fast: built from the
    checked structs without re-validation), equal field for field, fields set and extra fields
    included, to ``Model.model_validate_json(line)``; write_jsonl gives back the file's bytes."""
    model, read, keys = ((L.NLIRecord, L.read_nli, ("qid", "round")) if src.name.startswith("nli")
                         else (L.QuestionLog, L.read_logs, ("qid",)))
    assert (L._read_fast(model, src, keys) is not None) is read_fast
    recs = read(src)
    lines = gzip.decompress(src.read_bytes()).splitlines()
    assert recs and len(recs) == len(lines)
    for rec, line in zip(recs, lines):
        want = model.model_validate_json(line)
        assert type(rec) is model and rec == want and rec.__dict__ == want.__dict__
        assert rec.model_fields_set == want.model_fields_set and rec.model_extra == want.model_extra
        assert rec.model_dump(exclude_unset=True) == want.model_dump(exclude_unset=True)
        for sub, sub_want in zip(getattr(rec, "rounds", []), getattr(want, "rounds", [])):
            assert type(sub) is L.Round and sub.model_fields_set == sub_want.model_fields_set
            assert all(type(c) is L.Candidate and c.model_fields_set == w.model_fields_set
                       for c, w in zip(sub.candidates, sub_want.candidates))
    out = L.write_jsonl(tmp_path / src.name, recs)
    assert gzip.decompress(out.read_bytes()) == gzip.decompress(src.read_bytes())


def test_fast_models_copy_and_dump_as_the_validated_ones() -> None:
    """The models read fast answer ``model_dump`` / ``model_copy`` / ``model_extra`` as the
    validated ones (the MedQA / Qwen3-8B cell ends every line with ``probe_pilot``, an extra field)."""
    cell = load_release(RELEASE, verify=False).cell("medqa", "Qwen/Qwen3-8B")
    assert _fast_logs(cell.file("logs")) is not None
    logs = L.read_logs(cell.file("logs"))
    strict = _strict(L.QuestionLog, cell.file("logs"))
    assert [x.model_dump(mode="json") for x in logs[:50]] == [x.model_dump(mode="json") for x in strict[:50]]
    assert logs[0].model_dump(exclude={"cost", "rounds"}) == strict[0].model_dump(exclude={"cost", "rounds"})
    assert logs[0].model_extra == strict[0].model_extra == {"probe_pilot": strict[0].probe_pilot}
    moved = logs[0].model_copy(update={"specialty": "dermatology"})
    assert moved.specialty == "dermatology" and logs[0].specialty != "dermatology" and moved != logs[0]
    assert L.json_line(logs[1]) == L.json_line(strict[1])
    cost = L.Cost(wall_s=1.5, completion_tokens=7)  # pipeline.real_release merges costs so
    assert L.json_line(logs[1].model_copy(update={"cost": cost})) == L.json_line(strict[1].model_copy(update={"cost": cost}))


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every location inside a parsed record (keys and list indices), the record itself excluded."""
    out: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        out.append((*at, k))
        out.extend(_paths(v, (*at, k)))
    return out


_JSON_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-3, 10), st.floats(-2.0, 2.0, allow_nan=False),
                       st.sampled_from(["", "A", "B", "Z", "AB", "d1", "x"]))
_JSON = st.recursive(_JSON_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                          st.dictionaries(st.sampled_from(["A", "B", "x"]), inner, max_size=2)),
                     max_leaves=4)
_BASES = {"logs": [make_log([["A", "B", "C"], ["A", "A", "B"]], qid="q1", doc_ids=[["d1"], None],
                            cost={"wall_s": 1.5, "completion_tokens": 3})],
          "nli": [make_nli(["a.", "b."], candidates=[0, 2], entailment=[[1.0, 0.25], [0.5, 1.0]])]}


def _like(old: Any) -> st.SearchStrategy[Any]:
    """A value of the same JSON type as ``old`` (most such changes keep the record valid)."""
    if isinstance(old, bool) or old is None:
        return st.sampled_from([True, False, None])
    if isinstance(old, int):
        return st.integers(-1, 9)
    if isinstance(old, float):
        return st.floats(-3.0, 3.0, allow_nan=False)
    if isinstance(old, str):
        return st.sampled_from(["A", "B", "C", "Z", "", "d1", "d2", "q1", "other text", "é"])
    return _JSON


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["logs", "nli"]), data=st.data(), value=_JSON, how=st.sampled_from(["any", "like", "delete"]))
def test_fast_read_accepts_only_what_the_models_accept(tmp_path: Path, kind: str, data: st.DataObject, value: Any,
                                                        how: str) -> None:
    """One random change anywhere in a canonical record (a value replaced by any JSON or by one of
    its own type, or a key or list item removed): whenever the fast read accepts the file, the
    models accept it with equal records; whenever the models refuse it, the fast read declines it."""
    model, struct, keys = ((L.QuestionLog, L.QuestionLogStruct, ("qid",)) if kind == "logs"
                           else (L.NLIRecord, L.NLIRecordStruct, ("qid", "round")))
    rec = json.loads(json.dumps(_BASES[kind][0]))
    where = data.draw(st.sampled_from(_paths(rec)))
    parent = rec
    for k in where[:-1]:
        parent = parent[k]
    if how == "delete":
        del parent[where[-1]]
    else:
        parent[where[-1]] = value if how == "any" else data.draw(_like(parent[where[-1]]))
    path = _write(tmp_path / f"{kind}.jsonl", [rec], struct)
    fast = L._read_fast(model, path, keys)
    try:
        strict = _strict(model, path)
    except L.LogFormatError:
        assert fast is None, (where, how, rec)
        return
    if fast is not None:
        assert fast == strict and [r.model_fields_set for r in fast] == [r.model_fields_set for r in strict]
        assert [L.json_line(r) for r in fast] == [L.json_line(r) for r in strict]
