"""The question bank of a dataset, shared by its backbones (the stems, options, gold answer,
tempting distractor, specialty label of Appendix I and the mechanisms a rationale may cite).

:func:`make_question` draws question ``index`` of a dataset from its own random stream, so a
scaled cell is a prefix of the full one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from probeguard_core.simulate import text as TX
from probeguard_core.simulate.draws import Draws
from probeguard_core.simulate.params import rng_for, v

__all__ = ["Question", "labelled_indices", "make_question", "specialty_table"]


@dataclass
class Question:
    qid: str
    index: int
    question: str
    options: dict[str, str]
    gold: str
    distractor: str  # the tempting wrong option (the misconception's attractor)
    specialty: str | None
    findings: list[str]
    gold_mech: tuple[int, int]
    side_mechs: list[tuple[int, int]]
    reason_pool: list[tuple[int, int]]  # misconception reasons; [0] is the shared quick prior
    uncertain_pool: list[tuple[int, int]]

    @functools.cached_property
    def keys(self) -> list[str]:
        return list(self.options)

    @functools.cached_property
    def registry(self) -> list[tuple[int, int]]:
        return [self.gold_mech, *self.side_mechs, *self.reason_pool, *self.uncertain_pool]

    @functools.cached_property
    def distractors_of(self) -> dict[str, list[str]]:
        """Per letter, the first two other options' texts (a rationale's differential)."""
        return {x: [self.options[y] for y in self.options if y != x][:2] for x in self.options}


def specialty_table(params: dict[str, Any]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Specialty names, label frequencies (∝ unanimous counts, App. I) and relative misconception odds."""
    t8 = params["specialties"]["table8"]
    others = v(params["specialties"]["others"])
    names = list(t8) + list(others)
    n = np.array([t8[s]["n"] for s in t8] + [others[s] for s in others], dtype=float)
    err = np.array([t8[s]["error"] for s in t8] + [np.nan] * len(others))
    layer = float(np.nansum(n[: len(t8)] * err[: len(t8)]) / n[: len(t8)].sum())
    rel = np.where(np.isnan(err), 1.0, err / layer)
    return names, n / n.sum(), rel


def _distinct_mechs(rng: np.random.Generator, k: int) -> list[tuple[int, int]]:
    procs = rng.choice(len(TX.PROCESSES), size=k, replace=False)
    structs = rng.choice(len(TX.STRUCTURES), size=k, replace=False)
    return [(int(p), int(s)) for p, s in zip(procs, structs)]


def make_question(dataset: str, index: int, params: dict[str, Any], *, labelled: bool, pool: str = "") -> Question:
    """Question ``index`` of ``dataset`` (``pool`` separates the augmentation pool's bank)."""
    rng = rng_for("question", dataset + pool, index)
    dr = Draws(rng)
    n_opt = int(v(params["datasets"][dataset]["n_options"]))
    keys = [chr(ord("A") + i) for i in range(n_opt)]
    specialty = None
    spec_for_text = None
    if labelled:
        names, freq, _ = specialty_table(params)
        specialty = names[int(rng.choice(len(names), p=freq))]
        spec_for_text = specialty
    else:
        spec_for_text = list(TX.ALL_TERMS)[dr.below(len(TX.ALL_TERMS))]
    stem, findings = TX.question_text(dr, spec_for_text, dataset)
    opts = TX.option_texts(dr, spec_for_text, n_opt)
    gold_i = dr.below(n_opt)
    dis_i = (gold_i + 1 + dr.below(n_opt - 1)) % n_opt
    mechs = _distinct_mechs(rng, 3 + 8 + 4)
    n_reason = dr.between(v(params["mechanism"]["misconception_reason_pool"])[0], v(params["mechanism"]["misconception_reason_pool"])[1] + 1)
    n_unc = dr.between(v(params["mechanism"]["uncertain_reason_pool"])[0], v(params["mechanism"]["uncertain_reason_pool"])[1] + 1)
    qid = f"{dataset}{pool}-{index:05d}"
    return Question(
        qid=qid, index=index, question=stem, options=dict(zip(keys, opts)), gold=keys[gold_i],
        distractor=keys[dis_i], specialty=specialty, findings=findings, gold_mech=mechs[0],
        side_mechs=mechs[1:3], reason_pool=mechs[3 : 3 + n_reason], uncertain_pool=mechs[11 : 11 + n_unc],
    )


@functools.lru_cache(maxsize=8)
def labelled_indices(dataset: str, n_questions: int, n_labelled: int) -> frozenset[int]:
    """Which questions of the full bank carry a specialty label (a fixed random subset, App. I)."""
    perm = rng_for("labelled", dataset).permutation(n_questions)
    return frozenset(int(i) for i in perm[:n_labelled])
