"""One value per quantity (issue 11 §4): the same certificate gives the same number on every page.

The §4.4 page certifies the MedQA unanimous layer with the in-domain augmentation pool loaded
beside it; Table 8 (Appendix I) and the what-if page load the main layer alone.  The plain
stratified arm must not be standardized over the pool (DESIGN 3: per dataset and per layer), so
its S1 coverage at alpha = 0.15 is one number on all three pages; only the augmented arm may
standardize over main + pool.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from probeguard_core import tables as T
from probeguard_core.release import load_release

RELEASE = Path(__file__).resolve().parents[1] / "data" / "simulated-v1"
BACKBONE = "Qwen/Qwen3-8B"
N_SPLITS = 4
ALPHA = 0.15


@pytest.fixture(scope="module")
def cells():
    rel = load_release(RELEASE)
    if not rel.has_cell("medqa", BACKBONE, role="augment"):
        pytest.skip("the release has no MedQA augmentation cell")
    return rel.cell("medqa", BACKBONE), rel.cell("medqa", BACKBONE, role="augment")


def test_main_layer_scores_do_not_depend_on_the_pool(cells):
    main_cell, aug_cell = cells
    alone = T.certification_inputs([main_cell])
    both = T.certification_inputs([main_cell, aug_cell])
    main = both[both["cell"] == "main"]
    np.testing.assert_array_equal(alone["score"].to_numpy(), main["score"].to_numpy())
    # the augmented arm's score does standardize over main + pool, so it differs on S1
    s1 = (main["stratum"] == "S1").to_numpy()
    assert not np.allclose(main["score"].to_numpy()[s1], main["score_augmented"].to_numpy()[s1])
    # without a pool the two columns coincide
    np.testing.assert_array_equal(alone["score"].to_numpy(), alone["score_augmented"].to_numpy())


def test_same_certificate_same_number_on_every_page(cells):
    main_cell, aug_cell = cells
    # §4.4 page: inputs of main + augment, the plain stratified arm
    inputs = T.certification_inputs([main_cell, aug_cell])
    main, aug = inputs[inputs["cell"] == "main"], inputs[inputs["cell"] == "augment"]
    arms = T.certification_arms(main, None, [ALPHA], n_splits=N_SPLITS, extra_cal=aug)
    row = arms[(arms["arm"] == "stratified_ltt") & (arms["stratum"] == "S1")].iloc[0]
    s44 = float(row["coverage_mean"])
    # Table 8 page: the whole-layer row of the specialty breakdown
    t8 = T.specialty_breakdown(main_cell, alpha=ALPHA, n_splits=N_SPLITS)
    t8_layer = float(t8.loc[t8["specialty"] == "(whole layer)", "certified_coverage"].iloc[0])
    # what-if page: the release's own layer
    wi = T.layer_certification_means(main_cell, alpha=ALPHA, n_splits=N_SPLITS)["coverage_mean"]
    assert s44 == pytest.approx(t8_layer, abs=1e-12) and s44 == pytest.approx(wi, abs=1e-12)
    assert float(row["risk_mean"]) == pytest.approx(T.layer_certification_means(main_cell, alpha=ALPHA,
                                                                              n_splits=N_SPLITS)["risk_mean"], abs=1e-12)
    # the augmented arm is a different certificate (it sees more calibration data)
    aug_row = arms[(arms["arm"] == "stratified_ltt_augmented") & (arms["stratum"] == "S1")].iloc[0]
    assert float(aug_row["coverage_mean"]) != pytest.approx(s44, abs=1e-6)
