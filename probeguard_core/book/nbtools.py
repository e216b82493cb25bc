"""Moved to :mod:`probeguard_core.book.nbtools`; this old module path stays as an alias of it.

Importing ``probeguard_core.nbtools`` gives the very module ``probeguard_core.book.nbtools`` (same
object, so attributes and monkeypatches are shared).
"""

import sys

<<<<<<<< HEAD:probeguard_core/book/nbtools.py
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from probeguard_core.fileio import jsonable, write_text_atomic
from probeguard_core.release import Release

__all__ = ["Outputs", "provenance_banner"]


def _jsonable(value: Any) -> Any:
    return jsonable(value, round_digits=10)  # results.json keeps 10 decimals


class Outputs:
    """Write one notebook's tables, figures and headline numbers into ``output_dir``."""

    def __init__(self, output_dir: str | os.PathLike[str]):
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._results: dict[str, Any] = {}

    def table(self, name: str, df: pd.DataFrame, index: bool = False) -> pd.DataFrame:
        """Save ``df`` as ``<name>.csv`` (fixed float format) and return it for display."""
        df.to_csv(self.dir / f"{name}.csv", index=index, float_format="%.6g", lineterminator="\n")
        return df

    def figure(self, name: str, fig: Any) -> Any:
        """Save a matplotlib figure as ``<name>.png`` and ``<name>.svg`` with no timestamps."""
        import matplotlib as mpl

        with mpl.rc_context({"svg.hashsalt": "probeguard", "svg.fonttype": "path"}):
            fig.savefig(self.dir / f"{name}.png", dpi=110, bbox_inches="tight", metadata={"Software": None})
            fig.savefig(self.dir / f"{name}.svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
        return fig

    def results(self, **values: Any) -> dict[str, Any]:
        """Add headline numbers and (re)write ``results.json`` (sorted keys, NaN as null)."""
        self._results.update(values)
        path = self.dir / "results.json"
        write_text_atomic(path, json.dumps(_jsonable(self._results), indent=2, sort_keys=True) + "\n")
        return dict(self._results)


def provenance_banner(release: Release) -> Any:
    """The banner shown at the top of every page: simulated or real, read from the manifest."""
    from IPython.display import HTML

    kind = "warning" if release.is_simulated else "note"
    title = "Simulated release" if release.is_simulated else "Release"
    text = release.describe()
    html = (
        f'<div class="admonition {kind} probeguard-provenance" data-provenance="{release.provenance}">'
        f'<p class="admonition-title">{title}: {release.name}</p><p>{text}</p></div>'
    )
    return HTML(html)
========
from probeguard_core.book import nbtools as _impl

sys.modules[__name__] = _impl
>>>>>>>> c-deploy:probeguard_core/nbtools.py
