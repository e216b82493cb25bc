"""Rationale semantic entropy (Eq. 3) and hard semantic entropy (section 5.1 ablation)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from probeguard_core.rse import (
    entailment_clusters,
    hard_se_score,
    hard_semantic_entropy,
    rationale_semantic_entropy,
)


def test_rse_hand_worked_three_claims():
    E = [[1.0, 0.8, 0.2], [0.6, 1.0, 0.9], [0.4, 0.7, 1.0]]
    # pairs: min(.8,.6)=.6, min(.2,.4)=.2, min(.9,.7)=.7
    assert rationale_semantic_entropy(E) == pytest.approx(0.5)


def test_rse_ignores_the_diagonal_and_uses_the_minimum():
    assert rationale_semantic_entropy([[0.0, 0.3], [0.9, 0.0]]) == pytest.approx(0.3)
    assert rationale_semantic_entropy(np.ones((8, 8))) == 1.0
    assert rationale_semantic_entropy(np.eye(8)) == 0.0


def test_rse_nan_below_two_claims():
    assert math.isnan(rationale_semantic_entropy([[1.0]]))
    assert math.isnan(rationale_semantic_entropy([]))


@pytest.mark.parametrize(
    ("E", "match"),
    [
        ([[1.0, 0.5]], "square"),
        ([[1.0, 0.5], [0.5]], "not a numeric matrix|square"),
        ([[1.0, 1.2], [0.5, 1.0]], r"E\[0\]\[1\] = 1.2"),
        ([[1.0, 0.2], [-0.1, 1.0]], r"E\[1\]\[0\]"),
        ([[1.0, float("nan")], [0.1, 1.0]], "non-finite"),
        ([["a", "b"], ["c", "d"]], "not a numeric matrix"),
    ],
)
def test_rse_validates(E, match):
    with pytest.raises(ValueError, match=match):
        rationale_semantic_entropy(E)
    with pytest.raises(ValueError, match=match):
        hard_semantic_entropy(E)


def test_hard_se_hand_worked():
    # 0,1 mutually entail; 2 with neither; 3 with 2
    E = np.full((4, 4), 0.1)
    np.fill_diagonal(E, 1.0)
    E[0, 1] = E[1, 0] = 0.9
    E[2, 3] = E[3, 2] = 0.7
    assert entailment_clusters(E) == [[0, 1], [2, 3]]
    assert hard_semantic_entropy(E) == pytest.approx(math.log(2))
    assert hard_se_score(E) == pytest.approx(-math.log(2))


def test_hard_se_requires_both_directions_strictly_above_threshold():
    E = [[1.0, 0.9], [0.5, 1.0]]  # 0.5 is not > 0.5
    assert entailment_clusters(E) == [[0], [1]]
    assert hard_semantic_entropy(E) == pytest.approx(math.log(2))
    assert entailment_clusters(E, threshold=0.4) == [[0, 1]]
    assert hard_semantic_entropy(E, threshold=0.4) == 0.0


def test_hard_se_greedy_compares_with_cluster_representative():
    # 1 entails 0 mutually; 2 entails 1 but not 0 (the representative): 2 opens a new cluster
    E = [[1, 0.9, 0.1], [0.9, 1, 0.9], [0.1, 0.9, 1]]
    assert entailment_clusters(E) == [[0, 1], [2]]


def test_hard_se_extremes_and_opposite_sign_to_rse():
    n = 8
    assert hard_semantic_entropy(np.ones((n, n))) == 0.0
    assert hard_semantic_entropy(np.eye(n)) == pytest.approx(math.log(n))
    assert rationale_semantic_entropy(np.ones((n, n))) > rationale_semantic_entropy(np.eye(n))
    assert hard_se_score(np.ones((n, n))) > hard_se_score(np.eye(n))
    assert math.isnan(hard_semantic_entropy([[1.0]]))


def test_hard_se_rejects_bad_threshold():
    with pytest.raises(ValueError, match="threshold"):
        hard_semantic_entropy(np.eye(2), threshold=1.5)


matrices = st.integers(2, 6).flatmap(
    lambda n: arrays(np.float64, (n, n), elements=st.floats(0, 1, allow_nan=False))
)


@settings(max_examples=60, deadline=None)
@given(matrices, st.randoms(use_true_random=False))
def test_rse_properties(E, rnd):
    n = E.shape[0]
    r = rationale_semantic_entropy(E)
    brute = sum(min(E[i, j], E[j, i]) for i, j in itertools.combinations(range(n), 2)) / math.comb(n, 2)
    assert r == pytest.approx(brute)
    assert 0.0 <= r <= 1.0
    assert rationale_semantic_entropy(E.T) == pytest.approx(r)  # symmetric in direction
    perm = list(range(n))
    rnd.shuffle(perm)
    assert rationale_semantic_entropy(E[np.ix_(perm, perm)]) == pytest.approx(r)  # claim order irrelevant
    h = hard_semantic_entropy(E)
    assert 0.0 <= h <= math.log(n) + 1e-12


def test_first_round_rse_reads_round_one_of_known_qids():
    from helpers import make_nli

    from probeguard_core.logs import NLIRecord
    from probeguard_core.rse import first_round_rse

    E = [[1.0, 0.8, 0.2], [0.6, 1.0, 0.4], [0.9, 0.1, 1.0]]
    recs = [NLIRecord.model_validate(make_nli(claims=["a", "b", "c"], entailment=E, qid="q1")),
            NLIRecord.model_validate(make_nli(claims=["a", "b"], entailment=[[1, 0], [0, 1]], qid="q1", round=2)),
            NLIRecord.model_validate(make_nli(qid="q7"))]
    # mean of min(E01,E10)=0.6, min(E02,E20)=0.2, min(E12,E21)=0.1
    assert first_round_rse(recs, ["q1", "q2"]) == {"q1": pytest.approx(0.3)}
    with pytest.raises(ValueError, match="duplicate record for qid='q1' round=1"):
        first_round_rse([recs[0], recs[0]], ["q1"])


def test_nli_scores_batch_equals_scalar_bit_for_bit() -> None:
    """The batched RSE / hard SE used by feature_table equals the scalar definitions to the last bit."""
    import numpy as np

    from probeguard_core.rse import hard_semantic_entropy, nli_scores, rationale_semantic_entropy

    rng = np.random.default_rng(42)
    mats = []
    for n in [0, 1, 2, 3, 5, 8, 8, 9, 12] * 20:
        m = rng.random((n, n)).round(int(rng.integers(1, 4)))  # rounding makes ties at the 0.5 threshold
        mats.append(m.tolist())
    rse, hse = nli_scores(mats)
    assert rse.tobytes() == np.array([rationale_semantic_entropy(m) for m in mats]).tobytes()
    assert hse.tobytes() == np.array([hard_semantic_entropy(m) for m in mats]).tobytes()


def test_nli_scores_rejects_what_the_scalar_rejects() -> None:
    import pytest

    from probeguard_core.rse import nli_scores

    for bad in ([[1.0, 1.5], [0.2, 1.0]], [[1.0, float("nan")], [0.2, 1.0]], [[1.0, 0.5], [0.5]]):
        with pytest.raises(ValueError):
            nli_scores([bad])
