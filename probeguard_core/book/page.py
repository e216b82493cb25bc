"""One set-up call per notebook page: :func:`open_page`.

A notebook's only set-up cell is ``page = open_page(globals())`` (hidden input). It resolves
the release and the output folder through :mod:`probeguard_core.book.paths` (the one release
resolver), loads the release, shows the provenance banner first and, under it, the parameters
the page was actually run with (papermill's injected values, not the defaults of the
parameters cell, which the book hides), with repository-relative paths only. Between the two
stand the verdicts of the paper's claims that the page tests (issue 22, :mod:`probeguard_core.ledger`,
keyed by the page's notebook name, the last part of its ``output_dir``), so no notebook carries
code of its own for them.

>>> from probeguard_core.book.page import effective_parameters
>>> effective_parameters({"release": "data/simulated-v1", "alpha": 0.15, "In": [], "_": 1, "f": print})
{'release': 'data/simulated-v1', 'alpha': 0.15}
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probeguard_core.book.outputs import Outputs, provenance_banner
from probeguard_core.book.paths import repo_relative, resolve, resolve_release

__all__ = ["FIGURE_RC", "Page", "effective_parameters", "open_page", "parameters_html", "verdicts_html"]

#: Matplotlib defaults of the book's figures: fonts legible when a figure is shown at the
#: article width (a cell's explicit ``fontsize=`` still wins).
FIGURE_RC: dict[str, Any] = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "legend.fontsize": 10,
                             "xtick.labelsize": 10, "ytick.labelsize": 10}

#: IPython's own globals, never a page parameter.
_IPYTHON_NAMES = frozenset({"In", "Out", "get_ipython", "exit", "quit", "open"})
_SIMPLE = (str, int, float, bool, type(None), list, tuple, dict)


def effective_parameters(namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The page's parameters as run: the simple-valued public names of ``namespace`` (a
    notebook's globals when its set-up cell runs, i.e. its parameters cell plus the values
    papermill injected), in definition order."""
    return {k: v for k, v in namespace.items()
            if not k.startswith("_") and k not in _IPYTHON_NAMES and isinstance(v, _SIMPLE)}


def parameters_html(params: Mapping[str, Any]) -> str:
    """The parameters as a small folded block under the banner (paths repository-relative)."""
    shown = {k: repo_relative(v) if k in ("release", "output_dir") and isinstance(v, str) else v
             for k, v in params.items()}
    items = "".join(f"<code>{html.escape(k)} = {html.escape(repr(v))}</code> " for k, v in shown.items())
    return (f'<details class="probeguard-parameters"><summary>Parameters of this run</summary>'
            f"<p>{items.strip()}</p></details>")


@dataclass(repr=False)
class Page:
    """What a page's cells use: the loaded ``release``, its writer ``out`` and its parameters."""

    release: Any
    out: Outputs
    params: dict[str, Any] = field(default_factory=dict)
    verdicts: str = ""
    shows: str = "numbers"  # what the page shows, for the banner (release.Release.describe)

    def figure(self, name: str, fig: Any) -> None:
        """Write ``fig`` as ``<name>.png`` / ``.svg``, glue it under ``name`` for a
        ``{glue:figure}``, and close it (so it is not also shown raw). The book's pages use
        :func:`tables.captioned` instead (number, caption and alt text in one place, and no
        second "Fig. N" from Sphinx's numfig)."""
        import matplotlib.pyplot as plt
        from myst_nb import glue

        self.out.figure(name, fig)
        glue(name, fig, display=False)
        plt.close(fig)

    def glue(self, name: str, value: Any) -> None:
        """A value quoted in the page's prose, computed here, never typed: a number for
        ``{glue:text}`name:.3f```, a string (glued as Markdown, so without quotes) for
        ``{glue:md}`name```."""
        from IPython.display import Markdown
        from myst_nb import glue

        glue(name, Markdown(value) if isinstance(value, str) else value, display=False)

    def quote(self, results: Mapping[str, Any], *keys: str) -> None:
        """Glue the headline numbers ``keys`` of ``results`` (what ``out.results`` returned) for the
        page's prose, each as ``{glue:md}`ours_<key>```, written as :func:`prose.quoted` writes it
        (three decimals, a backbone or benchmark by its name)."""
        from probeguard_core.book.prose import quoted

        for key in keys:
            self.glue(f"ours_{key}", quoted(results[key], key))

    def inputs_note(self, shown: Any) -> Any:
        """The one-line note under a table whose numbers include inputs of the simulator (issue 22,
        point 4): :func:`tables.inputs.inputs_note` for this page's release; shows nothing on a
        real release or when ``shown`` (the table, or its quantities) holds no input."""
        from probeguard_core.tables.inputs import inputs_note

        return inputs_note(self.release, shown)

    def __repr__(self) -> str:  # the plain-text twin of the banner: no build-machine path
        return f"Release {self.release.name} ({self.release.provenance})"

    def _repr_html_(self) -> str:
        return provenance_banner(self.release, self.shows).data + self.verdicts + parameters_html(self.params)


def open_page(namespace: Mapping[str, Any] | None = None, *, release: str | os.PathLike[str] | None = None,
              output_dir: str | os.PathLike[str] | None = None, shows: str = "numbers") -> Page:
    """Load the page's release and output folder; the returned :class:`Page` renders as the
    provenance banner followed by the parameters of this run (make it the cell's last line).

    ``namespace`` is the notebook's ``globals()``: ``release`` and ``output_dir`` are read from
    it unless given. ``shows`` is what the page shows, for the banner's wording
    (:meth:`release.Release.describe`): ``numbers`` (default), ``paper`` (the paper's own text or
    tables, no release number) or ``cases`` (the release's questions, rationales, queries or
    document ids)."""
    params = effective_parameters(namespace or {})
    release = release if release is not None else params.get("release")
    output_dir = output_dir if output_dir is not None else params.get("output_dir")
    if release is None or output_dir is None:
        raise ValueError("open_page needs a release and an output_dir (the notebook's parameters)")
    import matplotlib as mpl

    from probeguard_core.release import load_release

    mpl.rcParams.update(FIGURE_RC)
    rel = load_release(resolve_release(release))
    rel.describe(shows)  # an unknown ``shows`` fails here, not in the banner
    n_splits = params.get("n_splits")
    return Page(rel, Outputs(resolve(output_dir)), {**params, "release": str(release),
                                                     "output_dir": str(Path(output_dir))},
                verdicts_html(rel, Path(output_dir).name, n_splits if isinstance(n_splits, int) else None), shows)


def verdicts_html(rel: Any, page: str, n_splits: int | None = None) -> str:
    """The verdict lines of the claims ``page`` tests on ``rel`` (:func:`ledger.report.page_verdicts_html`),
    or a line saying why they cannot be computed; empty for a page that tests no claim."""
    from probeguard_core.ledger.registry import load_claims
    from probeguard_core.ledger.report import page_verdicts, page_verdicts_html

    if not any(c.page == page for c in load_claims()):
        return ""
    try:
        table = page_verdicts(rel, page, n_splits)
    except ValueError as exc:
        return (f'<div class="probeguard-verdicts"><p>The paper\'s claims this page tests cannot be evaluated on '
                f"this release: {html.escape(str(exc))}</p></div>")
    return page_verdicts_html(table, page, simulated=rel.is_simulated)
