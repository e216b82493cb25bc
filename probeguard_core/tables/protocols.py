"""What the table builders need of a release and of a cell, as Protocols.

:class:`probeguard_core.release.Release` and :class:`~probeguard_core.release.Cell` satisfy them;
so does any object with the same attributes (a test's stand-in, another loader), in the way
``pipeline/engines.py`` types its engines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from probeguard_core.logs import NLIRecord, ProbeRecord, QuestionLog, SelfReport

__all__ = [
    "CellLike", "ReleaseLike",
]


@runtime_checkable
class CellLike(Protocol):
    """One ``<dataset>/<backbone>`` cell: its artifacts (DESIGN 2.1-2.4), ``None`` where absent."""

    dataset: str
    backbone: str
    role: str

    @property
    def label(self) -> str: ...

    @property
    def logs(self) -> Sequence[QuestionLog]: ...

    @property
    def probe(self) -> Sequence[ProbeRecord] | None: ...

    @property
    def nli(self) -> Sequence[NLIRecord] | None: ...

    @property
    def self_report(self) -> Sequence[SelfReport] | None: ...

    def has(self, kind: str) -> bool: ...

    def probe_by_arm(self, arm: str = "counter_evidence") -> Sequence[ProbeRecord]: ...


@runtime_checkable
class ReleaseLike(Protocol):
    """A loaded release: its name, provenance and cells (DESIGN 2.7)."""

    @property
    def name(self) -> str: ...

    @property
    def provenance(self) -> str: ...

    @property
    def is_simulated(self) -> bool: ...

    @property
    def backbones(self) -> Sequence[str]: ...

    @property
    def datasets(self) -> Sequence[str]: ...

    def cell(self, dataset: str, backbone: str | None = None, role: str = "main") -> CellLike: ...

    def has_cell(self, dataset: str, backbone: str | None = None, role: str = "main") -> bool: ...

    def main_cells(self) -> Sequence[CellLike]: ...

    def describe(self) -> str: ...
