# ruff: noqa: F403, F405
"""The old home of the book's table builders, kept so ``from probeguard_core import analysis``
and every public name of it keep working. The builders now live in :mod:`probeguard_core.tables`,
one module per part of the paper (see CONTRIBUTING.md's module map); new code imports them there.
"""

from probeguard_core.tables.appendices import *  # noqa: F403
from probeguard_core.tables.appendices import _case_of  # noqa: F401
from probeguard_core.tables.audits import *  # noqa: F403
from probeguard_core.tables.beside import *  # noqa: F403
from probeguard_core.tables.cases import *  # noqa: F403
from probeguard_core.tables.certification import *  # noqa: F403
from probeguard_core.tables.signals import *  # noqa: F403
from probeguard_core.tables.display import *  # noqa: F403
from probeguard_core.tables.picking import *  # noqa: F403
from probeguard_core.tables.scores import *  # noqa: F403
from probeguard_core.tables.unanimous import *  # noqa: F403

__all__ = [  # the names analysis exported before the split
    "ALWAYS_AVAILABLE",
    "ARTIFACT_NAMES",
    "CONTROL_ARMS",
    "FIGURE1_COLUMNS",
    "LAYER_SIGNALS",
    "LAYER_TABLE_SIGNALS",
    "TABLE2_SIGNALS",
    "ablation_table",
    "absent_note",
    "agreement_by_round",
    "beside_sources",
    "case_details",
    "cell_scores",
    "certification_arms",
    "certification_inputs",
    "certification_long",
    "check_entry",
    "claim_examples",
    "claim_rule_summary",
    "concluding_round_table",
    "cost_table",
    "discrimination",
    "empty_table",
    "explain_claims",
    "figure1_cases",
    "flip_rates",
    "hard_soft_scores",
    "hard_soft_table",
    "layer_discrimination",
    "layer_scores",
    "long_beside",
    "note",
    "pick_backbone",
    "pick_backbones",
    "pick_dataset",
    "pick_datasets",
    "placeholder_figure",
    "probe_arm_table",
    "release_layer_certificate",
    "risk_coverage_curves",
    "specialty_breakdown",
    "styled",
    "theorem1_resampled",
    "theorem1_synthetic",
    "unanimous_layer_table",
    "uncertifiable",
    "violation_upper_bound",
    "whatif_coverage",
    "wide_beside",
]
