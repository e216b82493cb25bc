"""Process score (section 3.1, App. H, L), unanimous-layer score (section 3.2), stratum scores (section 3.3)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from helpers import make_log, make_nli, make_probe
from sklearn.base import clone
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold

from probeguard_core.features import feature_table, load_registry
from probeguard_core.logs import LogFormatError, NLIRecord, ProbeRecord, QuestionLog
from probeguard_core.scoring import (
    _group_folds,
    drop_family_ablation,
    group_codes,
    make_pipeline,
    pooled_layer_scores,
    process_score,
    stratum_scores,
    unanimous_layer_score,
    unanimous_layer_score_frozen,
    zscore,
    zscore_apply,
    zscore_constants,
)


def L(rounds, **kw) -> QuestionLog:
    return QuestionLog.model_validate(make_log(rounds, **kw))


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {"a_first": rng.normal(size=n), "a_mean": rng.normal(size=n), "rse_first": rng.normal(size=n)},
        index=pd.Index([f"q{i}" for i in range(n)], name="qid"),
    )
    logit = 1.5 * X["a_first"] - X["rse_first"]
    y = rng.random(n) < 1 / (1 + np.exp(-logit.to_numpy()))
    X.iloc[rng.choice(n, 20, replace=False), 2] = np.nan  # missing rationale values
    return X, y


def test_process_score_deterministic_and_aligned():
    X, y = _data()
    a = process_score(X, y, seed=42)
    b = process_score(X, y, seed=42)
    pd.testing.assert_series_equal(a, b)
    assert a.index.equals(X.index) and a.name == "process_score"
    assert a.between(0, 1).all()
    assert roc_auc_score(y, a) > 0.7  # it learns the signal out of fold
    c = process_score(X, y, seed=7)
    assert not np.allclose(a, c)  # a different seed gives different folds


def test_process_score_equals_manual_group_kfold():
    X, y = _data()
    got = process_score(X, y, seed=42)
    cv = GroupKFold(n_splits=5, shuffle=True, random_state=42)
    want = np.empty(len(X))
    A = X.to_numpy(float)
    for tr, te in cv.split(A, y, groups=X.index.to_numpy()):
        est = clone(make_pipeline("logistic")).fit(A[tr], y[tr].astype(int))
        want[te] = est.predict_proba(A[te])[:, 1]
    np.testing.assert_allclose(got.to_numpy(), want, rtol=0, atol=0)


@pytest.mark.parametrize("seed", [0, 42])
def test_group_codes_give_the_same_folds_as_the_groups(seed):
    rng = np.random.default_rng(seed)
    g = np.array([f"medqa-{i:05d}" if i % 3 else f"pool-{i}" for i in rng.integers(0, 300, size=700)], dtype=object)
    A, y = np.zeros((len(g), 1)), rng.integers(0, 2, size=len(g))
    want = list(_group_folds(5, seed).split(A, y, groups=g))
    got = list(_group_folds(5, seed).split(A, y, groups=group_codes(g)))
    assert len(got) == len(want) == 5
    for (tr, te), (tr0, te0) in zip(got, want):
        np.testing.assert_array_equal(tr, tr0)
        np.testing.assert_array_equal(te, te0)


def test_out_of_fold_differs_from_in_sample():
    X, y = _data()
    oof = process_score(X, y).to_numpy()
    insample = make_pipeline().fit(X.to_numpy(float), y.astype(int)).predict_proba(X.to_numpy(float))[:, 1]
    assert not np.allclose(oof, insample)
    assert roc_auc_score(y, insample) >= roc_auc_score(y, oof)


def test_groups_prevent_leakage_between_duplicated_questions():
    # 40 questions each logged twice (e.g. two backbones); a one-hot question id predicts the
    # label only through leakage: grouped folds must keep it at chance.
    rng = np.random.default_rng(3)
    nq = 40
    qid = np.repeat(np.arange(nq), 2)
    y = np.repeat(rng.random(nq) < 0.5, 2)
    X = pd.DataFrame(np.eye(nq)[qid], columns=[f"f{i}" for i in range(nq)])
    grouped = roc_auc_score(y, process_score(X, y, groups=qid))
    leaky = roc_auc_score(y, process_score(X, y, groups=np.arange(2 * nq)))
    assert grouped < 0.5 + 1e-9 < 0.9 < leaky


def test_all_nan_column_in_a_training_fold_does_not_crash():
    X, y = _data()
    X["rse_mean"] = np.nan  # entirely missing
    X.loc[X.index[:30], "rse_max"] = 0.5  # present in a few rows only
    s = process_score(X, y)
    assert s.notna().all()


def test_gbt_swap_runs_and_is_deterministic():
    X, y = _data()
    a = process_score(X, y, model="gbt")
    pd.testing.assert_series_equal(a, process_score(X, y, model="gbt"))
    assert a.between(0, 1).all()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": "svm"}, "model must be"),
        ({"n_splits": 1}, "n_splits"),
        ({"n_splits": 500}, "exceeds the number of groups"),
        ({"groups": [1, 2]}, "groups"),
    ],
)
def test_process_score_bad_parameters(kwargs, match):
    X, y = _data()
    with pytest.raises(ValueError, match=match):
        process_score(X, y, **kwargs)


def test_process_score_bad_labels_and_features():
    X, y = _data()
    with pytest.raises(ValueError, match="correct: expected 120 labels"):
        process_score(X, y[:-1])
    with pytest.raises(ValueError, match="0/1"):
        process_score(X, np.where(y, 2, 0))
    bad = X.copy()
    bad.iloc[0, 0] = np.inf
    with pytest.raises(ValueError, match="infinite"):
        process_score(bad, y)
    with pytest.raises(ValueError, match="only one class"):
        process_score(X, np.ones(len(X), bool))


# ------------------------------------------------------------------ unanimous-layer score

def test_unanimous_layer_score_hand_worked():
    z = math.sqrt(1.5)  # (1 - 0.5) / std([1, .5, 0]) with ddof = 0
    s = unanimous_layer_score([1.0, 0.5, 0.0], [0.9, 0.5, 0.1])
    np.testing.assert_allclose(s, [2 * z, 0.0, -2 * z])
    s2 = unanimous_layer_score([1.0, 0.5, 0.0], [0.1, 0.5, 0.9])
    np.testing.assert_allclose(s2, [0.0, 0.0, 0.0], atol=1e-12)


def test_unanimous_layer_score_missing_and_constant():
    s = unanimous_layer_score([1.0, 0.0, np.nan, 0.5], [0.2, 0.4, 0.3, np.nan])
    # kappa z over {1, 0} -> +-1; rse z over {0.2, 0.4} -> -+1
    np.testing.assert_allclose(s[:2], [0.0, 0.0], atol=1e-12)
    assert np.isnan(s[2]) and np.isnan(s[3])
    np.testing.assert_allclose(zscore([1, 1, 1]), [0, 0, 0])  # constant -> 0
    assert np.isnan(zscore([np.nan])).all()


def test_frozen_constants_reproduce_layer_standardization():
    k = np.array([1.0, 0.5, np.nan, 0.0, 0.75])
    r = np.array([0.9, 0.1, 0.3, np.nan, 0.5])
    np.testing.assert_array_equal(zscore_apply(k, **zscore_constants(k)), zscore(k))
    consts = {"kappa": zscore_constants(k), "rse": zscore_constants(r)}
    np.testing.assert_array_equal(unanimous_layer_score_frozen(k, r, consts), unanimous_layer_score(k, r))
    # new questions are scored on the calibration scale
    new = unanimous_layer_score_frozen(np.array([1.0]), np.array([0.9]), consts)
    assert new[0] == pytest.approx(zscore_apply([1.0], **consts["kappa"])[0] + zscore_apply([0.9], **consts["rse"])[0])
    assert zscore_constants([np.nan])["n"] == 0 and np.isnan(zscore_apply([1.0], **zscore_constants([np.nan]))).all()


def test_unanimous_layer_score_series():
    idx = pd.Index(["a", "b"], name="qid")
    s = unanimous_layer_score(pd.Series([1.0, 0.0], index=idx), pd.Series([0.0, 1.0], index=idx))
    assert isinstance(s, pd.Series) and s.index.equals(idx)
    with pytest.raises(ValueError, match="same index"):
        unanimous_layer_score(pd.Series([1.0], index=["a"]), pd.Series([1.0], index=["b"]))
    with pytest.raises(ValueError, match="equal length"):
        unanimous_layer_score([1.0, 2.0], [1.0])


# ------------------------------------------------------------------ stratum scores

def _cell():
    logs = [
        L([["A"] * 4], qid="u1", gold="A"),
        L([["B"] * 4], qid="u2", gold="A"),
        L([["C"] * 4], qid="u3", gold="C"),
        L([["A", "B", "A", "A"], ["A"] * 4], qid="s2", gold="A"),
        L([["A", "B", "A", "B"], ["A", "B", "B", "B"]], qid="s3", gold="B"),
    ]
    probe = [ProbeRecord.model_validate(make_probe(r, consensus=c, qid=q)) for q, c, r in [
        ("u1", "A", ["A", "A", "A", "A"]),
        ("u2", "B", ["A", "B", "A", "B"]),
        ("u3", "C", ["C", "C", "C", "A"]),
    ]]
    probe.append(ProbeRecord.model_validate(make_probe(["B"] * 4, consensus="A", qid="u1", arm="instruction_only")))
    m = lambda v: [[1, v], [v, 1]]  # noqa: E731
    nli = [NLIRecord.model_validate(make_nli(qid=q, entailment=m(v))) for q, v in [("u1", 0.9), ("u2", 0.1), ("u3", 0.5)]]
    return logs, probe, nli


def test_stratum_scores():
    logs, probe, nli = _cell()
    df = stratum_scores(logs, probe, nli)
    assert list(df.index) == ["u1", "u2", "u3", "s2", "s3"]
    assert list(df["stratum"]) == ["S1", "S1", "S1", "S2", "S3"]
    assert list(df["correct"]) == [True, False, True, True, True]
    np.testing.assert_allclose(df["kappa"].iloc[:3], [1.0, 0.5, 0.75])
    np.testing.assert_allclose(df["rse"].iloc[:3], [0.9, 0.1, 0.5])
    want = zscore([1.0, 0.5, 0.75]) + zscore([0.9, 0.1, 0.5])
    np.testing.assert_allclose(df["score"].iloc[:3], want)
    assert df.loc["s2", "score"] == pytest.approx(0.875)  # a-bar = (0.75 + 1) / 2
    assert math.isnan(df.loc["s3", "score"])
    # the other arm is selectable
    other = stratum_scores(logs, probe, nli, arm="instruction_only")
    assert other.loc["u1", "kappa"] == 0.0 and math.isnan(other.loc["u2", "kappa"])
    assert math.isnan(other.loc["u2", "score"])  # no probe record -> cannot be scored -> abstains


def test_stratum_scores_standardize_per_dataset():
    logs, probe, nli = _cell()
    extra = L([["A"] * 4], qid="x1", dataset="mmlu")
    df = stratum_scores([*logs, extra], probe, nli)
    assert math.isnan(df.loc["x1", "score"])  # no probe/NLI for it, and it does not shift medqa's z
    np.testing.assert_allclose(df["score"].iloc[:3], stratum_scores(logs, probe, nli)["score"].iloc[:3])


@pytest.mark.parametrize("layers", [None, ["main", "augment", "main", "main", "augment"], ["augment"] * 5])
def test_pooled_layer_scores_equal_one_layer(layers):
    logs, probe, nli = _cell()
    df = stratum_scores(logs, probe, nli, layers=layers)
    want = stratum_scores(logs, probe, nli)["score"].to_numpy()
    np.testing.assert_array_equal(pooled_layer_scores(df), want)  # bit for bit, NaN where abstaining
    if layers and len(set(layers)) > 1:
        assert not np.array_equal(df["score"].to_numpy()[:3], want[:3])  # the layers did split the z-scores


def test_stratum_scores_reject_inconsistent_probe():
    logs, _, nli = _cell()
    bad = [ProbeRecord.model_validate(make_probe(["A"] * 4, consensus="B", qid="u1"))]
    with pytest.raises(LogFormatError, match="consensus"):
        stratum_scores(logs, bad, nli)
    not_unanimous = [ProbeRecord.model_validate(make_probe(["A"] * 4, consensus="A", qid="s2"))]
    with pytest.raises(LogFormatError, match="not unanimous"):
        stratum_scores(logs, not_unanimous, nli)


# ------------------------------------------------------------------ drop-one-family ablation

def test_drop_family_ablation():
    rng = np.random.default_rng(5)
    logs = []
    for i in range(80):
        first = list(rng.choice(["A", "B"], size=4, p=[0.7, 0.3]))
        if len(set(first)) == 1:
            rounds = [first]
        else:
            rounds = [first, [first[0]] * 4]
        logs.append(L(rounds, qid=f"q{i}", gold=str(rng.choice(["A", "B"], p=[0.8, 0.2]))))
    X = feature_table(logs)
    y = np.array([log.gold == log.rounds[-1].candidates[0].answer for log in logs])
    tab = drop_family_ablation(X, y)
    assert list(tab.index) == ["none", *[f for f in ("agreement", "distribution", "minority", "rationale", "retrieval")]]
    assert tab.loc["none", "n_features"] == 34
    reg = load_registry()
    for fam in ("agreement", "rationale"):
        assert tab.loc[fam, "n_features"] == 34 - sum(s.family == fam for s in reg)
    assert tab["auroc"].between(0, 1).all()
    full = roc_auc_score(y, process_score(X, y))
    assert tab.loc["none", "auroc"] == pytest.approx(full)
    sub = drop_family_ablation(X[["a_first", "H_first"]], y)
    assert list(sub.index) == ["none", "agreement", "distribution"]
    with pytest.raises(ValueError, match="not a registry feature"):
        drop_family_ablation(X.assign(extra=1.0), y)
