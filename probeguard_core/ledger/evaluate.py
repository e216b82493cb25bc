"""Each claim of the registry computed on a release, with its 95 % interval (issue 22, point 2).

One evaluator per kind of claim (:data:`EVALUATORS`), never one per claim. Every quantity is
computed from the tables the book's pages compute it from (:func:`tables.scores.cell_scores`,
:func:`tables.unanimous.probe_arm_table`, :func:`tables.unanimous.hard_soft_scores`,
:func:`tables.certification.certification_inputs`, :func:`tables.method.violation_counts`,
:func:`scoring.process_score`), so a value in the ledger is the value on the page.

Intervals:

* AUROC / AURC / rate claims (§4.1-§4.3, §5.1, Table 7): percentile bootstrap over the cell's
  questions, :data:`N_BOOT` replicates from ``numpy.random.default_rng(SEED)`` (a fresh generator
  per claim and cell, so a row never depends on which rows came before); the same resampled
  questions for every score in a difference (paired); replicates where a class is absent are left out;
* Table 6's asymmetry differences: the page's own paired bootstrap (:func:`tables.unanimous.probe_arm_table`);
* certification (§4.4): the 2.5 and 97.5 percentiles of the quantity over the 50 calibration/test
  splits of Appendix E (the variability over calibration draws the paper's ± reports);
* the violation fraction (Appendix E): the exact Clopper-Pearson interval.

A claim a release cannot test (no cell, no probe or NLI records, a signal undefined for part of
the cell) raises :class:`Untestable` with the reason; :func:`evaluate_release` records it.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from probeguard_core import SEED
from probeguard_core import metrics as M
from probeguard_core.ledger.registry import Claim, load_claims
from probeguard_core.ledger.verdict import verdict
from probeguard_core.tables.protocols import ReleaseLike

__all__ = ["COLUMNS", "EVALUATORS", "LEDGER_CODE", "N_BOOT", "N_SPLITS", "Result", "Untestable", "evaluate_claim",
           "evaluate_release", "release_key"]

#: Bootstrap replicates of the question-level intervals.
N_BOOT: int = 1000
#: Calibration/test splits of the certification claims (Appendix E: 50).
N_SPLITS: int = 50

#: Columns of the ledger (``claims.csv``), in order.
COLUMNS: tuple[str, ...] = ("claim", "section", "page", "quote", "backbone", "dataset", "detail", "quantity", "n",
                            "value", "ci_low", "ci_high", "interval", "rule", "test", "threshold", "verdict",
                            "reason")


class Untestable(Exception):
    """The release lacks what a claim needs; the message says what."""


@dataclass(frozen=True)
class Result:
    """One evaluated quantity: ``value`` with its 95 % interval ``[lo, hi]``, over ``n`` units
    (questions, or split tests), the interval's method, and ``detail`` (e.g. the control arm)."""

    value: float
    lo: float
    hi: float
    n: int
    interval: str
    detail: str = ""


# --------------------------------------------------------------------------- resampling helpers
def _rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def _boot_index(n: int) -> NDArray[np.int64]:
    return _rng().integers(0, n, size=(N_BOOT, n))


def _interval(reps: NDArray[np.float64]) -> tuple[float, float]:
    ok = reps[np.isfinite(reps)]
    if not len(ok):
        return math.nan, math.nan
    lo, hi = np.percentile(ok, [2.5, 97.5])
    return float(lo), float(hi)


BOOT = f"bootstrap over questions ({N_BOOT} replicates, seed {SEED}), 95 % percentile"


# --------------------------------------------------------------------------- per-question inputs
def _cell(rel: ReleaseLike, b: str, d: str) -> Any:
    return rel.cell(d, b)


def _population(rel: ReleaseLike, b: str, d: str, stratum: str | None) -> pd.DataFrame:
    from probeguard_core.tables.scores import cell_scores

    sc = cell_scores(_cell(rel, b, d), seed=SEED)
    if stratum is not None:
        sc = sc[(sc["stratum"] == stratum).to_numpy()]
        if not len(sc):
            raise Untestable(f"the cell has no {stratum} question")
    return sc


def _defined(sc: pd.DataFrame, signal: str) -> NDArray[np.float64]:
    x = sc[signal].to_numpy(dtype=float)
    bad = int(np.isnan(x).sum())
    if bad:
        why = " (no counter-evidence probe records)" if signal in ("keep_rate", "rse_keep") else \
              " (no round-1 NLI records)" if signal == "rse" else \
              " (no self-report records)" if signal in ("verbalized_confidence", "p_true") else ""
        raise Untestable(f"{signal} is undefined for {bad} of {len(x)} questions{why}")
    return x


def _both_classes(y: NDArray[np.bool_]) -> None:
    if y.all() or not y.any():
        raise Untestable(f"all {len(y)} questions are {'correct' if y.all() else 'wrong'}: AUROC is undefined")


# --------------------------------------------------------------------------- the evaluators
def eval_auroc(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> list[Result]:
    """AUROC of ``params.signal`` (in ``params.stratum`` when given): Tables 2, 5, Figure 3."""
    sc = _population(rel, b, d, claim.params.get("stratum"))
    x, y = _defined(sc, claim.params["signal"]), sc["correct"].to_numpy(dtype=bool)
    _both_classes(y)
    idx = _boot_index(len(y))
    return [Result(M.auroc(x, y), *_interval(M.auroc_rows(x[idx], y[idx])), len(y), BOOT)]


def _margin(rel: ReleaseLike, claim: Claim, b: str, d: str, point: Callable[..., float],
            rows: Callable[..., NDArray[np.float64]], sign: float) -> list[Result]:
    sc = _population(rel, b, d, claim.params.get("stratum"))
    y = sc["correct"].to_numpy(dtype=bool)
    _both_classes(y)
    x = _defined(sc, claim.params["signal"])
    others = {o: sc[o].to_numpy(dtype=float) for o in claim.params["others"] if sc[o].notna().all()}
    if not others:
        raise Untestable(f"none of {', '.join(claim.params['others'])} is defined for every question")
    idx = _boot_index(len(y))
    yb = y[idx]
    best = max if sign > 0 else min
    value = sign * (point(x, y) - best(point(o, y) for o in others.values()))
    ref = np.stack([rows(o[idx], yb) for o in others.values()])
    with warnings.catch_warnings():  # a replicate with one class has no AUROC for any signal: left out
        warnings.simplefilter("ignore", RuntimeWarning)
        reps = sign * (rows(x[idx], yb) - (np.nanmax(ref, 0) if sign > 0 else np.nanmin(ref, 0)))
    detail = "vs " + (", ".join(others) if len(others) <= 2 else f"the best of {len(others)} other signals")
    return [Result(float(value), *_interval(reps), len(y), BOOT, detail)]


def eval_auroc_margin(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> list[Result]:
    """AUROC of ``params.signal`` minus the best AUROC of ``params.others`` defined on the cell
    (paired bootstrap): Table 2, Table 3, §4.3."""
    return _margin(rel, claim, b, d, M.auroc, M.auroc_rows, 1.0)


def eval_aurc_margin(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> list[Result]:
    """Lowest AURC of ``params.others`` minus the AURC of ``params.signal`` (positive: the signal
    has the lowest selective risk; paired bootstrap): Table 2."""
    return _margin(rel, claim, b, d, M.aurc, M.aurc_rows, -1.0)


def eval_round_error_rise(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> list[Result]:
    """Error rate of consensus concluding at the last round that has any minus at round 1
    (Figure 2 middle, :func:`tables.signals.concluding_round_table`'s rows)."""
    sc = _population(rel, b, d, None)
    conv = sc["converged"].to_numpy(dtype=bool)
    t = sc["t_stop"].to_numpy(dtype=int)
    err = ~sc["correct"].to_numpy(dtype=bool)
    last = int(t[conv].max()) if conv.any() else 0
    if last <= 1 or not (conv & (t == 1)).any():
        raise Untestable("no consensus concludes both at round 1 and at a later round")
    first_m, last_m = conv & (t == 1), conv & (t == last)
    value = float(err[last_m].mean() - err[first_m].mean())
    idx = _boot_index(len(err))
    e, m1, ml = err[idx], first_m[idx], last_m[idx]
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = (e & ml).sum(1) / ml.sum(1) - (e & m1).sum(1) / m1.sum(1)
    return [Result(value, *_interval(reps), int(len(err)), BOOT, f"round {last} vs round 1")]


def _flips(rel: ReleaseLike, b: str, d: str, arm: str) -> tuple[NDArray[np.bool_], NDArray[np.bool_]]:
    from probeguard_core.tables.scores import cell_probe_table, s1_correct

    cell = _cell(rel, b, d)
    pt = cell_probe_table(cell)
    if pt.empty or arm not in set(pt.index.get_level_values("arm")):
        raise Untestable(f"no probe records for the {arm} arm")
    pt = pt.xs(arm, level="arm")
    correct = s1_correct(cell)
    pt = pt[pt.index.isin(list(correct))]
    ok = np.array([correct[q] for q in pt.index], dtype=bool)
    return pt["flipped"].to_numpy(dtype=bool), ok


def eval_flip_asymmetry(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> list[Result]:
    """flip(wrong) - flip(right) of the unanimous layer under ``params.arm`` (Figure 3,
    :func:`tables.unanimous.flip_rates`' flips), bootstrap over the probed questions."""
    f, ok = _flips(rel, b, d, claim.params["arm"])
    if ok.all() or not ok.any():
        raise Untestable("the probed unanimous layer has no wrong or no correct consensus")
    value = float(f[~ok].mean() - f[ok].mean())
    idx = _boot_index(len(f))
    fb, wb = f[idx], ~ok[idx]
    with np.errstate(invalid="ignore", divide="ignore"):
        reps = (fb & wb).sum(1) / wb.sum(1) - (fb & ~wb).sum(1) / (~wb).sum(1)
    return [Result(value, *_interval(reps), int(len(f)), BOOT)]


def eval_arm_asymmetry(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> list[Result]:
    """Table 6: the probe's asymmetry minus each control arm's, with the page's paired bootstrap
    (:func:`tables.unanimous.probe_arm_table`, 2000 replicates, seed 42)."""
    from probeguard_core.tables.unanimous import probe_arm_table

    cell = _cell(rel, b, d)
    _flips(rel, b, d, "counter_evidence")
    out = []
    for arm in claim.params["controls"]:
        try:
            t = probe_arm_table(cell, controls=[arm], n_boot=2000, seed=SEED)
        except ValueError as exc:
            raise Untestable(str(exc)) from None
        t = t[t["arm"] == arm].set_index("quantity")
        if "asymmetry_diff" not in t.index:
            out.append(Result(math.nan, math.nan, math.nan, 0, "", f"vs {arm} (no probe records for this arm)"))
            continue
        out.append(Result(float(t.at["asymmetry_diff", "value"]), float(t.at["asymmetry_diff_ci_low", "value"]),
                          float(t.at["asymmetry_diff_ci_high", "value"]), int(t.at["asymmetry_diff", "n"]),
                          "paired bootstrap over questions (2000 replicates, seed 42, as Table 6's page)",
                          f"vs {arm}"))
    return out


def _split_frame(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> pd.DataFrame:
    """Per-split certification of ``params.arm`` (:func:`certify.repeated_splits`, 50 even splits,
    α = 0.05-0.20) on the §4.4 page's inputs; memoised in ``ctx`` for the run."""
    from probeguard_core import certify as C
    from probeguard_core.tables.certification import certification_inputs, uncertifiable
    from probeguard_core.tables.scores import cell_scores

    arm, pooled = claim.params["arm"], tuple(claim.params.get("pooled", ()))
    key = ("splits", b, d, arm, pooled)
    if key in ctx:
        return ctx[key]
    if pooled:
        lacking = [x for x in pooled if not rel.has_cell(x, b)]
        if lacking:
            raise Untestable(f"pooling needs a {b} cell for {', '.join(pooled)}; this release lacks {', '.join(lacking)}")
        cells = [rel.cell(x, b) for x in pooled]
    else:
        cells = [_cell(rel, b, d)]
    t = certification_inputs(cells)
    st, err = t["stratum"].to_numpy(dtype=str), t["error"].to_numpy(dtype=bool)
    kw = dict(alphas=C.DEFAULT_ALPHAS, n_splits=ctx.get("n_splits", N_SPLITS), seed=SEED)
    if arm in ("naive_quantile", "global_ltt"):
        fs = cell_scores(cells[0], seed=SEED)["process_score"].loc[t.index].to_numpy(dtype=float)
        df = C.repeated_splits(fs, err, st, method="naive" if arm == "naive_quantile" else "global", **kw)
    else:
        why = uncertifiable(t)
        if why:
            raise Untestable(why)
        df = C.repeated_splits(t["score"].to_numpy(dtype=float), err, st, **kw)
    ctx[key] = df
    return df


def eval_certification(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> list[Result]:
    """§4.4: ``params.statistic`` (coverage or realized risk) of ``params.arm`` in ``params.stratum``
    at ``params.alpha`` (``any``: the largest over α = 0.05-0.20, per split); value the mean over
    the splits (as the paper reports), interval their 2.5-97.5 percentiles."""
    df = _split_frame(rel, claim, b, d, ctx)
    p = claim.params
    df = df[df["stratum"] == p["stratum"]]
    if not len(df):
        raise Untestable(f"the release has no {p['stratum']} question here")
    stat = p["statistic"]
    if p["alpha"] == "any":
        per = df.groupby("split")[stat].max()
        what = "largest over α = 0.05-0.20"
    else:
        per = df[np.isclose(df["alpha"].to_numpy(dtype=float), float(p["alpha"]))].set_index("split")[stat]
        what = f"α = {float(p['alpha']):.2f}"
    per = per.dropna()
    if not len(per):
        raise Untestable(f"no split answers any question at {what}, so there is no realized risk")
    lo, hi = np.percentile(per.to_numpy(dtype=float), [2.5, 97.5])
    n = int(df["n_test"].iloc[0] * 2) if len(df) else 0
    return [Result(float(per.mean()), float(lo), float(hi), n,
                   f"2.5-97.5 percentiles over {len(per)} calibration/test splits (seed {SEED})", what)]


def eval_violations(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> list[Result]:
    """Appendix E: violations over every split test Theorem 1 bounds (:func:`tables.method.violation_counts`,
    rows ``guaranteed``), as a fraction with the exact Clopper-Pearson 95 % interval."""
    from statsmodels.stats.proportion import proportion_confint

    from probeguard_core.tables.method import violation_counts

    aug = rel.cell(d, b, role="augment") if rel.has_cell(d, b, role="augment") else None
    v = violation_counts(_cell(rel, b, d), aug, n_splits=ctx.get("n_splits", N_SPLITS), seed=SEED)
    v = v[v["guaranteed"]]
    k, n = int(v["violations"].sum()), int(v["n_splits"].sum())
    if not n:
        raise Untestable("no Learn-then-Test arm can run on this cell")
    lo, hi = proportion_confint(k, n, alpha=0.05, method="beta")
    arms = ", ".join(dict.fromkeys(v["arm"]))
    return [Result(k / n, float(lo), float(hi), n, "Clopper-Pearson exact 95 %", f"{k} of {n} split tests ({arms})")]


def _paired_auroc_diff(a: NDArray[np.float64], c: NDArray[np.float64], y: NDArray[np.bool_], detail: str) -> Result:
    _both_classes(y)
    idx = _boot_index(len(y))
    reps = M.auroc_rows(a[idx], y[idx]) - M.auroc_rows(c[idx], y[idx])
    return Result(float(M.auroc(a, y) - M.auroc(c, y)), *_interval(reps), int(len(y)), BOOT, detail)


def eval_hard_soft(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> list[Result]:
    """§5.1: AUROC of continuous RSE minus hard semantic entropy in the unanimous layer
    (:func:`tables.unanimous.hard_soft_scores`), paired bootstrap."""
    from probeguard_core.tables.unanimous import hard_soft_scores

    try:
        sc = hard_soft_scores(_cell(rel, b, d))
    except ValueError as exc:
        raise Untestable(str(exc)) from None
    if not len(sc):
        raise Untestable("no unanimous question has a round-1 NLI record")
    r, h = sc["rse"].to_numpy(dtype=float), sc["hard_se"].to_numpy(dtype=float)
    if np.isnan(r).any() or np.isnan(h).any():
        raise Untestable("RSE or hard SE is undefined for part of the layer")
    return [_paired_auroc_diff(r, h, sc["correct"].to_numpy(dtype=bool), "RSE vs hard SE")]


def eval_ablation(rel: ReleaseLike, claim: Claim, b: str, d: str, ctx: dict[Any, Any]) -> list[Result]:
    """Table 7: AUROC of the out-of-fold process score minus that without ``params.family``
    (:func:`scoring.process_score` as :func:`scoring.drop_family_ablation` fits it), paired bootstrap."""
    from probeguard_core.features import load_registry
    from probeguard_core.scoring import process_score
    from probeguard_core.tables.scores import cell_correct, cell_features

    cell = _cell(rel, b, d)
    X = cell_features(cell)
    y = cell_correct(cell, X.index)
    fam = claim.params["family"]
    family_of = {s.name: s.family for s in load_registry()}
    cols = [c for c in X.columns if family_of.get(c) != fam]
    if len(cols) == X.shape[1]:
        raise Untestable(f"the feature table has no {fam} feature")
    _both_classes(y)
    full = process_score(X, y, n_splits=5, seed=SEED).to_numpy(dtype=float)
    drop = process_score(X[cols], y, n_splits=5, seed=SEED).to_numpy(dtype=float)
    return [_paired_auroc_diff(full, drop, y, f"full vs without {fam}")]


#: One evaluator per claim kind (:data:`registry.KINDS`).
EVALUATORS: dict[str, Callable[[ReleaseLike, Claim, str, str, dict[Any, Any]], list[Result]]] = {
    "auroc": eval_auroc, "auroc_margin": eval_auroc_margin, "aurc_margin": eval_aurc_margin,
    "round_error_rise": eval_round_error_rise, "flip_asymmetry": eval_flip_asymmetry,
    "arm_asymmetry": eval_arm_asymmetry, "certification": eval_certification, "violations": eval_violations,
    "hard_soft": eval_hard_soft, "ablation": eval_ablation,
}


# --------------------------------------------------------------------------- cells and rows
def claim_cells(rel: ReleaseLike, claim: Claim) -> list[tuple[str, str, str | None]]:
    """``(backbone, dataset, reason)`` for each cell the claim is evaluated on, ``reason`` saying
    why the release cannot (no such cell) or None. ``primary`` / ``all`` backbones and the
    benchmarks are picked as the pages pick them (:mod:`tables.picking`: the claim's benchmarks the
    release has, then any benchmark the paper does not use); a backbone with none of them gets one
    untestable row per benchmark the claim names."""
    from probeguard_core.paper import DATASETS
    from probeguard_core.tables.picking import pick_backbone, pick_backbones, pick_datasets

    if claim.backbones == "primary":
        bbs = [pick_backbone(rel)]
    elif claim.backbones == "all":
        bbs = pick_backbones(rel)
    else:
        bbs = list(claim.backbones)
    out: list[tuple[str, str, str | None]] = []
    for b in bbs:
        if b not in rel.backbones:
            out.append((b, "", f"this release has no main cell for backbone {b}"))
            continue
        if claim.datasets == "all":
            out += [(b, d, None) for d in pick_datasets(rel, None, b)]
            continue
        if claim.datasets == ("pooled",):
            out.append((b, "pooled", None))
            continue
        want = list(claim.datasets)
        have = pick_datasets(rel, None, b, design=want)
        out += [(b, d, None) for d in have]
        if not have:
            out += [(b, d, f"this release has no {b} / {d} cell") for d in want if d in DATASETS]
    return out


def _row(claim: Claim, b: str, d: str, r: Result | None, reason: str | None, page: str) -> dict[str, Any]:
    value, lo, hi = (r.value, r.lo, r.hi) if r else (math.nan, math.nan, math.nan)
    v = verdict(value, lo, hi, claim.rule_test, claim.threshold)
    if v == "untestable" and not reason:
        reason = "the quantity or its interval is undefined on this cell"
    return {"claim": claim.id, "section": claim.section, "page": page, "quote": claim.quote, "backbone": b,
            "dataset": d, "detail": r.detail if r else "", "quantity": claim.quantity, "n": r.n if r else 0,
            "value": value, "ci_low": lo, "ci_high": hi, "interval": r.interval if r else "",
            "rule": claim.rule_text, "test": claim.rule_test, "threshold": claim.threshold, "verdict": v,
            "reason": reason or ""}


def evaluate_claim(rel: ReleaseLike, claim: Claim, ctx: dict[Any, Any] | None = None) -> list[dict[str, Any]]:
    """The ledger rows of one claim on a release: one per cell (and detail), each with its verdict."""
    ctx = {} if ctx is None else ctx
    rows = []
    for b, d, reason in claim_cells(rel, claim):
        if reason:
            rows.append(_row(claim, b, d, None, reason, claim.page))
            continue
        try:
            results = EVALUATORS[claim.kind](rel, claim, b, d, ctx)
        except Untestable as exc:
            rows.append(_row(claim, b, d, None, str(exc), claim.page))
            continue
        rows += [_row(claim, b, d, r, None if math.isfinite(r.value) else r.detail, claim.page) for r in results]
    return rows


def evaluate_release(rel: ReleaseLike, claims: Sequence[Claim] | None = None,
                     n_splits: int = N_SPLITS) -> pd.DataFrame:
    """Every claim of the registry (or ``claims``) on ``rel``: the ledger, columns :data:`COLUMNS`,
    in the registry's order; the certification claims over ``n_splits`` splits (Appendix E: 50)."""
    claims = load_claims() if claims is None else list(claims)
    ctx: dict[Any, Any] = {"n_splits": int(n_splits)}
    key = release_key(rel)
    rows = [r for c in claims for r in (evaluate_claim(rel, c, ctx) if key is None
                                        else _cached_claim(rel, c, ctx, key))]
    return pd.DataFrame(rows, columns=list(COLUMNS))


# --------------------------------------------------------------------------- once per release content
#: The code a claim's rows depend on: the ledger, and the tables and scores its evaluators read
#: (:data:`tables.scores.DERIVED_CODE`); a change to any of them invalidates every cached claim.
LEDGER_CODE: tuple[str, ...] = ("probeguard_core.ledger.evaluate", "probeguard_core.ledger.registry",
                                "probeguard_core.ledger.verdict", "probeguard_core.tables.unanimous",
                                "probeguard_core.tables.method", "probeguard_core.tables.picking",
                                "probeguard_core.tables.protocols", "probeguard_core.paper", "probeguard_core.certify")


def release_key(rel: Any) -> dict[str, Any] | None:
    """What a claim's rows on ``rel`` are keyed by in the artifact cache (:mod:`probeguard_core.cache`):
    the release's name, provenance and the sha256 of every file :func:`release.load_release`
    verified against the manifest. None (compute directly, cache nothing) for anything else: a
    release loaded without verification, or a release-like object (e.g. a subset of questions)."""
    verified = getattr(rel, "verified", None)
    manifest = getattr(rel, "manifest", None)
    if not isinstance(verified, dict) or not verified or not isinstance(manifest, dict):
        return None
    return {"release": str(manifest.get("name")), "provenance": str(manifest.get("provenance")),
            "files": dict(sorted(verified.items()))}


def _plain(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _cached_claim(rel: ReleaseLike, claim: Claim, ctx: dict[Any, Any], key: dict[str, Any]) -> list[dict[str, Any]]:
    """:func:`evaluate_claim`, once per content of the release, definition of the claim, number of
    splits and code (:func:`cache.cached_json`): every page that shows the claim, the ledger page
    and ``probeguard claims`` reuse the same rows. A cached row equals a computed one exactly
    (JSON keeps every float's digits, NaN included)."""
    from dataclasses import asdict

    from probeguard_core import cache
    from probeguard_core import features as F
    from probeguard_core.tables.scores import DERIVED_CODE

    key_doc = {**key, "claim": asdict(claim), "feature_registry": cache.file_sha256(F._default_registry_path()), "n_splits": ctx["n_splits"], "n_boot": N_BOOT,
               "numpy": np.__version__, "code": cache.code_fingerprint(*DERIVED_CODE, *LEDGER_CODE)}
    return cache.cached_json("ledger-claim", key_doc, lambda: evaluate_claim(rel, claim, ctx),
                             lambda rows: [{k: _plain(v) for k, v in r.items()} for r in rows],
                             lambda rows: [dict(r) for r in rows])
