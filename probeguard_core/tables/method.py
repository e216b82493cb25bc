"""The method's reference tables and appendices: Table 4, Table 9, Appendices A, D and E.

* :func:`table4`: the feature families of the process score (Table 4, Appendix B), read from
  the registry ``probeguard_core/data/features.yaml`` that :func:`features.feature_table` builds.
* :func:`table9`: the hyperparameters by pipeline stage (Table 9, Appendix L), from the one
  machine-readable source the pipeline reads (:func:`hyperparameter_source`), with the paper's
  values from ``data/paper/reported.csv`` beside them.
* :func:`appendix_a_prompts`: the prompt files the pipeline actually sends (Appendix A),
  ``probeguard_core/pipeline/prompts/<PROMPT_VERSION>/``.
* :func:`algorithm_lines`: Algorithms 1 and 2 (Appendix D), each line with the function that
  carries it out and a link to its source line.
* :func:`appendix_e_protocol` and :func:`violation_counts`: the certification protocol of
  Appendix E (constants as this project runs them) and the per-split violation counts of every
  Learn-then-Test arm beside the paper's "0 of 50".
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from probeguard_core import SEED
from probeguard_core.tables.protocols import CellLike

__all__ = [
    "ALGORITHMS", "PAPER_TABLE4", "AlgorithmLine", "algorithm_lines", "algorithms_markdown", "appendix_a_prompts",
    "appendix_e_protocol", "prompts_markdown", "hyperparameter_source", "source_link", "table4", "table9", "violation_counts",
]

_ROOT = Path(__file__).resolve().parents[2]

#: Table 4 as printed: family -> (what it measures, representative equations).
PAPER_TABLE4: dict[str, tuple[str, str, str]] = {
    "agreement": ("Agreement dynamics", "how fast and how stably the vote converges", "Eqs. (2), (7), (8)"),
    "distribution": ("Answer-distribution dynamics", "entropy and drift of the candidate answer distribution",
                     "Eq. (11)"),
    "minority": ("Minority dynamics", "whether dissent is persistent or transient", "Eq. (9)"),
    "rationale": ("Rationale signals", "mutual entailment among the reasons behind the votes", "Eq. (3)"),
    "retrieval": ("Retrieval dynamics", "whether deliberation still finds new evidence", "Eq. (10)"),
}


# --------------------------------------------------------------------------- Table 4
def table4(registry: str | Path | None = None) -> pd.DataFrame:
    """Table 4 (Appendix B) with this project's registry beside it: one row per family, in the
    paper's order, with the paper's ``family`` label, ``measures`` and ``representative``
    columns, and from ``features.yaml`` (:func:`features.load_registry`) the ``n_features`` of the
    family and their ``features`` (registry names, comma-separated). The paper's registry has 34
    features (§3.1); ``n_features`` sums to this registry's count."""
    from probeguard_core.features import load_registry

    specs = load_registry(registry)
    rows = []
    for fam, (label, measures, rep) in PAPER_TABLE4.items():
        names = [s.name for s in specs if s.family == fam]
        rows.append({"family": label, "key": fam, "measures": measures, "representative": rep,
                     "n_features": len(names), "features": ", ".join(names)})
    extra = sorted({s.family for s in specs} - set(PAPER_TABLE4))
    if extra:
        raise ValueError(f"registry: families {extra} are not in the paper's Table 4")
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- Table 9
#: (stage, parameter, reported.csv quantity or None, where this project sets it)
_TABLE9_ROWS: tuple[tuple[str, str, str | None, str], ...] = (
    ("Consensus generation", "Panel size N", "n_candidates", "pipeline.substrate.SubstrateConfig.n_candidates"),
    ("Consensus generation", "Maximum rounds T", "max_rounds", "pipeline.substrate.SubstrateConfig.max_rounds"),
    ("Consensus generation", "Candidate temperature", "candidate_temperature",
     "pipeline.substrate.SubstrateConfig.temperature"),
    ("Consensus generation", "Candidate max new tokens", "candidate_max_new_tokens",
     "pipeline.substrate.SubstrateConfig.max_new_tokens"),
    ("Consensus generation", "Query temperature (thinking mode)", "query_temperature",
     "pipeline.probe_run (greedy counter-queries, temperature 0)"),
    ("Retrieval", "BM25 k1", "bm25_k1", "pipeline.retrieval.K1"),
    ("Retrieval", "BM25 b", "bm25_b", "pipeline.retrieval.B"),
    ("Retrieval", "Candidates per query", "candidates_per_query", "pipeline.retrieval.CANDIDATES_PER_QUERY"),
    ("Retrieval", "Kept after reranking", "kept_after_reranking", "pipeline.retrieval.KEEP_PER_QUERY"),
    ("Retrieval", "Documents per round (at most)", "docs_per_round", "pipeline.retrieval.MAX_DOCS"),
    ("Rationale scoring and process score", "NLI input limit (tokens)", "nli_input_limit",
     "pipeline.nli_run.MAX_LENGTH"),
    ("Rationale scoring and process score", "Classifier", None, "scoring.make_pipeline('logistic')"),
    ("Rationale scoring and process score", "Cross-validation folds", "cv_folds", "scoring.process_score(n_splits)"),
    ("Rationale scoring and process score", "Random seed (all stages)", "seed", "probeguard_core.SEED"),
)


def _interim_hyperparameters() -> dict[str, Any]:
    """TEMPORARY source of Table 9 until ``probeguard_core/data/hyperparameters.yaml`` exists
    (issue 11: the pipeline's own machine-readable source, written by the pipeline's owners):
    the values are read from the constants and defaults the pipeline code uses today, so the page
    shows what would run, never a transcription of the paper."""
    from probeguard_core.pipeline import nli_run, retrieval
    from probeguard_core.pipeline.substrate import SubstrateConfig
    from probeguard_core.scoring import make_pipeline, process_score

    sub = SubstrateConfig(dataset="medqa", backbone="Qwen/Qwen3-8B")
    clf = make_pipeline("logistic").steps[-1][1]
    folds = inspect.signature(process_score).parameters["n_splits"].default
    return {
        "n_candidates": sub.n_candidates, "max_rounds": sub.max_rounds, "candidate_temperature": sub.temperature,
        "candidate_max_new_tokens": sub.max_new_tokens, "query_temperature": 0.0,
        "bm25_k1": retrieval.K1, "bm25_b": retrieval.B, "candidates_per_query": retrieval.CANDIDATES_PER_QUERY,
        "kept_after_reranking": retrieval.KEEP_PER_QUERY, "docs_per_round": retrieval.MAX_DOCS,
        "nli_input_limit": nli_run.MAX_LENGTH,
        "classifier": f"{type(clf).__name__}(C={clf.C}, max_iter={clf.max_iter})",  # scikit-learn's defaults (L2)
        "cv_folds": folds, "seed": SEED,
    }


#: Table 9 quantity (``data/paper/reported.csv``) -> its entry ``(group, name)`` in
#: ``probeguard_core/data/hyperparameters.yaml``, the pipeline's one source of these values.
_YAML_KEYS: dict[str, tuple[str, str]] = {
    "n_candidates": ("consensus_generation", "n_candidates"),
    "max_rounds": ("consensus_generation", "max_rounds"),
    "candidate_temperature": ("consensus_generation", "temperature"),
    "candidate_max_new_tokens": ("consensus_generation", "max_new_tokens"),
    "query_temperature": ("consensus_generation", "query_temperature"),
    "bm25_k1": ("retrieval", "bm25_k1"),
    "bm25_b": ("retrieval", "bm25_b"),
    "candidates_per_query": ("retrieval", "candidates_per_query"),
    "kept_after_reranking": ("retrieval", "keep_per_query"),
    "docs_per_round": ("retrieval", "max_docs"),
    "nli_input_limit": ("rationale_scoring", "nli_max_length"),
    "cv_folds": ("rationale_scoring", "cv_folds"),
    "seed": ("rationale_scoring", "seed"),
}


def hyperparameter_source() -> tuple[dict[str, Any], str]:
    """``(values, where)``: Table 9's values from ``probeguard_core/data/hyperparameters.yaml``
    (:mod:`probeguard_core.pipeline.hyperparameters`, which the pipeline's configs read their
    defaults from), keyed by the quantities of ``data/paper/reported.csv``; the classifier is
    described from :func:`probeguard_core.scoring.make_pipeline` itself."""
    from probeguard_core.pipeline.hyperparameters import HYPERPARAMETERS_FILE, hp

    values: dict[str, Any] = {q: hp(*key) for q, key in _YAML_KEYS.items()}
    values["classifier"] = _interim_hyperparameters()["classifier"]
    return values, f"probeguard_core/{HYPERPARAMETERS_FILE}"


def table9() -> pd.DataFrame:
    """Table 9 (Appendix L): ``stage, parameter, quantity, value`` (ours, from
    :func:`hyperparameter_source`), ``paper`` (``data/paper/reported.csv``, source ``Table 9``;
    the classifier is categorical: the paper prints "l2 logistic regression"), ``set_in``.
    ``attrs["source"]`` says where our values came from."""
    from probeguard_core.paper import reported

    values, where = hyperparameter_source()
    rep = reported(source="Table 9")
    paper = dict(zip(rep["quantity"], rep["value"]))
    rows = []
    for stage, label, quantity, set_in in _TABLE9_ROWS:
        key = quantity or "classifier"
        ours = values.get(key)
        rows.append({"stage": stage, "parameter": label, "quantity": key,
                     "value": "—" if ours is None else str(ours),
                     "paper": "ℓ2 logistic regression (scikit-learn default)" if quantity is None
                     else (f"{paper[quantity]:g}" if quantity in paper else "—"),
                     "set_in": set_in})
    out = pd.DataFrame(rows)
    out.attrs["source"] = where
    return out


# --------------------------------------------------------------------------- Appendix A
def appendix_a_prompts(version: str | None = None) -> pd.DataFrame:
    """The prompt files the pipeline sends (Appendix A): one row per template of
    ``probeguard_core/pipeline/prompts/<version>/`` (default: ``templates.PROMPT_VERSION``, the
    version the pipeline records in every record), with ``name``, ``role`` (system / user, from
    the file name), ``group`` (substrate, probe, self-report), ``ours`` (True for the two control
    arms the paper does not print), ``path`` (repository-relative) and ``text`` (verbatim)."""
    from probeguard_core.pipeline import templates as T

    version = version or T.PROMPT_VERSION
    rows = []
    for name in T.template_names(version):
        role = name.split("_", 1)[0]
        group = ("self-report" if any(k in name for k in ("self_report", "p_true", "verbalized"))
                 else "probe" if any(k in name for k in ("probe", "counter")) else "substrate")
        rows.append({"name": name, "role": role if role in ("system", "user") else "", "group": group,
                     "ours": name in ("user_probe_instruction_only", "user_probe_neutral"),
                     "path": f"probeguard_core/pipeline/prompts/{version}/{name}.txt",
                     "text": T.load_template(name, version)})
    order = {"substrate": 0, "probe": 1, "self-report": 2}
    out = pd.DataFrame(rows).sort_values(["group", "name"], key=lambda c: c.map(order) if c.name == "group" else c,
                                         kind="stable").reset_index(drop=True)
    out.attrs["version"] = version
    return out


# --------------------------------------------------------------------------- Appendix D
@dataclass(frozen=True)
class AlgorithmLine:
    """One line of Algorithm 1 or 2 (Appendix D) and the function that carries it out."""

    algorithm: int
    line: str
    text: str
    function: str  # dotted path below probeguard_core


#: Algorithms 1 and 2 as printed in the plain-text paper (LaTeX kept for MyST), line by line.
ALGORITHMS: tuple[AlgorithmLine, ...] = (
    AlgorithmLine(1, "in", r"question $x$ with unanimous first-round consensus $m^{\ast}$ ($a_{1}=1$); panel size "
                  r"$N$; retriever $\mathcal{R}$ of the substrate; query budget $k\leq 4$",
                  "pipeline.probe_run.probe_eligible"),
    AlgorithmLine(1, "1", r"$q_{1},\dots,q_{j}\leftarrow\mathsf{CounterQueries}(x,m^{\ast})$, $j\leq k$ "
                  r"(temperature 0, thinking mode)", "pipeline.probe_run._counter_query_prompt"),
    AlgorithmLine(1, "2", r"$D_{\mathrm{ch}}\leftarrow\mathcal{R}(q_{1},\dots,q_{j})$ (same BM25 + rerank stack, "
                  r"$\leq 8$ documents)", "pipeline.retrieval.Retriever.retrieve"),
    AlgorithmLine(1, "3-5", r"for $i=1$ to $N$: $\tilde{a}_{i}\leftarrow\mathsf{ReAnswer}(x,D_{\mathrm{ch}},m^{\ast})$"
                  r" (devil's-advocate instruction; revision licensed, not demanded)", "pipeline.probe_run._reanswer_prompt"),
    AlgorithmLine(1, "6-7", r"$\kappa\leftarrow|\{i:\tilde{a}_{i}=m^{\ast}\}|/N$; return $\kappa$",
                  "probe.keep_rate"),
    AlgorithmLine(2, "1-2", r"for each certified stratum $S$: $\mathcal{D}_{S}\leftarrow\{(x,y)\in"
                  r"\mathcal{D}_{\mathrm{cal}}:g(x)=S\}$", "certify.stratified_certify"),
    AlgorithmLine(2, "3-4", r"for $c\in\mathcal{C}$ in descending order: $\lambda_{c}\leftarrow$ score at the "
                  r"top-$c$ quantile of $\mathcal{D}_{S}$", "certify.ltt_test"),
    AlgorithmLine(2, "5", r"$n_{c}\leftarrow|\{x\in\mathcal{D}_{S}:s_{S}(x)>\lambda_{c}\}|$; $E_{c}\leftarrow$ "
                  r"errors among them", "certify._grid_stats"),
    AlgorithmLine(2, "6", r"$p_{c}\leftarrow\Pr[\mathrm{Bin}(n_{c},\alpha)\leq E_{c}]$ (Eq. 6)",
                  "certify.binomial_pvalue"),
    AlgorithmLine(2, "7-10", r"if $p_{c}\leq\delta/(|\mathcal{C}|\cdot|\{S_{1},S_{2}\}|)$: "
                  r"$\hat{\lambda}_{S}\leftarrow\lambda_{c}$; break", "certify.bonferroni_level"),
    AlgorithmLine(2, "11", r"if no rejection: $\hat{\lambda}_{S}\leftarrow$ abstain", "certify.ltt_threshold"),
    AlgorithmLine(2, "13", r"return $\{\hat{\lambda}_{S}\}$; answer $x\in S$ iff $s_{S}(x)>\hat{\lambda}_{S}$; "
                  r"$S_{3}$ abstains as a whole", "certify.Certificate.decide"),
)


@lru_cache(maxsize=1)
def _repository() -> tuple[str, str] | None:
    """``(url, branch)`` from ``_config.yml``'s ``repository`` (the one place the book names it)."""
    cfg = _ROOT / "_config.yml"
    if not cfg.is_file():
        return None
    repo = (yaml.safe_load(cfg.read_text(encoding="utf-8")) or {}).get("repository") or {}
    return (str(repo["url"]).rstrip("/"), str(repo.get("branch", "main"))) if repo.get("url") else None


def _resolve(dotted: str) -> Any:
    """``"certify.Certificate.decide"`` -> the object, importing ``probeguard_core.<module>``."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module("probeguard_core." + ".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ValueError(f"cannot resolve {dotted!r} under probeguard_core")


def source_link(dotted: str) -> tuple[str, int, str | None]:
    """``(repository-relative path, first line, URL or None)`` of a probeguard_core function."""
    obj = inspect.unwrap(_resolve(dotted))
    path = Path(inspect.getsourcefile(obj)).resolve()
    line = inspect.getsourcelines(obj)[1]
    rel = path.relative_to(_ROOT).as_posix()
    repo = _repository()
    return rel, line, (f"{repo[0]}/blob/{repo[1]}/{rel}#L{line}" if repo else None)


def algorithm_lines(algorithm: int | None = None) -> pd.DataFrame:
    """Appendix D: ``algorithm, line, text`` (LaTeX), ``function`` (``probeguard_core.<...>``),
    ``path``, ``source_line`` and ``url`` (its line in the repository named by ``_config.yml``);
    every function is resolved by import, so a renamed function fails here, not on the page."""
    rows = []
    for a in ALGORITHMS:
        if algorithm is not None and a.algorithm != algorithm:
            continue
        rel, line, url = source_link(a.function)
        rows.append({"algorithm": a.algorithm, "line": a.line, "text": a.text,
                     "function": f"probeguard_core.{a.function}", "path": rel, "source_line": line, "url": url})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- Appendix E
def appendix_e_protocol() -> pd.DataFrame:
    """The certification protocol of Appendix E as this project runs it (``certify`` defaults):
    ``quantity, ours, paper`` for the coverage grid, the error budget delta, the Bonferroni
    level, the alpha sweep, the number of splits, the split and the calibration seed."""
    from probeguard_core import certify as C

    sig = inspect.signature(C.repeated_splits).parameters
    grid = C.DEFAULT_GRID
    delta = sig["delta"].default
    rows = [
        ("coverage grid", f"{grid[0]:.2f} to {grid[-1]:.2f} in steps of {grid[1] - grid[0]:.2f} ({len(grid)} points)",
         "0.05 to 1.00 in steps of 0.05 (20 points)"),
        ("error budget δ", f"{delta:g}", "0.05"),
        ("Bonferroni level per test", f"δ / ({len(grid)} × 2) = {C.bonferroni_level(delta, len(grid), 2):.6g}",
         "δ / (|C| · 2)"),
        ("α sweep", ", ".join(f"{a:.2f}" for a in C.DEFAULT_ALPHAS), "0.05, 0.10, 0.15, 0.20"),
        ("calibration / test split", "even, random (certify.even_splits)", "even, random"),
        ("repeated splits", str(sig["n_splits"].default), "50"),
        ("seeds", f"split j uses seed {SEED} + j", "fixed seeds"),
    ]
    return pd.DataFrame(rows, columns=["quantity", "ours", "paper"])


def violation_counts(cell: CellLike, aug: CellLike | None = None, alphas: Any = None, n_splits: int = 50,
                     seed: int = SEED) -> pd.DataFrame:
    """Per-split violations of every Learn-then-Test arm of §4.4 on one cell (Appendix E: "0 of
    50 for every Learn-then-Test arm"): ``arm, stratum, alpha, violations, n_splits,
    n_certified`` from :func:`tables.certification.certification_arms` (the pooled naive arm is
    kept for contrast; it is not an LTT arm, ``ltt`` False). ``guaranteed`` marks the rows
    Theorem 1 bounds (global LTT on the pooled stream, the stratified arms per certified
    stratum); the paper's 0 (``data/paper/reported.csv``, Appendix E) is beside those."""
    from probeguard_core import certify as C
    from probeguard_core.paper import reported_value
    from probeguard_core.tables.certification import certification_arms, certification_inputs
    from probeguard_core.tables.scores import cell_scores

    alphas = list(C.DEFAULT_ALPHAS if alphas is None else alphas)
    inputs = certification_inputs([cell, *([aug] if aug is not None else [])])
    main, pool = inputs[inputs["cell"] == "main"], inputs[inputs["cell"] != "main"]
    process = cell_scores(cell, seed=seed)["process_score"]
    arms = certification_arms(main, process, alphas, n_splits=n_splits, seed=seed,
                              extra_cal=pool if len(pool) else None)
    arms = arms[arms["stratum"].isin(["S1", "S2", "all"])]
    paper0 = reported_value(source="Appendix E", quantity="violation_splits")
    out = arms[["arm", "stratum", "alpha", "violations", "n_splits", "n_certified"]].copy()
    out["ltt"] = out["arm"] != "naive_quantile"
    # what Theorem 1 bounds: the pooled stream for global LTT, each certified stratum for the
    # stratified arms (their other rows are kept for reading, without the paper's 0 beside them)
    out["guaranteed"] = ((out["arm"] == "global_ltt") & (out["stratum"] == "all")) | (
        out["arm"].str.startswith("stratified") & out["stratum"].isin(["S1", "S2"]))
    out["paper"] = [paper0 if g else float("nan") for g in out["guaranteed"]]
    return out.reset_index(drop=True)


# --------------------------------------------------------------------------- rendering (MyST)
def prompts_markdown(prompts: pd.DataFrame) -> str:
    """The prompts of :func:`appendix_a_prompts` as MyST Markdown: one heading per group, then per
    template its file, role and a verbatim block (a four-backtick fence, so the text is shown as is)."""
    titles = {"substrate": "Substrate prompts", "probe": "Probe prompts", "self-report": "Self-report elicitation prompts"}
    parts: list[str] = []
    for group, part in prompts.groupby("group", sort=False):
        parts.append(f"### {titles.get(group, group)}\n")
        for r in part.itertuples(index=False):
            mark = " — **ours** (the paper does not print this control-arm prompt)" if r.ours else ""
            parts.append(f"**`{r.name}`** ({r.role}; `{r.path}`){mark}\n\n````text\n{r.text}\n````\n")
    return "\n".join(parts)


def algorithms_markdown(lines: pd.DataFrame) -> str:
    """Algorithms 1 and 2 of :func:`algorithm_lines` as MyST Markdown tables: line, the paper's
    step (maths) and the function that carries it out, linked to its source line."""
    names = {1: "Algorithm 1: counter-evidence probe (§3.2)", 2: "Algorithm 2: stratified Learn-then-Test calibration (§3.3)"}
    parts: list[str] = []
    for alg, part in lines.groupby("algorithm", sort=True):
        parts.append(f"**{names.get(alg, f'Algorithm {alg}')}**\n\n| line | step | carried out by |\n|---|---|---|")
        for r in part.itertuples(index=False):
            where = f"`{r.function}`"
            loc = f"{r.path}:{r.source_line}"
            link = f"[{loc}]({r.url})" if r.url else f"`{loc}`"
            parts.append(f"| {r.line} | {r.text.replace('|', '∣')} | {where} ({link}) |")
        parts.append("")
    return "\n".join(parts)
