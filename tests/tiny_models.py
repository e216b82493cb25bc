"""Tiny random models for the pipeline tests (no download: everything is built here).

* a tiny Qwen3 causal LM (hidden 32, 2 layers) with a byte-level BPE tokenizer trained on
  generated sentences and a Qwen3-style chat template honouring ``enable_thinking``;
* a tiny DeBERTa-v2 sequence classifier with 3 labels whose ``id2label`` is NOT the usual
  MNLI order, proving that the entailment id is read from the config;
* a tiny cross-encoder (``BertForSequenceClassification``, ``num_labels=1``).

Each is saved with safetensors into a folder and must reload with ``HF_HUB_OFFLINE=1``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

WORDS = (
    "patient fever cough pain chest heart lung liver kidney blood pressure dose drug therapy "
    "insulin diabetes infection antibiotic virus bacteria answer option choice correct therefore "
    "thus hence most likely best diagnosis treatment acute chronic syndrome cell tumor renal "
    "cardiac hepatic neural muscle bone skin rash anemia iron vitamin deficiency true false "
    "query evidence document retrieval confidence the a of and is with in for to on by"
).split()

#: A small Qwen3-like chat template: empty think block when thinking is disabled.
QWEN3_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def sentences(n: int = 400, seed: int = 0) -> list[str]:
    """Generated training sentences (a few hundred) for the tokenizers."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(4, 14)
        words = [rng.choice(WORDS) for _ in range(k)]
        out.append(" ".join(words).capitalize() + rng.choice([".", "?", "!"]) + " <answer>" + rng.choice("ABCD") + "</answer> [Query 1]")
    return out


def chat_prompts(k: int) -> list[list[dict[str, str]]]:
    """``k`` short chat prompts of different lengths, for the tiny engines' tests."""
    return [[{"role": "system", "content": "Answer."}, {"role": "user", "content": f"question number {i} " * (i + 1)}]
            for i in range(k)]


def _bpe_tokenizer(specials: list[str], vocab_size: int = 400):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(sentences(), trainer=trainer)
    return tok


def _wordpiece_tokenizer():
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(sentences(), trainer=trainers.WordPieceTrainer(vocab_size=300, special_tokens=specials))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return tok


def build_tiny_qwen3(folder: str | Path, hidden_size: int = 32, head_dim: int = 8) -> Path:
    """Tiny random Qwen3 causal LM + chat-template tokenizer, saved as safetensors."""
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    folder = Path(folder)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    raw = _bpe_tokenizer(specials)
    # Qwen3's think markers are added tokens that are not "special" (they survive decoding)
    raw.add_tokens(["<think>", "</think>"])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    tok.chat_template = QWEN3_CHAT_TEMPLATE
    config = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        max_position_embeddings=4096,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)  # model construction only (test fixture), not the pipeline
    model = Qwen3ForCausalLM(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def _wordpiece_fast_tokenizer() -> Any:
    """The BERT-style fast tokenizer shared by the tiny NLI model and the tiny cross-encoder."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=_wordpiece_tokenizer(),
        cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]", unk_token="[UNK]", mask_token="[MASK]",
    )


def build_tiny_nli(folder: str | Path) -> Path:
    """Tiny random DeBERTa-v2 3-way classifier with a NON-default label order."""
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    folder = Path(folder)
    tok = _wordpiece_fast_tokenizer()
    id2label = {0: "NEUTRAL", 1: "ENTAILMENT", 2: "CONTRADICTION"}  # deliberately not MNLI's order
    config = DebertaV2Config(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=512, type_vocab_size=2,
        num_labels=3, id2label=id2label, label2id={v: k for k, v in id2label.items()},
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(1)
    model = DebertaV2ForSequenceClassification(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def build_tiny_cross_encoder(folder: str | Path) -> Path:
    """Tiny random BERT cross-encoder (one relevance logit)."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    folder = Path(folder)
    tok = _wordpiece_fast_tokenizer()
    config = BertConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=512, num_labels=1, pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(2)
    model = BertForSequenceClassification(config).eval()
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


TOPICS = ["anemia", "diabetes", "pneumonia", "hypertension", "renal failure", "hepatitis", "asthma", "migraine", "gout", "sepsis"]


def write_corpus(path: str | Path, n: int = 50) -> Path:
    """A MedCorp-shaped synthetic corpus of ``n`` snippets (``{"id","title","content"}``)."""
    path = Path(path)
    rng = random.Random(3)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            topic = TOPICS[i % len(TOPICS)]
            body = " ".join(rng.choice(WORDS) for _ in range(25))
            fh.write(json.dumps({"id": f"doc{i:03d}", "title": f"{topic.title()} note {i}", "content": f"{topic} {body}."}) + "\n")
    return path


def write_questions(path: str | Path, n: int = 5) -> Path:
    """MIRAGE ``benchmark.json``-shaped questions (one dataset key, questions keyed by id)."""
    path = Path(path)
    qs = {}
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        qs[f"q{i}"] = {
            "question": f"A patient presents with signs of {topic}. What is the best next step?",
            "options": {"A": "iron therapy", "B": "insulin", "C": "antibiotic", "D": "observation"},
            "answer": "ABCD"[i % 4],
        }
    path.write_text(json.dumps({"medqa": qs}, indent=1), encoding="utf-8")
    return path


def pipeline_env(root: Path) -> Any:
    """The parts the pipeline tests share, built under ``root`` (call with ``HF_HUB_OFFLINE=1``):
    ``qwen`` and ``ce`` model folders, a 50-document corpus indexed by ``probeguard index build``
    into ``root/index``, 5 questions (``questions_path``, ``questions``), ``index`` and a
    ``retriever`` re-ranking with the tiny cross-encoder."""
    from types import SimpleNamespace

    from probeguard_core.cli import main
    from probeguard_core.pipeline.retrieval import BM25Index, CrossEncoderReranker, Retriever
    from probeguard_core.questions import load_questions

    ns = SimpleNamespace(root=root)
    ns.qwen = build_tiny_qwen3(root / "qwen")
    ns.ce = build_tiny_cross_encoder(root / "ce")
    ns.corpus = write_corpus(root / "corpus.jsonl", 50)
    ns.questions_path = write_questions(root / "benchmark.json", 5)
    ns.questions = load_questions(ns.questions_path, dataset="medqa")
    if main(["index", "build", "--corpus", str(ns.corpus), "--out", str(root / "index")]) != 0:
        raise RuntimeError("probeguard index build failed")
    ns.index = BM25Index.load(root / "index")
    ns.retriever = Retriever(ns.index, CrossEncoderReranker(str(ns.ce)))
    return ns


# --------------------------------------------------------------------------------------------
# A scripted engine: deterministic, meaningful text, to exercise the non-null paths
# --------------------------------------------------------------------------------------------

class ScriptedEngine:
    """Implements the engine interface with scripted answers per question (by topic word).

    * q0 (anemia): unanimous ``A`` in round 1 (gold A: correct consensus);
    * q1 (diabetes): unanimous ``A`` in round 1 (gold B: wrong consensus);
    * q2 (pneumonia): split in round 1, unanimous ``C`` in round 2;
    * q3 (hypertension): split every round (never converges);
    * q4 (renal failure): no answer tag at all (null answers).
    Re-answers under the devil's-advocate prompt flip 2 of N on q1 only.
    Every call is recorded in ``calls`` (purpose, messages, seed).
    """

    name = "scripted"

    def __init__(self):
        self.calls: list[tuple[str, list, int]] = []

    @staticmethod
    def _topic(text: str) -> str:
        for t in TOPICS:
            if f"signs of {t}" in text:
                return t
        raise AssertionError("scripted engine: unknown question")

    def generate(self, prompts, *, n, temperature, max_new_tokens, seed, logprobs=20, enable_thinking=False):
        from probeguard_core.pipeline.engines import Generation

        seeds = [seed] * len(prompts) if isinstance(seed, int) else list(seed)
        out = []
        for msgs, s in zip(prompts, seeds):
            system, user = msgs[0]["content"], msgs[-1]["content"]
            rng = random.Random(s)
            topic = self._topic(user)
            if "dispute points" in system:
                purpose = "query"
                texts = [f"[Query 1] {topic} treatment\n[Query 2] {topic} diagnosis\n[Query 3] {topic} treatment"]
            elif "unanimously agreed" in system or "skeptical medical expert" in system:  # v1 / v2
                purpose = "counter_query"
                texts = [f"[Query 1] {topic} alternative\n[Query 2] fever cough"]
            elif "assess the proposed answer" in system or "careful medical assistant" in system:  # v1 / v2
                purpose = "self_report"
                tag = "conf" if "<conf></conf>" in system else "confidence"
                verbalized = "confidence" in user or "<conf>" in system
                texts = [f"I think <{tag}>80</{tag}>" if verbalized else "True"]
            else:
                purpose = "answer"
                later = "previous answers" in user
                devil = "devil" in user  # v1 "devil's advocate", v2 "devil’s\nadvocate"
                texts = []
                for i in range(n):
                    if topic == "anemia" or (topic == "diabetes" and not devil):
                        a = "A"
                    elif topic == "diabetes":
                        a = "B" if i < 2 else "A"
                    elif topic == "pneumonia":
                        a = "C" if later or i % 2 else "D"
                    elif topic == "hypertension":
                        a = "AB"[i % 2]
                    else:
                        a = None
                    word = rng.choice(["iron", "insulin", "fluids"])
                    body = f"The patient has {topic} and needs {word}. Therefore the best answer is {a}."
                    texts.append(body + (f" <answer>{a}</answer>" if a else " I cannot decide."))
            self.calls.append((purpose, [dict(m) for m in msgs], s))
            gens = []
            for i, text in enumerate(texts):
                k = 5
                lps = [-0.1 * (i + 1)] * k if logprobs else None
                ents = [0.5 + 0.1 * ((i * 7 + s) % 5)] * k if logprobs else None
                first = [(" True", -0.2), ("False", -1.8), ("true", -3.0)] if logprobs else None
                gens.append(Generation(text=text, n_tokens=k, token_logprobs=lps, token_entropies=ents,
                                       first_top_logprobs=first))
            out.append(gens)
        return out
