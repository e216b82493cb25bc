"""Which part of a release a page shows (any release written to DESIGN 2.7, notebooks/README.md).

Parameters left at None select from what the release has: the paper's primary backbone and
benchmark when the release has them, else the release's own, in the paper's order first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from probeguard_core.tables.protocols import ReleaseLike

__all__ = [
    "pick_backbone", "pick_backbones", "pick_dataset", "pick_datasets",
]


def _paper_order(values: Iterable[str], order: Sequence[str]) -> list[str]:
    vals = list(dict.fromkeys(values))
    known = [v for v in order if v in vals]
    return known + [v for v in vals if v not in order]


def pick_backbone(rel: ReleaseLike, backbone: str | None = None) -> str:
    """The backbone a notebook shows: ``backbone`` when given (it must be in the release), else
    the paper's primary backbone when the release has it, else the release's first backbone."""
    from probeguard_core.paper import BACKBONES

    have = list(rel.backbones)
    if backbone is not None:
        if backbone not in have:
            raise ValueError(f"backbone={backbone!r}: release {rel.name!r} has no main cell for it; it has {have}")
        return backbone
    if not have:
        raise ValueError(f"release {rel.name!r} has no main cell")
    return _paper_order(have, BACKBONES)[0]


def pick_backbones(rel: ReleaseLike, backbones: Sequence[str] | None = None) -> list[str]:
    """``backbones`` that the release has (in the given order), or with None every backbone of
    the release (the paper's order first, then the release's)."""
    from probeguard_core.paper import BACKBONES

    if backbones is None:
        return _paper_order(rel.backbones, BACKBONES)
    return [b for b in dict.fromkeys(backbones) if b in rel.backbones]


def _datasets_of(rel: ReleaseLike, backbone: str | None) -> list[str]:
    return list(dict.fromkeys(c.dataset for c in rel.main_cells() if backbone in (None, c.backbone)))


def pick_dataset(rel: ReleaseLike, dataset: str | None = None, backbone: str | None = None) -> str:
    """The benchmark a single-cell notebook shows: ``dataset`` when given (the release must have
    it for ``backbone``), else the first of the paper's benchmarks (MedQA first) that the release
    has for ``backbone``, else the release's first benchmark for it."""
    from probeguard_core.paper import DATASETS

    have = _datasets_of(rel, backbone)
    if dataset is not None:
        if dataset not in have:
            raise ValueError(f"dataset={dataset!r}: release {rel.name!r} has no main cell for it with backbone "
                             f"{backbone!r}; it has {have}")
        return dataset
    if not have:
        raise ValueError(f"release {rel.name!r} has no main cell for backbone {backbone!r}")
    return _paper_order(have, DATASETS)[0]


def pick_datasets(rel: ReleaseLike, datasets: Sequence[str] | None = None, backbone: str | None = None,
                  design: Sequence[str] | None = None) -> list[str]:
    """The benchmarks a multi-cell notebook shows for ``backbone`` (None: every backbone).

    ``datasets`` given: those the release has, in the given order. None: the paper's benchmarks
    of this table (``design``) that the release has, then every benchmark of the release that the
    paper does not use at all (a release's own benchmark is never dropped); when that leaves none,
    every benchmark the release has. Without ``design``: every benchmark, the paper's order first.
    """
    from probeguard_core.paper import DATASETS

    have = _datasets_of(rel, backbone)
    if datasets is not None:
        return [d for d in dict.fromkeys(datasets) if d in have]
    if design is None:
        return _paper_order(have, DATASETS)
    chosen = [d for d in design if d in have] + [d for d in have if d not in DATASETS]
    return chosen or _paper_order(have, DATASETS)
