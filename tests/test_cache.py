"""The artifact cache (probeguard_core.cache): same tables, invalidated by content, never pickle."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probeguard_core import cache
from probeguard_core import features as F
from probeguard_core.release import load_release

RELEASE = Path(__file__).resolve().parents[1] / "data" / "simulated-v1"


def _csv(df: pd.DataFrame) -> bytes:
    buf = io.StringIO()
    df.to_csv(buf, float_format="%.17g")
    return buf.getvalue().encode()


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PROBEGUARD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PROBEGUARD_CACHE", raising=False)
    return tmp_path / "cache"


def test_cell_features_equal_feature_table_cold_and_warm(cache_dir: Path) -> None:
    cell = load_release(RELEASE).cell("medqa", role="augment")
    direct = F.feature_table(cell.logs, cell.nli)
    cold = cell.features()
    assert len(list((cache_dir / "feature_table").glob("*.npz"))) == 1
    warm = load_release(RELEASE).cell("medqa", role="augment").features()  # a fresh release: from the cache
    for got in (cold, warm):
        pd.testing.assert_frame_equal(got, direct, check_exact=True)
        assert got.index.dtype == direct.index.dtype and list(got.columns) == list(direct.columns)
        assert _csv(got) == _csv(direct)


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"a": [0.1, np.nan, 3.0], "b": [1, 2, 3]}, index=pd.Index(["q1", "q2", "q3"], name="qid"))


def test_entry_is_keyed_by_source_content(cache_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "logs.jsonl"
    src.write_text("one\n")
    calls = []

    def build() -> pd.DataFrame:
        calls.append(1)
        return _frame()

    cache.cached_frame("t", [src], build)
    cache.cached_frame("t", [src], build)
    assert len(calls) == 1
    src.write_text("two\n")  # new content, new key
    cache.cached_frame("t", [src], build)
    assert len(calls) == 2
    cache.cached_frame("t", [src], build, params={"alpha": 0.1})  # new parameters, new key
    assert len(calls) == 3


def test_altered_entry_is_rebuilt_not_used(cache_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "logs.jsonl"
    src.write_text("x\n")
    cache.cached_frame("t", [src], _frame)
    (npz,) = (cache_dir / "t").glob("*.npz")
    data = bytearray(npz.read_bytes())
    data[-40] ^= 0xFF
    npz.write_bytes(bytes(data))
    marker = _frame().assign(a=[9.0, 9.0, 9.0])
    got = cache.cached_frame("t", [src], lambda: marker)
    pd.testing.assert_frame_equal(got, marker)  # rebuilt, the damaged entry was not served


def test_entries_load_without_pickle(cache_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "logs.jsonl"
    src.write_text("x\n")
    cache.cached_frame("t", [src], _frame)
    (npz,) = (cache_dir / "t").glob("*.npz")
    with np.load(npz, allow_pickle=False) as z:  # raises if anything needed pickle
        assert z["i0"].dtype.kind == "U"
    pd.testing.assert_frame_equal(cache.cached_frame("t", [src], _frame), _frame(), check_exact=True)


@pytest.mark.parametrize("frame", [
    pd.DataFrame({"s": ["a", np.nan]}, index=pd.Index(["q1", "q2"])),          # a missing string
    pd.DataFrame({"s": ["a", 1]}, index=pd.Index(["q1", "q2"])),               # mixed objects
    pd.DataFrame({"s": ["a", "b\0"]}, index=pd.Index(["q1", "q2"])),           # numpy would drop the NUL
    pd.DataFrame({"d": pd.to_datetime(["2026-01-01", "2026-01-02"])}),          # not a storable dtype
    pd.DataFrame({"x": [1.0, 2.0]}, index=pd.Index([3, 4])),                    # a numeric index
], ids=["nan-in-str", "mixed", "trailing-nul", "datetime", "int-index"])
def test_frames_it_cannot_store_exactly_are_rebuilt_every_time(cache_dir: Path, tmp_path: Path,
                                                              frame: pd.DataFrame) -> None:
    src = tmp_path / "logs.jsonl"
    src.write_text("x\n")
    calls = []
    for _ in range(2):
        got = cache.cached_frame("o", [src], lambda: calls.append(1) or frame)
        pd.testing.assert_frame_equal(got, frame)
    assert len(calls) == 2
    assert not list((cache_dir / "o").glob("*.npz"))


def _mixed() -> pd.DataFrame:
    """String (object and pandas ``str``), bool, int and float columns with NaN, a str index."""
    return pd.DataFrame({
        "stratum": pd.Series(["S1", "S2", ""], dtype="str"),
        "label": pd.Series(["a", "é ü", "c c"], dtype=object),
        "ok": np.array([True, False, True]),
        "n": np.array([3, 0, -2], dtype=np.int64),
        "x": [0.1, np.nan, 1e-300],
    }).set_index(pd.Index(["q1", "q2", "q3"], name="qid", dtype=object))


@pytest.mark.parametrize("shape", ["str-index", "multiindex", "range-index", "empty"])
def test_string_bool_and_index_shapes_round_trip_exactly(cache_dir: Path, tmp_path: Path, shape: str) -> None:
    src = tmp_path / "logs.jsonl"
    src.write_text("x\n")
    df = _mixed()
    if shape == "multiindex":
        df = df.assign(arm=["p", "p", "q"]).set_index("arm", append=True)
    elif shape == "range-index":
        df = df.reset_index()
    elif shape == "empty":
        df = df.iloc[:0]
    calls = []
    cold = cache.cached_frame("m", [src], lambda: calls.append(1) or df)
    warm = cache.cached_frame("m", [src], lambda: calls.append(1) or df)
    assert len(calls) == 1 and len(list((cache_dir / "m").glob("*.npz"))) == 1
    for got in (cold, warm):
        pd.testing.assert_frame_equal(got, df, check_exact=True, check_index_type=True)
        assert list(map(str, got.dtypes)) == list(map(str, df.dtypes))
        assert list(got.index.names) == list(df.index.names) and _csv(got) == _csv(df)


def test_two_processes_missing_one_entry_build_it_once(cache_dir: Path, tmp_path: Path) -> None:
    """The second asker waits on the entry's lock and reads the first one's entry (flock locks
    open files, so two threads with their own opens contend like two processes)."""
    import threading

    src = tmp_path / "logs.jsonl"
    src.write_text("x\n")
    started, release = threading.Event(), threading.Event()
    calls, got = [], {}

    def slow() -> pd.DataFrame:
        calls.append("slow")
        started.set()
        assert release.wait(10)
        return _frame()

    a = threading.Thread(target=lambda: got.setdefault("a", cache.cached_frame("t", [src], slow)))
    b = threading.Thread(target=lambda: got.setdefault("b", cache.cached_frame("t", [src], lambda: calls.append("b")
                                                                            or _frame())))
    a.start()
    assert started.wait(10)
    b.start()
    b.join(0.5)
    assert b.is_alive()  # waiting for the lock, not building
    release.set()
    a.join(10)
    b.join(10)
    assert calls == ["slow"]
    pd.testing.assert_frame_equal(got["b"], got["a"], check_exact=True)


def test_per_cell_tables_equal_their_direct_computation(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each table a release cell serves through the cache (cold, then warm in a fresh release)
    equals the one computed with the cache off, bit for bit."""
    from probeguard_core import tables as T
    builders = {"signals": T.cell_signals, "scores": T.cell_scores, "probe": T.cell_probe_table,
                "cost": T.cost_frame, "layer": T.layer_scores}
    monkeypatch.setenv("PROBEGUARD_CACHE", "0")
    direct = {k: f(load_release(RELEASE).cell("medqa", role="augment")) for k, f in builders.items()}
    monkeypatch.delenv("PROBEGUARD_CACHE")
    cold = {k: f(load_release(RELEASE).cell("medqa", role="augment")) for k, f in builders.items()}
    warm = {k: f(load_release(RELEASE).cell("medqa", role="augment")) for k, f in builders.items()}
    for name in ("signal_table", "cell_scores", "probe_table", "cost_frame", "feature_table"):
        assert len(list((cache_dir / name).glob("*.npz"))) == 1, name
    for k in builders:
        for got in (cold[k], warm[k]):
            pd.testing.assert_frame_equal(got, direct[k], check_exact=True, check_index_type=True)
            assert list(map(str, got.dtypes)) == list(map(str, direct[k].dtypes)) and _csv(got) == _csv(direct[k])


def test_tables_from_the_fast_records_equal_those_from_the_strict_readers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A release cell computes its tables from the records the strict readers give (the derived
    structs of :mod:`probeguard_core.logs`, their fast read); a cell holding the pydantic
    records of the same files (the readers' other path) computes the same tables, bit for bit."""
    from probeguard_core import logs as L
    from probeguard_core import tables as T

    monkeypatch.setenv("PROBEGUARD_CACHE", "0")
    fast = load_release(RELEASE).cell("medqa", role="augment")
    strict = load_release(RELEASE).cell("medqa", role="augment")
    for kind, model, keys in (("logs", L.QuestionLog, ("qid",)), ("nli", L.NLIRecord, ("qid", "round"))):
        records: list = []
        L._read_into(records, {}, model, strict.file(kind), keys)  # the pydantic path alone
        strict.__dict__[kind] = records
    assert type(strict.logs[0]) is L.QuestionLog and type(strict.nli[0]) is L.NLIRecord
    assert L._read_fast(L.QuestionLog, fast.file("logs"), ("qid",)) is not None  # the fast read, not the fallback
    assert type(fast.logs[0]) is L.QuestionLog and type(fast.nli[0]) is L.NLIRecord
    builders = {"signals": T.cell_signals, "scores": T.cell_scores, "cost": T.cost_frame, "features": lambda c: c.features(),
                "certification": lambda c: T.certification_inputs([c])}
    for name, f in builders.items():
        got, want = f(fast), f(strict)
        pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=True, obj=name)


def test_cache_off_builds_every_time(cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "logs.jsonl"
    src.write_text("x\n")
    monkeypatch.setenv("PROBEGUARD_CACHE", "0")
    cache.cached_frame("t", [src], _frame)
    assert not (cache_dir / "t").exists()


def test_a_wrapper_of_a_release_cell_is_not_served_the_cells_tables(cache_dir: Path) -> None:
    """A subset delegating attributes to its release cell (the difficulty page's pilot-excluded
    layer) computes its own tables; only an actual release Cell uses the cache."""
    from probeguard_core import tables as T
    from probeguard_core.tables.difficulty import _Subset

    cell = load_release(RELEASE).cell("medqa", role="augment")
    full = T.cell_signals(cell)
    keep = list(cell.logs)[: len(cell.logs) // 2]
    kq = {g.qid for g in keep}
    sub = _Subset(cell, keep, [r for r in (cell.probe or []) if r.qid in kq], [r for r in (cell.nli or []) if r.qid in kq])
    got = T.cell_signals(sub)
    assert list(got.index) == [g.qid for g in keep] and len(got) < len(full)
    assert len(list((cache_dir / "signal_table").glob("*.npz"))) == 1  # the subset stored nothing
