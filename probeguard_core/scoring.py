"""Scores for abstention: the process score, the unanimous-layer score and stratum scores.

* :func:`process_score` (section 3.1, Appendix H, Appendix L): out-of-fold probability of a
  correct final answer from the feature registry, one scikit-learn ``Pipeline``
  (median imputation with missingness indicators -> scikit-learn's default L2 logistic
  regression, the paper's Appendix L configuration; or this project's earlier variant with a
  ``StandardScaler`` and ``max_iter=1000``; or gradient-boosted trees) fitted inside each fold
  of a question-level ``GroupKFold``.  Every preprocessing statistic is learned on training
  folds only.
* :func:`unanimous_layer_score` (section 3.2): ``z(kappa) + z(RSE)``, standardized over the
  unanimous layer of one dataset (label-free).  :func:`stratum_scores` is the one place that
  decides which questions a z-score standardizes over: each ``(dataset, layer)`` group, so a
  release's main layer is never standardized together with an augmentation pool unless the
  caller puts both in one layer (the augmented arm of section 4.4 does, the plain arm does not).
* :func:`stratum_scores` (section 3.3, DESIGN 3): the score each stratum is certified on.
* :func:`drop_family_ablation` (section 5.1, Table 7): AUROC with one family removed.

Scores follow the project convention: higher = more confident the answer is correct.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # scikit-learn (about 1 s to import) is loaded by the functions that fit
    from sklearn.model_selection import GroupKFold, StratifiedGroupKFold
    from sklearn.pipeline import Pipeline

from probeguard_core import SEED
from probeguard_core.features import (
    FAMILIES,
    FeatureSpec,
    is_correct,
    load_registry,
    stratum,
    trajectory_agreement,
)
from probeguard_core.logs import NLIRecord, ProbeRecord, QuestionLog
from probeguard_core.probe import keep_rates
from probeguard_core.rse import first_round_rse

__all__ = [
    "MODELS",
    "drop_family_ablation",
    "make_pipeline",
    "pooled_layer_scores",
    "process_score",
    "stratum_scores",
    "unanimous_layer_score",
    "unanimous_layer_score_frozen",
    "zscore",
    "zscore_apply",
    "zscore_constants",
]

Model = Literal["logistic", "logistic_scaled", "gbt"]
#: The classifiers :func:`make_pipeline` builds; ``"logistic"`` is the paper's (Appendix L).
MODELS: tuple[str, ...] = ("logistic", "logistic_scaled", "gbt")


def make_pipeline(model: Model = "logistic", seed: int = SEED) -> Pipeline:
    """The process-score classifier (section 3.1, Appendix L, Table 9; Appendix H for ``"gbt"``).

    Every variant starts with ``SimpleImputer(median, add_indicator=True,
    keep_empty_features=True)`` (section 3.1: median imputation and missingness indicators
    inside the training folds), so a column entirely missing in a training fold is kept
    (imputed 0, indicator 1) instead of crashing or shifting columns.  Then:

    * ``"logistic"`` (default): ``LogisticRegression()`` with scikit-learn's defaults (L2,
      C = 1, lbfgs, ``max_iter=100``), the paper's "scikit-learn default configuration"
      (Appendix L).  On unscaled features lbfgs may stop at ``max_iter`` before converging;
      :func:`process_score` counts those folds instead of hiding them.
    * ``"logistic_scaled"``: this project's earlier variant, ``StandardScaler`` then
      ``LogisticRegression(max_iter=1000)`` (converges; shown as a row of Table 7).
    * ``"gbt"``: ``HistGradientBoostingClassifier(random_state=seed)`` (Appendix H's swap).
    """
    from sklearn.ensemble import HistGradientBoostingClassifier
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    imputer = SimpleImputer(strategy="median", add_indicator=True, keep_empty_features=True)
    if model == "logistic":
        return Pipeline([("impute", imputer), ("clf", LogisticRegression())])
    if model == "logistic_scaled":
        return Pipeline(
            [("impute", imputer), ("scale", StandardScaler()), ("clf", LogisticRegression(max_iter=1000))]
        )
    if model == "gbt":
        return Pipeline([("impute", imputer), ("clf", HistGradientBoostingClassifier(random_state=seed))])
    raise ValueError(f"model must be one of {list(MODELS)}, got {model!r}")


def _labels(correct: Sequence[bool] | np.ndarray | pd.Series, n: int, name: str = "correct") -> np.ndarray:
    y = np.asarray(correct)
    if y.shape != (n,):
        raise ValueError(f"{name}: expected {n} labels, got shape {y.shape}")
    if y.dtype == bool:
        return y.astype(int)
    if y.dtype.kind in "iuf":
        if y.dtype.kind == "f" and np.isnan(y).any():
            raise ValueError(f"{name}: contains NaN")
        if not np.isin(y, (0, 1)).all():
            raise ValueError(f"{name}: labels must be boolean or 0/1")
        return y.astype(int)
    raise ValueError(f"{name}: labels must be boolean or 0/1, got dtype {y.dtype}")


def _group_folds(n_splits: int, seed: int) -> GroupKFold | StratifiedGroupKFold:
    """Shuffled question-level folds: GroupKFold(shuffle=True) (scikit-learn >= 1.6), else
    StratifiedGroupKFold(shuffle=True) on older versions."""
    from sklearn.model_selection import GroupKFold, StratifiedGroupKFold

    try:
        return GroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    except TypeError:  # pragma: no cover - scikit-learn < 1.6
        return StratifiedGroupKFold(n_splits=n_splits, shuffle=True, random_state=seed)


def group_codes(groups: np.ndarray) -> np.ndarray:
    """Integer codes of ``groups`` in ``np.unique``'s sorted order: the folds of :func:`_group_folds`
    depend on the groups only through that order, so the codes give the same folds (tested) without
    scikit-learn's ``np.isin`` over an object array of qids, the slowest part of a fit loop."""
    return np.unique(groups, return_inverse=True)[1].reshape(-1)


def process_score(
    X: pd.DataFrame,
    correct: Sequence[bool] | np.ndarray | pd.Series,
    groups: Sequence[object] | np.ndarray | None = None,
    model: Model = "logistic",
    n_splits: int = 5,
    seed: int = SEED,
) -> pd.Series:
    """Out-of-fold P(correct) for every row of ``X`` (section 3.1, Appendix L).

    Folds are ``GroupKFold(n_splits, shuffle=True, random_state=seed)`` over ``groups``
    (default: ``X.index``, the qid, so a question never sits on both sides).  For each fold
    a fresh :func:`make_pipeline` is fitted on the training rows only and predicts the
    held-out rows; the result is a Series aligned to ``X.index`` named ``process_score``.
    Deterministic for a fixed seed.  ``result.attrs["not_converged_folds"]`` counts the folds
    whose solver stopped at ``max_iter`` (scikit-learn's ``ConvergenceWarning``, caught here so
    it is reported once per score rather than once per fold).
    """
    if not isinstance(X, pd.DataFrame):
        raise ValueError(f"X must be a pandas DataFrame, got {type(X).__name__}")
    if isinstance(n_splits, bool) or not isinstance(n_splits, int) or n_splits < 2:
        raise ValueError(f"n_splits must be an integer >= 2, got {n_splits!r}")
    try:
        A = X.to_numpy(dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"X: every column must be numeric ({exc})") from None
    if np.isinf(A).any():
        col = X.columns[np.isinf(A).any(axis=0)][0]
        raise ValueError(f"X: column {col!r} has infinite values")
    y = _labels(correct, len(X))
    g = np.asarray(X.index if groups is None else groups, dtype=object)
    if g.shape != (len(X),):
        raise ValueError(f"groups: expected {len(X)} group labels, got shape {g.shape}")
    n_groups = len(pd.unique(g))
    if n_groups < n_splits:
        raise ValueError(f"n_splits={n_splits} exceeds the number of groups ({n_groups})")
    from sklearn.base import clone
    from sklearn.exceptions import ConvergenceWarning

    from threadpoolctl import threadpool_limits

    template = make_pipeline(model, seed)  # imports the estimators, loading their BLAS / OpenMP libraries
    cv = _group_folds(n_splits, seed)
    out = np.full(len(X), np.nan)
    not_converged = 0
    # Many small fits: BLAS / OpenMP thread pools only add contention (one thread is ~20x faster on
    # a shared 2-core machine). The limit reaches only libraries already loaded, hence after make_pipeline.
    with threadpool_limits(limits=1):
        for k, (train, test) in enumerate(cv.split(A, y, groups=group_codes(g))):
            if len(np.unique(y[train])) < 2:
                raise ValueError(f"fold {k}: the training rows hold only one class; cannot fit a classifier")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                est = clone(template).fit(A[train], y[train])
            not_converged += any(issubclass(w.category, ConvergenceWarning) for w in caught)
            for w in caught:  # anything else is passed on unchanged
                if not issubclass(w.category, ConvergenceWarning):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            proba = est.predict_proba(A[test])
            out[test] = proba[:, list(est.classes_).index(1)]
    res = pd.Series(out, index=X.index, name="process_score")
    res.attrs["model"] = model
    res.attrs["not_converged_folds"] = int(not_converged)
    return res


def zscore(x: Sequence[float] | np.ndarray) -> np.ndarray:
    """(x - mean) / std over the non-missing entries (population std, ddof = 0).

    NaN stays NaN.  A constant signal (std 0) carries no ranking information and gets z = 0.
    """
    a = np.asarray(x, dtype=float)
    ok = ~np.isnan(a)
    z = np.full(a.shape, np.nan)
    if not ok.any():
        return z
    mu = a[ok].mean()
    sd = a[ok].std(ddof=0)
    z[ok] = 0.0 if sd == 0 else (a[ok] - mu) / sd
    return z


def unanimous_layer_score(
    kappa: Sequence[float] | np.ndarray | pd.Series, rse: Sequence[float] | np.ndarray | pd.Series
) -> np.ndarray | pd.Series:
    """z(kappa) + z(RSE) over the given unanimous layer (section 3.2; DESIGN 3).

    Pass all questions of one dataset's unanimous layer: the standardization is label-free
    and uses every question of the layer (each signal over the questions where it is
    defined; ddof = 0).  A question missing kappa or RSE gets NaN: it cannot be scored, so
    it cannot be certified and abstains.  Series in -> Series out (aligned on the index).
    """
    if isinstance(kappa, pd.Series) and isinstance(rse, pd.Series):
        if not kappa.index.equals(rse.index):
            raise ValueError("kappa and rse must share the same index")
        return pd.Series(zscore(kappa) + zscore(rse), index=kappa.index, name="unanimous_layer_score")
    k = np.asarray(kappa, dtype=float)
    r = np.asarray(rse, dtype=float)
    if k.shape != r.shape or k.ndim != 1:
        raise ValueError(f"kappa and rse must be 1-d of equal length, got {k.shape} and {r.shape}")
    return zscore(k) + zscore(r)


def stratum_scores(
    logs: Sequence[QuestionLog],
    probe_records: Iterable[ProbeRecord] | None = None,
    nli: Iterable[NLIRecord] | None = None,
    arm: str = "counter_evidence",
    layers: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per-question certification scores by stratum (section 3.3, DESIGN 3).

    Columns: ``dataset``, ``layer``, ``stratum`` (S1/S2/S3), ``score``, ``correct``, ``kappa``
    (keep rate of the ``arm`` probe; S1 only), ``rse`` (RSE of the round-1 NLI record, where
    present).  S1: :func:`unanimous_layer_score` standardized within each ``(dataset, layer)``
    unanimous layer; S2: trajectory-averaged agreement a-bar (Eq. 7); S3: NaN (always abstains).
    An S1 question without a probe record or a round-1 NLI record has score NaN (abstains).

    ``layers`` (one label per log, default one layer ``"main"``) is the single place where the
    standardization population is chosen (DESIGN 3: per dataset and per layer): the questions
    of an augmentation pool labelled as their own layer never move the z-scores of the main
    layer; label them like the main layer to standardize over the union (section 4.4's
    augmented arm).
    """
    logs = list(logs)
    if layers is None:
        layers = ["main"] * len(logs)
    layers = [str(x) for x in layers]
    if len(layers) != len(logs):
        raise ValueError(f"layers: expected {len(logs)} labels (one per log), got {len(layers)}")
    seen: set[str] = set()
    for i, log in enumerate(logs):
        if log.qid in seen:
            raise ValueError(f"logs[{i}]: duplicate qid {log.qid!r}")
        seen.add(log.qid)
    kappa = keep_rates(probe_records, logs, arm) if probe_records is not None else {}
    rse = first_round_rse(nli, seen)
    df = pd.DataFrame(
        {
            "dataset": [log.dataset for log in logs],
            "layer": layers,
            "stratum": [stratum(log) for log in logs],
            "score": np.nan,
            "correct": [is_correct(log) for log in logs],
            "kappa": [kappa.get(log.qid, math.nan) for log in logs],
            "rse": [rse.get(log.qid, math.nan) for log in logs],
        },
        index=pd.Index([log.qid for log in logs], name="qid", dtype=object),
    )
    df["score"] = df["score"].astype(float)
    s2 = (df["stratum"] == "S2").to_numpy()
    df.loc[s2, "score"] = [trajectory_agreement(log) for log, m in zip(logs, s2) if m]
    _score_unanimous_layers(df)
    return df


def _score_unanimous_layers(df: pd.DataFrame) -> None:
    """Set ``score`` of the S1 rows of a :func:`stratum_scores` frame, in place: z(kappa) + z(RSE)
    within each ``(dataset, layer)`` unanimous layer (the one place the population is grouped)."""
    for _, part in df[df["stratum"] == "S1"].groupby(["dataset", "layer"], sort=True):
        df.loc[part.index, "score"] = unanimous_layer_score(part["kappa"].to_numpy(), part["rse"].to_numpy())


def pooled_layer_scores(scores: pd.DataFrame) -> np.ndarray:
    """The ``score`` column of a :func:`stratum_scores` frame as if every log were in one layer
    (``layers=None``): each dataset's S1 standardized over the union of its layers (section 4.4's
    augmented arm), equal to recomputing ``stratum_scores`` without ``layers``, without re-reading
    the logs."""
    one = scores[["dataset", "stratum", "kappa", "rse", "score"]].assign(layer="main")
    if scores["layer"].nunique() > 1:
        _score_unanimous_layers(one)
    return one["score"].to_numpy()


def drop_family_ablation(
    X: pd.DataFrame,
    correct: Sequence[bool] | np.ndarray | pd.Series,
    registry: str | Path | Sequence[FeatureSpec] | None = None,
    groups: Sequence[object] | np.ndarray | None = None,
    model: Model = "logistic",
    n_splits: int = 5,
    seed: int = SEED,
) -> pd.DataFrame:
    """Drop-one-family ablation of the process score (section 5.1, Table 7).

    Rows: ``"none"`` (full feature set) and one per registry family present in ``X``
    (family order of the registry); columns ``n_features``, ``auroc`` (out-of-fold
    :func:`process_score` against ``correct``, ``sklearn.metrics.roc_auc_score``) and
    ``not_converged_folds``.
    Every column of ``X`` must be a registry feature.
    """
    from sklearn.metrics import roc_auc_score

    specs = registry if isinstance(registry, (tuple, list)) else load_registry(registry)
    family_of = {s.name: s.family for s in specs}
    unknown = [c for c in X.columns if c not in family_of]
    if unknown:
        raise ValueError(f"X: column {unknown[0]!r} is not a registry feature")
    y = _labels(correct, len(X))
    rows: dict[str, dict[str, float]] = {}
    for fam in (None, *FAMILIES):
        cols = [c for c in X.columns if family_of[c] != fam]
        if fam is not None and len(cols) == X.shape[1]:
            continue  # family absent from X: nothing to drop
        p = process_score(X[cols], y.astype(bool), groups=groups, model=model, n_splits=n_splits, seed=seed)
        rows["none" if fam is None else fam] = {"n_features": float(len(cols)), "auroc": float(roc_auc_score(y, p)),
                                                "not_converged_folds": float(p.attrs["not_converged_folds"])}
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.index.name = "dropped"
    return out.astype({"n_features": int, "not_converged_folds": int})


# --------------------------------------------------------------------------------------------
# Frozen standardization for deployment (added for probeguard_core.deploy / `probeguard apply`):
# the z constants of the calibration unanimous layer, reused verbatim on new logs.
# zscore_apply(x, **zscore_constants(x)) equals zscore(x) element for element.
# --------------------------------------------------------------------------------------------

def zscore_constants(x: Sequence[float] | np.ndarray) -> dict[str, float | int]:
    """``{"mean", "sd", "n"}`` of :func:`zscore` over the non-missing entries (ddof = 0).

    ``n = 0`` gives NaN mean and sd (nothing to standardize on).
    """
    a = np.asarray(x, dtype=float)
    ok = ~np.isnan(a)
    if not ok.any():
        return {"mean": math.nan, "sd": math.nan, "n": 0}
    return {"mean": float(a[ok].mean()), "sd": float(a[ok].std(ddof=0)), "n": int(ok.sum())}


def zscore_apply(x: Sequence[float] | np.ndarray, mean: float, sd: float, n: int | None = None) -> np.ndarray:
    """``(x - mean) / sd`` with frozen constants (same arithmetic as :func:`zscore`).

    NaN stays NaN; ``sd == 0`` gives z = 0 (as in :func:`zscore`); NaN constants give NaN.
    ``n`` is accepted so that ``zscore_apply(x, **zscore_constants(y))`` works.
    """
    a = np.asarray(x, dtype=float)
    ok = ~np.isnan(a)
    z = np.full(a.shape, np.nan)
    if not ok.any() or math.isnan(mean) or math.isnan(sd):
        return z
    z[ok] = 0.0 if sd == 0 else (a[ok] - mean) / sd
    return z


def unanimous_layer_score_frozen(
    kappa: Sequence[float] | np.ndarray, rse: Sequence[float] | np.ndarray, constants: dict[str, dict[str, float]]
) -> np.ndarray:
    """z(kappa) + z(RSE) with frozen constants ``{"kappa": {...}, "rse": {...}}`` (section 3.2).

    With the constants of :func:`zscore_constants` over the same layer this equals
    :func:`unanimous_layer_score`; on new logs it scores them on the calibration scale.
    """
    k = np.asarray(kappa, dtype=float)
    r = np.asarray(rse, dtype=float)
    if k.shape != r.shape or k.ndim != 1:
        raise ValueError(f"kappa and rse must be 1-d of equal length, got {k.shape} and {r.shape}")
    return zscore_apply(k, **constants["kappa"]) + zscore_apply(r, **constants["rse"])
