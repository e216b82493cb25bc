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
        assert z["index"].dtype.kind == "U"
    pd.testing.assert_frame_equal(cache.cached_frame("t", [src], _frame), _frame(), check_exact=True)


def test_cache_off_and_object_columns_always_build(cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "logs.jsonl"
    src.write_text("x\n")
    obj = pd.DataFrame({"s": ["a", "b"]}, index=pd.Index(["q1", "q2"]))
    cache.cached_frame("o", [src], lambda: obj)
    assert not (cache_dir / "o").exists() or not list((cache_dir / "o").glob("*.npz"))
    monkeypatch.setenv("PROBEGUARD_CACHE", "0")
    cache.cached_frame("t", [src], _frame)
    assert not (cache_dir / "t").exists()
