"""The tables and figures of the paper, one module per part of the paper (replacing ``analysis``).

===================  ==========================================================================
``scores``           per-question scores of a cell (§3.1-§3.2) and pieces the tables share
``signals``          discrimination: Tables 2, 3, 5 and Figures 2, 5 (§4.1-§4.2)
``cases``            Figure 1 and Appendix K: the two unanimous cases
``unanimous``        the unanimous layer (§4.3, Figure 3), Table 6 (Appendix G), §5.1
``certification``    certification (§3.3, §4.4, Figure 4) and Table 8 (Appendix I)
``audits``           Theorem 1 audits and the what-if chapter (beyond the paper)
``appendices``       Table 7 (Appendix H), Appendix J, Appendix C
``method``           Table 4, Table 9 and Appendices A, D, E (the method's reference pages)
``difficulty``       §5.1 difficulty-proxy correlations, §5.2 probe-pilot sensitivity
``picking``          which backbone / benchmark of a release a page shows
``beside``           ours beside the paper; ``results.json`` consistency checks
``display``          tables and notes for reading (never changes a number in a CSV)
``figures``          the paper's figures drawn from the builders' tables
``protocols``        ``CellLike`` / ``ReleaseLike``: what the builders need of a release
``deploying``        the chapter "Deploying: recalibration and drift" (§5.3)
``warm``             the per-question tables several pages share, computed once before them
===================  ==========================================================================

Every public name of the submodules is also an attribute of this package, imported on first
use (``tables.figure1_cases`` imports :mod:`probeguard_core.tables.cases`); importing the
package itself imports no submodule.
"""

from __future__ import annotations

from probeguard_core.lazy import lazy_names

#: Which submodule defines each public name (checked by ``tests/test_tables.py``).
NAMES: dict[str, str] = {
    **dict.fromkeys([
        "Table7", "ablation_table", "claim_examples", "claim_rule_summary", "claims_page",
        "cost_frame", "cost_page", "cost_table", "explain_claims", "rule_summary_units", "table7",
    ], "appendices"),
    **dict.fromkeys([
        "WhatIf", "layer_certification_means", "theorem1_audit",
        "theorem1_resampled", "theorem1_synthetic", "violation_upper_bound", "whatif",
        "whatif_above_alpha", "whatif_coverage", "whatif_summary",
    ], "audits"),
    **dict.fromkeys([
        "beside_sources", "check_entry", "value_at",
    ], "beside"),
    **dict.fromkeys([
        "CASE_DETAIL_COLUMNS", "FIGURE1_COLUMNS", "Figure1", "appendix_k", "case_details",
        "figure1", "figure1_cases",
    ], "cases"),
    **dict.fromkeys([
        "Figure4", "SUMMARY_COLUMNS", "TABLE8_COLUMNS", "TABLE8_QUANTITIES", "Table8",
        "at_alphas", "certification_arms", "certification_inputs", "certification_long",
        "figure4", "specialty_breakdown", "specialty_label_counts", "stratified_summary",
        "table8", "uncertifiable", "PAPER_LTT_ARMS", "with_appendix_e",
    ], "certification"),
    **dict.fromkeys([
        "ARTIFACT_NAMES", "BESIDE_CLASS", "BESIDE_SUBCOLUMNS", "HEADER_WORDS", "QUANTITY_WORDS", "TABLE_CLASS",
        "absent_note", "absent_text", "empty_table", "header", "label", "long_beside", "note",
        "placeholder_figure", "show_notes", "styled", "wide_beside",
    ], "display"),
    **dict.fromkeys([
        "FIGURES", "FONT", "FigureText", "WIDTH", "captioned", "figure_html", "figure5_curves",
        "plot_appendix_j", "plot_figure1", "plot_figure2", "plot_figure3", "plot_figure4", "plot_figure5",
        "plot_hard_vs_soft", "plot_table6_arms", "plot_table7_deltas", "plot_table8", "plot_theorem1",
        "plot_whatif", "table7_deltas", "whatif_paper_points",
    ], "figures"),
    **dict.fromkeys([
        "pick_backbone", "pick_backbones", "pick_dataset", "pick_datasets",
    ], "picking"),
    **dict.fromkeys([
        "BENCHMARK_RESULT", "DriftDemo", "drift_demo", "measured_rates",
    ], "deploying"),
    **dict.fromkeys([
        "TRAJECTORY_FAMILIES", "difficulty_correlations", "difficulty_summary", "pilot_page", "pilot_shift",
    ], "difficulty"),
    **dict.fromkeys([
        "ALGORITHMS", "PAPER_TABLE4", "AlgorithmLine", "algorithm_lines", "algorithms_markdown",
        "appendix_a_prompts", "appendix_e_protocol", "prompts_markdown", "hyperparameter_source", "source_link", "table4", "table9", "violation_counts",
    ], "method"),
    **dict.fromkeys([
        "DERIVED_CODE", "cell_correct", "cell_features", "cell_probe_table", "cell_scores", "cell_signals", "defined_metric", "flip_rows",
        "per_cell", "rse_keep_score", "s1_correct",
    ], "scores"),
    "warm_cell_tables": "warm",
    **dict.fromkeys([
        "ALWAYS_AVAILABLE", "LAYER_SIGNALS", "TABLE2_SIGNALS", "Table5", "Tables23",
        "agreement_by_round", "concluding_round_table", "discrimination",
        "layer_discrimination", "risk_coverage_curves", "table5", "tables_2_3",
    ], "signals"),
    **dict.fromkeys([
        "CONTROL_ARMS", "HARD_SOFT_COLUMNS", "LAYER_TABLE_SIGNALS", "PageTables",
        "TABLE6_COLUMNS", "figure3_ranges", "flip_rates", "hard_soft_page", "hard_soft_scores",
        "hard_soft_table", "layer_scores", "probe_arm_table", "table6_page",
        "unanimous_layer_page", "unanimous_layer_table",
    ], "unanimous"),
}

__getattr__, __dir__ = lazy_names(__name__, NAMES)
