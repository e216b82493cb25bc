"""Small helpers that keep the book's notebooks to a screen of logic.

* :class:`Outputs` writes a notebook's artifacts into its ``output_dir``: tables as CSV,
  figures as PNG and SVG, headline numbers as ``results.json``; byte-reproducible.
* :func:`provenance_banner` renders the banner every page carries, read from the release manifest.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core.release import Release

__all__ = ["Outputs", "provenance_banner"]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN: a missing number is null
    if isinstance(value, float):
        return round(value, 10)
    return value


#: The dots per inch a figure is laid out at in the book (its CSS width: inches x CSS_DPI px) and the
#: PNG's own: twice that, so every CSS pixel has 2 x 2 image pixels on a HiDPI (2x) screen.
CSS_DPI = 110
PNG_DPI = 2 * CSS_DPI


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height in pixels of a PNG (its IHDR chunk)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("png_size: not a PNG")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


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
        """Save a matplotlib figure as ``<name>.png`` (at :data:`PNG_DPI`, twice the :data:`CSS_DPI`
        the book lays it out at, so it is sharp on a HiDPI screen) and ``<name>.svg``, with no
        timestamps."""
        import matplotlib as mpl

        with mpl.rc_context({"svg.hashsalt": "probeguard", "svg.fonttype": "path"}):
            fig.savefig(self.dir / f"{name}.png", dpi=PNG_DPI, bbox_inches="tight", metadata={"Software": None})
            fig.savefig(self.dir / f"{name}.svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
        return fig

    def results(self, **values: Any) -> dict[str, Any]:
        """Add headline numbers and (re)write ``results.json`` (sorted keys, NaN as null)."""
        self._results.update(values)
        path = self.dir / "results.json"
        path.write_text(json.dumps(_jsonable(self._results), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return dict(self._results)


def provenance_banner(release: Release, shows: str = "numbers") -> Any:
    """The banner shown at the top of every page: simulated or real, read from the manifest, and
    what the page ``shows`` (:meth:`Release.describe`: ``numbers``, ``paper`` or ``cases``)."""
    from IPython.display import HTML

    kind = "warning" if release.is_simulated else "note"
    title = "Simulated release" if release.is_simulated else "Release"
    text = release.describe(shows)
    html = (
        f'<div class="admonition {kind} probeguard-provenance" data-provenance="{release.provenance}">'
        f'<p class="admonition-title">{title}: {release.name}</p><p>{text}</p></div>'
    )
    return HTML(html)
