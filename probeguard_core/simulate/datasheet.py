"""Measure a release with the core and render the simulated release's DATASHEET.md.

:func:`parameter_rows` measures every rate input of ``params.yaml`` on a release cell through
the core definitions (``features.final_answer`` / ``is_correct`` / ``stratum``,
``probe.is_flipped``) and returns target beside measured with the binomial standard error;
``tests/test_release_params.py`` asserts agreement from the same rows.  :func:`orderings`
measures the paper's main orderings (Table 2, §4.3) with ``baselines``, ``features``,
``scoring`` and ``metrics``; nothing in the generator was tuned towards them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from probeguard_core.simulate import calibration as CA
from probeguard_core.simulate import params as P


def _rate(k: float, n: int) -> float:
    return k / n if n else math.nan


def parameter_rows(cell: Any, params: dict[str, Any], scale: float = 1.0) -> list[dict[str, Any]]:
    """Target vs measured for one release cell (a :class:`probeguard_core.release.Cell`) generated at ``scale``."""
    from probeguard_core.features import first_round_agreement, is_correct
    from probeguard_core.probe import is_flipped

    key = cell.path.relative_to(cell.release.path).as_posix()
    if key not in params["cells"]:
        raise ValueError(f"cell {key!r} is not in the parameter file")
    cp = params["cells"][key]
    base = P.v(cp["like"]) if "like" in cp else key
    bp = params["cells"][base]
    logs = cell.logs
    rows: list[dict[str, Any]] = []

    def add(name: str, target: float, measured: float, n: int, source: str, kind: str = "rate") -> None:
        se = math.sqrt(max(target * (1 - target), 0.0) / n) if (kind == "rate" and n) else math.nan
        rows.append({"cell": key, "parameter": name, "target": target, "measured": measured, "n": n, "se": se,
                     "kind": kind, "source": source})

    def src(node: dict[str, Any]) -> str:
        return node.get("source") or f"assumed: {node.get('assumed')}"

    unan = np.array([first_round_agreement(g) == 1.0 for g in logs])
    corr = np.array([is_correct(g) for g in logs])
    n = len(logs)
    add("n_questions", float(P.cell_size(key, params, scale)), float(n), n, src(cp["n_questions"]), kind="count")
    if cell.role == "augment":
        add("first_round_unanimity (pool is conditioned on it)", 1.0, float(unan.mean()), n, src(cp["like"]), kind="exact")
    else:
        add("first_round_unanimity", float(P.v(cp["first_round_unanimity"])), float(unan.mean()), n, src(cp["first_round_unanimity"]))
        add("overall_accuracy", float(P.v(cp["overall_accuracy"])), float(corr.mean()), n, src(cp["overall_accuracy"]))
    add("unanimous_error", float(P.v(bp["unanimous_error"])), float(1 - corr[unan].mean()), int(unan.sum()), src(bp["unanimous_error"]))
    if "error_by_round" in cp:
        from probeguard_core.features import converged

        T = np.array([len(g.rounds) for g in logs])
        conv = np.array([converged(g) for g in logs])
        for r, t in P.v(cp["error_by_round"]).items():
            m = conv & (T == int(r))
            add(f"error_by_round[{r}]", float(t), float(1 - corr[m].mean()) if m.any() else math.nan, int(m.sum()), src(cp["error_by_round"]))
    if cell.has("probe"):
        flips = CA.probe_targets(bp, params["cells"]["medqa/qwen3-8b"])
        by_q = {g.qid: c for g, c in zip(logs, corr)}
        for arm in P.ARMS:
            recs = cell.probe_by_arm(arm)
            if not recs:
                continue
            for label, want, idx in (("wrong", False, 0), ("right", True, 1)):
                sel = [is_flipped(r.reanswers, r.consensus) for r in recs if by_q[r.qid] == want]
                node = bp.get(arm) if arm != "counter_evidence" else bp[f"flip_{label}"]
                source = src(node) if node is not None else "Table 6 ratios x the cell's probe rates (assumed)"
                add(f"flip_{label}[{arm}]", flips[arm][idx], _rate(sum(sel), len(sel)), len(sel), source)
    if "substrate_wall_s_median" in cp:
        add("substrate_wall_s_median", float(P.v(cp["substrate_wall_s_median"])),
            float(np.median([g.cost.wall_s for g in logs])), n, src(cp["substrate_wall_s_median"]), kind="median")
        ce = cell.probe_by_arm("counter_evidence")
        add("probe_wall_s_median", float(P.v(cp["probe_wall_s_median"])), float(np.median([r.cost.wall_s for r in ce])),
            len(ce), src(cp["probe_wall_s_median"]), kind="median")
        add("probe_tokens_median", float(P.v(cp["probe_tokens_median"])),
            float(np.median([r.cost.completion_tokens for r in ce])), len(ce), src(cp["probe_tokens_median"]), kind="median")
    if "probe_pilot" in cp:  # DESIGN 2.1 probe_pilot (§5.2), drawn among the unanimous questions
        add("probe_pilot (questions marked)", float(P.v(cp["probe_pilot"])),
            float(sum(1 for g in logs if g.probe_pilot)), int(unan.sum()), src(cp["probe_pilot"]), kind="count")
    if cell.dataset == "medqa" and cell.role == "main":
        lab = [g for g in logs if g.specialty is not None]
        full = n == int(P.v(cp["n_questions"]))
        if full:
            add("n_specialty_labelled", float(P.v(params["specialties"]["n_labelled"])), float(len(lab)), n,
                src(params["specialties"]["n_labelled"]), kind="count")
        if key == "medqa/qwen3-8b" and full:
            add("n_unanimous_labelled", float(P.v(params["specialties"]["n_unanimous_labelled"])),
                float(sum(1 for g in lab if first_round_agreement(g) == 1.0)), len(lab),
                src(params["specialties"]["n_unanimous_labelled"]), kind="count")
            for s, row in params["specialties"]["table8"].items():
                m = np.array([g.specialty == s for g in logs]) & unan
                add(f"unanimous_error[{s}]", float(row["error"]), float(1 - corr[m].mean()) if m.any() else math.nan,
                    int(m.sum()), row["source"])
    if cell.has("self_report"):
        sr = cell.self_report
        add("self_report_coverage", 1.0, len(sr) / n, n, "Table 2 (elicited on every question)", kind="exact")
    return rows


def agrees(row: dict[str, Any], slack: float = 0.02) -> bool:
    """Within sampling error: rates |m - t| <= 3 SE + slack; counts within 10%; medians within 15%; exact equal."""
    t, m = row["target"], row["measured"]
    if isinstance(m, float) and math.isnan(m):
        return False
    if row["kind"] == "rate":
        return abs(m - t) <= 3 * row["se"] + slack
    if row["kind"] == "count":
        return abs(m - t) <= 0.1 * t
    if row["kind"] == "median":
        return abs(m - t) <= 0.15 * t
    return m == t


def orderings(cell: Any) -> dict[str, float]:
    """The paper's main orderings measured with the core on one main cell (no tuning towards them)."""
    from probeguard_core.baselines import signal_table
    from probeguard_core.features import feature_table
    from probeguard_core.metrics import auroc
    from probeguard_core.probe import is_flipped
    from probeguard_core.scoring import process_score, unanimous_layer_score

    st = signal_table(cell)
    y = st["correct"].to_numpy(bool)
    out = {
        "n": float(len(st)),
        "auroc_terminal_agreement": auroc(st["terminal_agreement"], y),
        "auroc_first_round_agreement": auroc(st["first_round_agreement"], y),
        "auroc_sequence_logprob": auroc(st["sequence_logprob"].fillna(st["sequence_logprob"].min()), y),
    }
    X = feature_table(cell.logs, cell.nli)
    out["auroc_process_score"] = auroc(process_score(X, y), y)
    layer = st[st["stratum"] == "S1"]
    yl = layer["correct"].to_numpy(bool)
    if 0 < yl.sum() < len(yl):
        ok = layer["rse"].notna()
        out["layer_auroc_rse"] = auroc(layer.loc[ok, "rse"], yl[ok.to_numpy()])
        out["layer_auroc_keep_rate"] = auroc(layer["keep_rate"], yl)
        comb = unanimous_layer_score(layer["keep_rate"].to_numpy(), layer["rse"].to_numpy())
        okc = ~np.isnan(comb)
        out["layer_auroc_keep_plus_rse"] = auroc(comb[okc], yl[okc])
        out["layer_auroc_sequence_logprob"] = auroc(layer["sequence_logprob"], yl)
    by_q = dict(zip(st.index, y))
    recs = cell.probe_by_arm("counter_evidence")
    fw = [is_flipped(r.reanswers, r.consensus) for r in recs if not by_q[r.qid]]
    fr = [is_flipped(r.reanswers, r.consensus) for r in recs if by_q[r.qid]]
    out["flip_wrong"] = _rate(sum(fw), len(fw))
    out["flip_right"] = _rate(sum(fr), len(fr))
    return out


def _fmt(x: float, nd: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def render_datasheet(root: str | Path, cells: list[str], params: dict[str, Any], scale: float) -> str:
    """DATASHEET.md for the release in ``root`` (measured from the written files)."""
    from probeguard_core.release import load_release

    rel = load_release(root, verify=False) if (Path(root) / "manifest.json").exists() else None
    cell_objs = []
    from probeguard_core.release import Cell, Release

    fake = rel or Release(path=Path(root), manifest={})
    for c in cells:
        _, dataset, backbone, role = P.cell_spec(c)
        cell_objs.append(Cell(fake, dataset, backbone, Path(root) / c, role))
    lines = [_HEAD.format(version=params["generator_version"], scale=scale)]
    lines.append("| cell | parameter | target | measured | n | within 3 SE + 0.02 | source |\n|---|---|---|---|---|---|---|")
    for cobj in cell_objs:
        for r in parameter_rows(cobj, params, scale):
            nd = 1 if r["kind"] in ("median", "count") else 3
            lines.append(f"| {r['cell']} | {r['parameter']} | {_fmt(r['target'], nd)} | {_fmt(r['measured'], nd)} | {r['n']} | "
                         f"{'yes' if agrees(r) else 'NO'} | {r['source']} |")
    lines.append(_ORDER_HEAD)
    lines.append("| cell | n | terminal agr. | first-round agr. | seq. log-prob | process score | layer: RSE | layer: keep rate | "
                 "layer: keep+RSE | layer: seq. log-prob | flip(wrong) | flip(right) |\n|---|" + "---|" * 11)
    verdicts = []
    for cobj in cell_objs:
        if cobj.role != "main":
            continue
        o = orderings(cobj)
        lines.append(f"| {cobj.path.relative_to(root).as_posix()} | {int(o['n'])} | {_fmt(o['auroc_terminal_agreement'])} | "
                     f"{_fmt(o['auroc_first_round_agreement'])} | {_fmt(o['auroc_sequence_logprob'])} | {_fmt(o['auroc_process_score'])} | "
                     f"{_fmt(o.get('layer_auroc_rse', math.nan))} | {_fmt(o.get('layer_auroc_keep_rate', math.nan))} | "
                     f"{_fmt(o.get('layer_auroc_keep_plus_rse', math.nan))} | {_fmt(o.get('layer_auroc_sequence_logprob', math.nan))} | "
                     f"{_fmt(o['flip_wrong'])} | {_fmt(o['flip_right'])} |")
        verdicts.append(o)
    if verdicts:
        k = len(verdicts)
        near = sum(abs(o["auroc_terminal_agreement"] - 0.5) <= 0.05 for o in verdicts)
        above = sum(o["auroc_process_score"] > o["auroc_first_round_agreement"] for o in verdicts)
        asym = sum(o["flip_wrong"] > o["flip_right"] for o in verdicts)
        inv = sum(o["auroc_sequence_logprob"] < 0.5 for o in verdicts)
        lines.append(_ORDER_TAIL.format(k=k, near=near, above=above, asym=asym, inv=inv))
    lines.append(_TAIL)
    return "\n".join(lines) + "\n"


_HEAD = """# Datasheet: simulated-v1 (SIMULATED data)

**Every file in this folder is simulated.** No language model was run. The release is
written by `probeguard_core.simulate` (generator version {version}, seed 42, scale {scale}) and
is regenerated bit for bit by `probeguard simulate --out data/simulated-v1`. Its manifest
says `"provenance": "simulated"`, and every book page built from it carries that banner.

## Why it exists

The book renders every table and figure of the paper from *raw artifacts* (DESIGN 2.1-2.4)
through the same core code that a real run would use. No real execution logs can be
obtained here, so this release stands in for them; the notebooks run unchanged on a real
release (see *Swapping in a real release*).

## What is simulated, and how

Cells: Qwen3-8B on MedQA (1,273 questions), MMLU-Pro medicine (818), MedMCQA (4,183) and
MedXpertQA (2,450); HuatuoGPT-o1-8B and Llama-3.1-8B-Instruct on MedQA and MMLU-Pro
medicine; an augmentation pool of 875 unanimous MedQA questions for Qwen3-8B (§4.4,
`medqa-augment/qwen3-8b`, role `augment`). Question texts, options and specialties are
shared by the backbones of a dataset; 899 MedQA questions carry one of Appendix I's
specialties (plus four small specialties that Table 8 omits).

Per question (`probeguard_core/simulate/model.py`):

1. a latent **state** -- knowledge-backed, shared misconception, genuinely uncertain -- and a
   **difficulty**; the state mixture is solved exactly from the cell's first-round unanimity
   and unanimous-layer error (and shifted per specialty by Table 8's relative error);
2. **round 1**: N = 8 votes (knowledge: each holds gold with probability 1 - d; misconception:
   each holds the tempting distractor; uncertain: Dirichlet vote shares); rare parse failures
   (null answers);
3. after a disagreement, **retrieval** of <= 8 documents (ids such as `pubmed_23912345`,
   `textbook_Harrison_123`) from the question's relevant pool, with queries as text; repeats
   rise as the pool saturates; new evidence points to gold with a state-dependent probability
   scaled by the share of *new* documents;
4. **instructed convergence** (App. A): next-round weights ~ (votes + 0.5)^2, the state's
   attractor and the evidence; candidates may keep their own vote; stop at unanimity or T = 8;
5. **rationales** (2-6 sentences, `<answer>X</answer>` tag): votes resting on knowledge cite
   the question's one mechanism in their concluding sentences (paraphrased); votes resting on
   a shared misconception draw a justification from a pool of distinct reasons;
6. **token counts, sequence log-probs, mean token entropies** from a length x per-token-NLL
   mechanism (harder questions and later rounds write longer completions; off-attractor votes
   and uncertain questions have a higher per-token NLL). `n_tokens` models the full
   completion; the stored rationale is a short abstract of it;
7. **probe** (all four arms, every unanimous first round): the challenge collapses a wrong
   consensus (a repairable misconception) or a right one with arm-specific probabilities solved
   from Table 6 / §4.3's flip rates; the counter-evidence and neutral arms share the question's
   documents (nested collapses);
8. **NLI cache** for round 1 and the last round: claims by `probeguard_core.claims.extract_claims`;
   the entailment stand-in reads the claims and scores a pair high (Beta(9, 1.6)) when both cite a
   common mechanism, low (Beta(1.4, 6)) otherwise, then shifts every pair of one question and
   round by one shared logit offset (N(0, 1)), since an NLI model's errors correlate within the
   claims of one question (the offset's size was fixed a priori, not fitted);
9. **self-reports** (Qwen3-8B, MedQA and MMLU-Pro medicine only): verbalized confidence mostly
   80-95, P(True); both only weakly related to the state; **cost** per question (wall seconds,
   completion tokens) of Appendix J's magnitude.

Every input is listed in `probeguard_core/simulate/params.yaml` with its value and its source in
the paper or the word *assumed* and a reason. Inputs are rates and sizes only: no AUROC, AURC,
certified coverage or other output metric is an input.

## Parameters: target vs measured

Measured on the files of this release with the core (`features`, `probe`); rates agree within
3 binomial standard errors + 0.02, counts within 10%, medians within 15%.

"""

_ORDER_HEAD = """
## How the paper's main orderings came out (measured, not tuned)

AUROC for predicting a correct final answer (higher = better), computed with
`baselines.signal_table`, `features.feature_table`, `scoring.process_score` (5-fold out-of-fold
logistic regression) and `metrics.auroc`; the layer columns are on the unanimous first-round
layer (§4.3); flip rates of the counter-evidence arm. Nothing in the generator was set by
looking at these numbers; they are what the mechanism produces.
"""

_ORDER_TAIL = """
Of {k} main cells: terminal agreement is within 0.05 of chance in {near}; the process score is
above first-round agreement in {above}; wrong consensus flips more often than right consensus
in {asym}; raw sequence log-probability is below chance (inverted) on the full stream in {inv}.
"""

_TAIL = """
## What this release can and cannot show

It **can** exercise every notebook, table and figure end to end on artifacts in the real
formats; show how the analyses behave at the paper's sample sizes and base rates; and let the
book's what-if chapter vary calibration size and base error rate
(`probeguard_core.simulate.simulate_unanimous_layer`).

It **cannot** confirm or refute any claim of the paper. The mechanisms (rationales diverging
under misconception, counter-evidence repairing misconceptions, convergence being instructed)
are *assumed* here, so any separation the signals achieve is a consequence of those
assumptions, not evidence for them. In particular the rationale signal is much cleaner here
than in the paper: mechanisms are discrete phrases that the NLI stand-in reads without error,
so RSE (and the process score, which contains it) separate the simulated states far more
sharply than the paper's RSE (0.587 AUROC on MedQA) -- read the simulated AUROCs as properties
of the assumed mechanism, not as estimates of the paper's. Texts are templates, not clinical reasoning; the NLI
matrix is a stand-in for a DeBERTa pass; costs are of the right magnitude only. Where the
paper does not print a rate (overall accuracies, most non-Qwen first-round unanimity, the
per-benchmark split of the 14.0-26.5% flip range), the value is an assumption marked as such.

## Swapping in a real release

Produce the same layout -- `data/<release>/<dataset>/<backbone-slug>/{logs,probe,nli,self_report}.jsonl.gz`
(DESIGN 2.1-2.4) -- with the GPU pipeline (`notebooks/pipeline`), write `manifest.json` with
`probeguard_core.release.write_manifest(..., provenance="real", extra={"pipeline_command": ...})`,
check it with `probeguard validate` and `probeguard_core.release.load_release`, and pass the
folder as the notebooks' `release` parameter. Nothing else changes.
"""
