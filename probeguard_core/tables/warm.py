"""The per-question tables several of the book's pages share (§3.1-§3.3, App. J), computed once
per main cell before the pages (registry ``cell_tables``; :mod:`probeguard_core.book.build`'s
first tasks), so each page reads them from the artifact cache instead of recomputing them.
"""

from __future__ import annotations

from probeguard_core import SEED
from probeguard_core.tables.appendices import cost_frame
from probeguard_core.tables.certification import certification_inputs
from probeguard_core.tables.protocols import CellLike
from probeguard_core.tables.scores import cell_probe_table, cell_scores

__all__ = ["warm_cell_tables"]


def warm_cell_tables(cell: CellLike, seed: int = SEED) -> None:
    """Compute (and store, for a release cell) the per-question tables several pages share:
    :func:`cell_scores` (with :func:`cell_signals` and the feature table), :func:`cell_probe_table`,
    Appendix J's cost frame and the cell's certification inputs (§3.3).  The book's build runs it
    once per main cell before the pages."""
    cell_scores(cell, seed=seed)
    cell_probe_table(cell)
    cost_frame(cell)
    certification_inputs([cell])
    rel = getattr(cell, "release", None)
    if rel is not None and rel.has_cell(cell.dataset, cell.backbone, role="augment"):  # §4.4's augmented arm
        certification_inputs([cell, rel.cell(cell.dataset, cell.backbone, role="augment")])
