"""The paper's figures drawn from the tables builders return (matplotlib; display only), and
the one helper that shows any of them numbered and captioned: :func:`captioned`.

Labels are the paper's words (:func:`paper.display_label`: dataset, model and method names),
figures are at most :data:`WIDTH` inches wide so that their fonts (:data:`FONT` points) stay
legible at the book's article width, and a figure whose inputs the release lacks still draws,
with a line saying why (so no notebook cell branches on what a release has). Nothing here
computes a number that a CSV holds.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from probeguard_core.paper import display_label

__all__ = [
    "FIGURES", "FONT", "FigureText", "WIDTH", "captioned", "figure_html", "figure5_curves", "plot_appendix_j",
    "plot_figure1", "plot_figure2", "plot_figure3", "plot_figure4", "plot_figure5", "plot_hard_vs_soft",
    "plot_table6_arms", "plot_table7_deltas", "plot_table8", "plot_theorem1", "plot_whatif", "table7_deltas",
    "whatif_paper_points",
]

#: Base font size (points) of the book's figures.
FONT = 11
#: The widest figure (inches): laid out at the book's 110 CSS px per inch it is shown near its natural size in the
#: ~820-px article column, so an 11-point label reads at about 15 px.
WIDTH = 8.0

_RC = {"font.size": FONT, "axes.titlesize": FONT + 1, "axes.labelsize": FONT, "legend.fontsize": FONT - 1,
       "xtick.labelsize": FONT - 1, "ytick.labelsize": FONT - 1, "figure.titlesize": FONT + 1}


# --------------------------------------------------------------------------- numbers, captions, alt text
@dataclass(frozen=True)
class FigureText:
    """A figure's number (the paper's, or ours for a figure the paper does not have), its
    caption (the paper's wording where it has the figure) and its alt text (what it shows)."""

    number: str
    caption: str
    alt: str


#: Every figure of the book, by the name its PNG / SVG is written under.
FIGURES: dict[str, FigureText] = {
    "figure1": FigureText(
        "Figure 1",
        "Two unanimous consensuses are indistinguishable to snapshot-based abstention, yet one is knowledge-backed "
        "and one is inherited from a shared misconception (the paper's panel a, drawn from this release's probe "
        "records): round-1 votes above, re-answers under counter-evidence below.",
        "Two panels of eight dots each. Both show a unanimous first-round vote; under counter-evidence the "
        "re-answers of the correct consensus all keep the answer (blue), those of the wrong one leave it (red)."),
    "figure2": FigureText(
        "Figure 2",
        "(Left) Correct consensus starts near-unanimous, while wrong consensus starts from disagreement and "
        "converges to it slowly (mean agreement per round, shaded standard errors). (Middle) Error rate rises with "
        "the round at which consensus concludes (bars: questions concluding per round; line: error rate at that "
        "round; dashed: overall). (Right) On the unanimous layer every vote-based signal is constant, and only the "
        "formation signals discriminate.",
        "Three charts. Mean agreement per round for correct and wrong final answers; questions and error rate by "
        "concluding round; AUROC of each signal inside the unanimous layer, vote-based signals grey at 0.5."),
    "figure3": FigureText(
        "Figure 3",
        "Flip rates of wrong and correct consensus under counter-evidence. A consensus counts as flipped when the "
        "majority vote of the N = 8 re-answers no longer lands on the original answer. Flip rates per backbone and "
        "benchmark with Wilson 95 % confidence intervals; diamonds: the paper's values. The paper finds the "
        "asymmetry in every cell.",
        "Bar chart per model and benchmark: the share of wrong and of correct unanimous consensuses flipped by "
        "counter-evidence, with 95 % Wilson intervals and the paper's values as diamonds."),
    "figure4": FigureText(
        "Figure 4",
        "Realized risk and certified coverage of the stratified rule. (Left) Realized selective risk against the "
        "target level: the paper finds every Learn-then-Test arm below the risk = α diagonal at every level it "
        "certifies, while naive quantile calibration crosses it. (Right) Certified coverage of the unanimous layer "
        "per backbone; the star marks the stratified rule at the page's α. Means over the calibration/test splits; "
        "bands are ± 1 standard deviation.",
        "Two line charts. Left, realized test risk against the target risk α for naive quantile calibration, "
        "global Learn-then-Test and the stratified rule, with the risk = α diagonal. Right, certified coverage of "
        "the unanimous layer against α, one line per model."),
    "figure5": FigureText(
        "Figure 5",
        "Risk-coverage curves of the always-available signals on the primary backbone; lower is better, and the "
        "AURC values of Table 5 are the areas under these curves. The process score (thick line) uses the same "
        "five-fold out-of-fold protocol as the tables; coverage below 5 % is omitted.",
        "Risk-coverage curves, one chart per benchmark: selective risk against coverage, one line per signal, the "
        "process score drawn thick."),
    "hard_vs_soft": FigureText(
        "Figure S.1",
        "Hard-clustering semantic entropy (top) against continuous RSE (bottom) inside the unanimous layer, correct "
        "against wrong consensus (§5.1). The paper finds that RSE separates better because hard clustering ties and "
        "saturates.",
        "Histograms per benchmark: the hard-clustering score takes a few tied values for correct and wrong "
        "consensus, the continuous RSE spreads them apart."),
    "table6_arms": FigureText(
        "Figure G.1",
        "Flip rates of wrong and correct unanimous consensus per probe arm (Appendix G, Table 6; Wilson 95 % "
        "intervals; diamonds: the paper). The paper finds that the instruction alone flips no majority, "
        "irrelevant documents flip 1.0 % of wrong consensus, and the counter-evidence under a neutral instruction "
        "keeps nearly the full gap (12.0 % versus 3.6 %).",
        "Bar chart: for each probe arm, the flip rate of wrong and of correct unanimous consensus with 95 % "
        "intervals and the paper's values as diamonds."),
    "table7_deltas": FigureText(
        "Figure H.1",
        "Change in the process score's AUROC when one feature family is dropped, ours beside the paper's "
        "(Appendix H, Table 7). The paper finds only the rationale family non-redundant.",
        "Horizontal bar chart per benchmark: the change in AUROC against the full process score when each feature "
        "family is dropped, ours and the paper's."),
    "table8_specialty": FigureText(
        "Figure I.1",
        "Certified coverage of the layer-level rule per MedQA specialty against the layer's error rate in that "
        "specialty (Appendix I, Table 8; dashed: α). The paper finds coverage and risk spread unevenly over "
        "specialties.",
        "Scatter plot, one labelled point per medical specialty: certified coverage against the unanimous layer's "
        "error rate in it, ours and the paper's, with a dashed line at α."),
    "appendix_j_cost": FigureText(
        "Figure J.1",
        "Wall time per probed question of the substrate and of the counter-evidence probe (Appendix J), per "
        "benchmark of the primary backbone. The paper finds that the probe roughly doubles the cost of a "
        "unanimous question.",
        "Overlaid histograms per benchmark: wall seconds per probed question spent by the consensus substrate and "
        "by the probe."),
    "theorem1_audit": FigureText(
        "Figure T.1",
        "Empirical audit of Theorem 1 (beyond the paper): the share of calibration draws whose certified threshold "
        "has a true risk above α, with its one-sided 95 % upper bound, against the level δ (dashed).",
        "Dot chart against α: the share of calibration draws that violate the target risk, for a synthetic and a "
        "resampled population, with upper-bound bars and a dashed line at δ."),
    "whatif_coverage": FigureText(
        "Figure W.1",
        "Certified coverage of one simulated stratum against its calibration size (left, one line per base error "
        "rate) and against its base error rate (right, one line per calibration size); star: this release's own "
        "layer; diamonds: the paper's §4.4 operating points (beyond the paper). The paper says that "
        "\"a stratum above it receives no certified region\" (§5.3: a stratum whose base error rate is above α); "
        "certifying a whole stratum needs its base error at or below α, but a score that discriminates can "
        "certify the top of a stratum above α (right panel, right of the dashed line).",
        "Two line charts of certified coverage: against calibration size on a log axis, one line per base error "
        "rate; and against base error rate, one line per calibration size, with a dashed line at α."),
    "alpha_explorer": FigureText(
        "Figure R.1",
        "Certified coverage (left) and realized test risk (right) against the target risk level α, one line per "
        "stratum and score, means over this release's calibration/test splits (beyond the paper: Figure 4 at "
        "every α from 0.01 to 0.30). Move the slider: the dashed rule and the points mark the chosen α, and the "
        "table under the chart reads them out; dotted: the risk = α diagonal.",
        "Two line charts with a slider for α: certified coverage and realized risk against α, one line per "
        "stratum and score, a dashed vertical rule at the chosen α and a dotted risk = α diagonal."),
    "drift_timeline": FigureText(
        "Figure M.1",
        "Monitoring a deployed certificate (beyond the paper): the lower confidence bound on each certified "
        "stratum's risk (thick) and its running risk (thin) against α, on a stream without drift (top) and on one "
        "whose base error rises at the dotted line (bottom); a circle marks the alarm.",
        "Two stacked timelines of risk per certified stratum against the question index, with a horizontal line at "
        "α; in the drifted stream the lower bound crosses α after the change point and an alarm is marked."),
}


def figure_html(src: str, text: FigureText, extra: str = "", name: str = "", width: int | None = None) -> str:
    """A numbered, captioned HTML figure: ``<figure>`` with the image's alt text and a
    ``<figcaption>`` that starts with the figure's number (the only numbering: no Sphinx figure
    node, so numfig adds no second "Fig. N"). ``width``: the image's CSS width in px (half a 2x
    PNG's pixel width, so it stays sharp on a HiDPI screen; CSS still caps it at the column)."""
    ident = f' id="fig-{html.escape(name.replace("_", "-"))}"' if name else ""
    caption = text.caption + (" " + extra if extra else "")
    size = f' width="{int(width)}"' if width else ""
    return (f'<figure class="probeguard-figure"{ident}><img src="{src}"{size} alt="{html.escape(text.alt)}">'
            f"<figcaption><strong>{html.escape(text.number)}.</strong> {html.escape(caption)}</figcaption></figure>")


def captioned(target: Any, name: str, fig: Any, extra: str = "",
              inputs: pd.DataFrame | Sequence[str] | None = None) -> Any:
    """Write ``fig`` as ``<name>.png`` / ``.svg`` (through the page's ``Outputs``), close it,
    and return it as a numbered, captioned figure for the page (:data:`FIGURES` holds its
    number, caption and alt text; ``extra`` adds a computed sentence to the caption). The image
    is the PNG the page offers for download, embedded, so the figure needs no other file.

    ``target`` is a :class:`book.page.Page` or its ``Outputs``. ``inputs``: the table the figure
    draws; on a simulated release (``target`` a Page), the caption then says which of its
    quantities were given to the simulator (:func:`tables.inputs.input_sentence`)."""
    import matplotlib.pyplot as plt
    from IPython.display import HTML

    from probeguard_core.book.outputs import CSS_DPI, PNG_DPI, png_size
    from probeguard_core.tables.display import note

    if name not in FIGURES:
        raise KeyError(f"captioned: no number / caption / alt text for figure {name!r} in tables.figures.FIGURES")
    if inputs is not None:
        from probeguard_core.tables.inputs import input_sentence

        release = getattr(target, "release", None)
        if release is None:
            raise TypeError("captioned: inputs= needs the page (a book.page.Page), whose release says whether it is simulated")
        said = input_sentence(inputs, simulated=bool(release.is_simulated))
        extra = " ".join(t for t in (extra, said) if t)
    out = getattr(target, "out", target)
    out.figure(name, fig)
    plt.close(fig)
    data = (out.dir / f"{name}.png").read_bytes()
    png = base64.b64encode(data).decode("ascii")
    width = round(png_size(data)[0] * CSS_DPI / PNG_DPI)
    shown = figure_html(f"data:image/png;base64,{png}", FIGURES[name], extra, name, width=width)
    missing = getattr(fig, "probeguard_missing", None)  # a placeholder: say why, visibly, above it
    return HTML((note(missing).data if missing else "") + shown)


def _placeholder(text: str, visible_note: bool = False) -> Any:
    from probeguard_core.tables.display import placeholder_figure

    return placeholder_figure(text, figsize=(WIDTH, 2.0), visible_note=visible_note)


def _rc() -> Any:
    import matplotlib.pyplot as plt

    return plt.rc_context(_RC)


# --------------------------------------------------------------------------- Figure 1 (§1)
def plot_figure1(cases: pd.DataFrame, missing: str | None, label: str) -> Any:
    """Figure 1 from :func:`tables.figure1_cases`: per case, the unanimous round-1 votes and
    the re-answers under counter-evidence (kept: blue, changed: red)."""
    import matplotlib.pyplot as plt

    if missing:
        return _placeholder(f"Figure 1 ({label}): {missing}")
    with _rc():
        fig, axes = plt.subplots(1, len(cases), figsize=(WIDTH, 3.4), squeeze=False)
        for ax, c in zip(axes[0], cases.itertuples()):
            n = len(c.reanswers)
            for i in range(n):
                ax.scatter(i, 1, s=200, color="tab:blue")
                ax.text(i, 1, c.consensus, ha="center", va="center", color="white", weight="bold", fontsize=FONT - 2)
                kept = c.reanswers[i] == c.consensus
                ax.scatter(i, 0, s=200, color="tab:blue" if kept else "tab:red")
                ax.text(i, 0, c.reanswers[i], ha="center", va="center", color="white", weight="bold", fontsize=FONT - 2)
            verdict = "correct" if c.correct else "wrong"
            ax.set_title(f"{'kept' if c.case == 'kept' else 'collapsed'}: {verdict} consensus {c.consensus} "
                         f"(gold {c.gold})\nκ = {c.kappa:.2f}, RSE = {c.rse:.2f}", fontsize=FONT)
            ax.set_yticks([0, 1], ["re-answers", "round-1\nvotes"])
            ax.set_xticks([])
            ax.set_ylim(-0.6, 1.6)
            ax.set_xlim(-0.7, n - 0.3)
            ax.spines[["top", "right", "bottom"]].set_visible(False)
        fig.suptitle(f"Two unanimous consensuses ({label})")
        fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- Figure 2 (§4.2)
def plot_figure2(agree: pd.DataFrame, rounds: pd.DataFrame, layer: pd.DataFrame, label: str) -> Any:
    """Figure 2 from :func:`tables.agreement_by_round`, :func:`tables.concluding_round_table` and
    :func:`tables.layer_discrimination`: agreement per round (correct against wrong), error rate by
    concluding round, AUROC of each signal inside the unanimous layer (constant signals grey)."""
    import matplotlib.pyplot as plt

    overall = rounds.n_errors.sum() / rounds.n.sum()
    with _rc():
        fig = plt.figure(figsize=(WIDTH, 6.6))
        grid = fig.add_gridspec(2, 2)
        a, b, c = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1]), fig.add_subplot(grid[1, :])
        for group, color in (("correct", "tab:blue"), ("wrong", "tab:red")):
            g = agree[agree.group == group]
            a.plot(g["round"], g["mean"], color=color, marker="o", label=f"{group} (n = {g.n.iloc[0]})")
            a.fill_between(g["round"], g["mean"] - g["se"], g["mean"] + g["se"], color=color, alpha=0.2)
        a.set(xlabel="round", ylabel="mean agreement", title="Agreement per round", ylim=(0, 1.02))
        a.legend(title="final answer", frameon=False)
        conv = rounds[rounds["round"] > 0]
        b.bar(conv["round"], conv["n"], color="lightgray")
        b.set(xlabel="concluding round", ylabel="questions", title="Error by concluding round")
        b2 = b.twinx()
        b2.plot(conv["round"], conv["error_rate"], color="tab:red", marker="o")
        b2.axhline(overall, color="tab:red", ls="--", lw=1)
        b2.set(ylabel="error rate", ylim=(0, 1))
        names = [display_label("signal", s) for s in layer["signal"]]
        c.barh(names, layer["value"], color=["lightgray" if k else "tab:green" for k in layer["constant"]])
        c.axvline(0.5, color="black", lw=1, ls=":")
        c.set(xlabel="AUROC inside the unanimous layer (grey: constant there)", xlim=(0, 1),
              title="Signals on the unanimous layer")
        c.invert_yaxis()
        fig.suptitle(f"How consensus forms ({label})")
        fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- Figure 3 (§4.3)
def plot_figure3(flips: pd.DataFrame, datasets: Sequence[str]) -> Any:
    """Figure 3 from :func:`tables.flip_rates` (beside the paper): flip rates of wrong and
    correct unanimous consensus per backbone × benchmark of ``datasets`` (Figure 3's design),
    Wilson 95 % intervals, the paper's values as diamonds."""
    import matplotlib.pyplot as plt

    flips = flips[flips.dataset.isin(datasets)]
    if flips.empty:
        return _placeholder("Figure 3: this release has no counter-evidence probe records in the benchmarks of "
                            "its design; Figure 3 needs them (DESIGN 2.2)", visible_note=True)
    lab = flips.apply(lambda r: f"{display_label('backbone', r.backbone)}\n{display_label('dataset', r.dataset)}",
                      axis=1)
    x = {k: i for i, k in enumerate(dict.fromkeys(lab))}
    with _rc():
        fig, ax = plt.subplots(figsize=(min(WIDTH, max(5.0, 1.15 * len(x) + 1)), 3.8))
        for q, dx, color, name in (("flip_wrong", -0.18, "tab:red", "wrong consensus"),
                                   ("flip_right", 0.18, "tab:blue", "correct consensus")):
            m = (flips["quantity"] == q).to_numpy()
            xs = np.array([x[k] for k in lab[m]]) + dx
            v = flips.loc[m, "value"].to_numpy()
            err = np.clip(np.vstack([v - flips.loc[m, "ci_low"].to_numpy(), flips.loc[m, "ci_high"].to_numpy() - v]),
                          0, None)
            ax.bar(xs, v, width=0.34, color=color, alpha=0.75, label=name)
            ax.errorbar(xs, v, yerr=err, fmt="none", ecolor="black", capsize=3, lw=1)
            p = flips.loc[m, "paper"].to_numpy(dtype=float)
            ax.scatter(xs[~np.isnan(p)], p[~np.isnan(p)], marker="D", color="black", zorder=3, s=20,
                       label="paper" if q == "flip_wrong" else None)
        crowded = len(x) > 5  # long model names: tilted so that neighbours do not collide
        ax.set_xticks(list(x.values()), list(x.keys()), fontsize=FONT - 2 if crowded else FONT - 1,
                      rotation=30 if crowded else 0, ha="right" if crowded else "center",
                      rotation_mode="anchor")
        ax.set_ylabel("flip rate (Wilson 95 % CI)")
        ax.set_title("Consensus flipped by counter-evidence")
        ax.legend(frameon=False)
        fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- Figure 4 (§4.4)
def plot_figure4(r: Any) -> Any:
    """Figure 4 (§4.4) from a :class:`tables.certification.Figure4`: left, realized test risk
    against the target α of the pooled-stream arms and the stratified rule (with the risk = α
    diagonal); right, certified coverage of the unanimous layer per backbone (mean ± sd over
    splits), the stratified rule at the page's α starred."""
    import matplotlib.pyplot as plt

    arms, per_bb, alpha = r.arms, r.per_backbone, r.alpha
    with _rc():
        fig, (a, b) = plt.subplots(1, 2, figsize=(WIDTH, 4.4))
        for arm, stratum, style in (("naive_quantile", "all", "o--"), ("global_ltt", "all", "s-"),
                                    ("stratified_ltt", "S1", "^-"), ("stratified_ltt_augmented", "S1", "v-")):
            g = arms[(arms.arm == arm) & (arms.stratum == stratum)]
            a.plot(g.alpha, g.risk_mean, style, ms=3, label=display_label("arm", arm))
        a.plot([0, 0.3], [0, 0.3], color="black", lw=1, ls=":", label="risk = α")
        a.set(xlabel="target risk α", ylabel="realized test risk", title="Realized risk", xlim=(0, 0.3))
        a.legend(loc="upper left", fontsize=FONT - 2, frameon=False)
        for bb, g in per_bb[per_bb.stratum == "S1"].groupby("backbone", sort=False):
            line, = b.plot(g.alpha, g.coverage_mean, label=display_label("backbone", bb))
            b.fill_between(g.alpha, g.coverage_mean - g.coverage_sd, g.coverage_mean + g.coverage_sd, alpha=0.2,
                           color=line.get_color())
        at = arms[(arms.arm == "stratified_ltt") & (arms.stratum == "S1") & (arms.alpha.round(2) == round(alpha, 2))]
        b.scatter([alpha] * len(at), at.coverage_mean, marker="*", s=160, color="black", zorder=5,
                  label=f"α = {alpha:.2f}")
        b.text(0.15, 0.5, "" if len(per_bb) else "the paper's rule cannot run on this release\n"
               "(no probe / NLI records for the unanimous layer)", ha="center", va="center", color="dimgray")
        b.set(xlabel="target risk α", ylabel=f"certified coverage ({display_label('dataset', r.dataset)})",
              title="Coverage per backbone", xlim=(0, 0.3), ylim=(0, 1))
        b.legend(loc="upper left", fontsize=FONT - 2, frameon=False)
        fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- Figure 5 (Appendix F)
def figure5_curves(scores: Mapping[tuple[str, str], pd.DataFrame], datasets: Sequence[str], backbone: str) -> pd.DataFrame:
    """The risk-coverage curves Figure 5 draws (:func:`tables.risk_coverage_curves`) for each
    benchmark of ``datasets`` that ``backbone`` has: ``dataset, signal, coverage, risk,
    threshold, n_answered``."""
    from probeguard_core.tables.signals import risk_coverage_curves

    curves = pd.concat([risk_coverage_curves(scores[(backbone, d)]).assign(dataset=d)
                        for d in datasets if (backbone, d) in scores], ignore_index=True)
    return curves[["dataset", "signal", "coverage", "risk", "threshold", "n_answered"]]


_DASHES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (3, 1)))


def plot_figure5(curves: pd.DataFrame, backbone: str) -> Any:
    """Figure 5 from :func:`figure5_curves`: one chart of selective risk against coverage per
    benchmark (two per row), one line per signal, the process score thick."""
    import matplotlib.pyplot as plt

    shown = list(dict.fromkeys(curves["dataset"]))
    ncol = min(2, len(shown))
    nrow = -(-len(shown) // ncol)
    with _rc():
        fig, axes = plt.subplots(nrow, ncol, figsize=(WIDTH, 3.4 * nrow + 0.8), squeeze=False, sharey=True)
        for ax, d in zip(axes.flat, shown):
            for k, (sig, g) in enumerate(curves[curves.dataset == d].groupby("signal", sort=False)):
                # a signal with few distinct values (terminal agreement) has a curve of a few steps
                # that other lines cover: every line has its own dash pattern, and a short curve
                # marks its points and is drawn on top
                few = len(g) <= 12
                ax.step(g["coverage"], g["risk"], where="post", label=display_label("signal", sig),
                        lw=2.4 if sig == "process_score" else 1.4,
                        ls="-" if sig == "process_score" else _DASHES[k % len(_DASHES)],
                        marker="o" if few else None, ms=4, zorder=4 if few else 2)
            ax.set(title=f"{display_label('dataset', d)} ({display_label('backbone', backbone)})", xlabel="coverage",
                   xlim=(0, 1))
        for ax in axes[:, 0]:
            ax.set_ylabel("selective risk")
        spare = list(axes.flat)[len(shown):]
        for ax in spare:
            ax.axis("off")
        handles, labels = axes[0][0].get_legend_handles_labels()
        if spare:  # the legend takes the empty panel
            spare[0].legend(handles, labels, loc="center", frameon=False, title="signal")
            fig.tight_layout()
        else:
            fig.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
            fig.tight_layout(rect=(0, 0.16 if nrow == 1 else 0.08, 1, 1))
    return fig


# --------------------------------------------------------------------------- §5.1
def plot_hard_vs_soft(cells: Sequence[Any], threshold: float, backbone: str, datasets: Sequence[str]) -> Any:
    """§5.1 (Figure S.1) from :func:`tables.hard_soft_scores`: per benchmark, histograms of the
    hard-clustering SE score (top) and of RSE (bottom), correct against wrong consensus."""
    import matplotlib.pyplot as plt

    from probeguard_core.tables.unanimous import hard_soft_scores

    if not cells:
        return _placeholder(f"§5.1 ({display_label('backbone', backbone)}): this release has no NLI records for "
                            f"{', '.join(display_label('dataset', d) for d in datasets)}; hard SE and RSE both need them")
    with _rc():
        fig, axes = plt.subplots(2, len(cells), figsize=(min(WIDTH, 3.2 * len(cells) + 1), 5.6), squeeze=False)
        for j, c in enumerate(cells):
            sc = hard_soft_scores(c, threshold)
            for i, (col, name) in enumerate((("hard_se", "hard SE score (−entropy)"), ("rse", "RSE (Eq. 3)"))):
                ax = axes[i][j]
                bins = np.linspace(sc[col].min(), sc[col].max() + 1e-9, 21)
                for ok, color, lab in ((True, "tab:blue", "correct"), (False, "tab:red", "wrong")):
                    ax.hist(sc.loc[sc["correct"] == ok, col], bins=bins, density=True, alpha=0.55, color=color,
                            label=lab)
                ax.set_xlabel(name)
                if i == 0:
                    ax.set_title(f"{display_label('dataset', c.dataset)} (n = {len(sc)})")
        axes[0][0].legend(title="consensus", frameon=False)
        fig.suptitle(f"Unanimous layer, {display_label('backbone', backbone)}")
        fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- Appendix G (Table 6)
def plot_table6_arms(flips: pd.DataFrame, missing: str | None, label: str) -> Any:
    """Table 6 as bars (Figure G.1): flip(wrong) and flip(right) per probe arm with Wilson
    intervals, the paper's values as diamonds."""
    import matplotlib.pyplot as plt

    if missing:
        return _placeholder(f"Table 6 ({label}): {missing}")
    arms = list(dict.fromkeys(flips["arm"]))
    with _rc():
        fig, ax = plt.subplots(figsize=(WIDTH * 0.85, 3.6))
        for q, dx, color, name in (("flip_wrong", -0.18, "tab:red", "wrong consensus"),
                                   ("flip_right", 0.18, "tab:blue", "correct consensus")):
            m = flips[flips["quantity"] == q].set_index("arm").loc[arms]
            xs = np.arange(len(arms)) + dx
            ax.bar(xs, m["value"], width=0.34, color=color, alpha=0.75, label=name)
            ax.errorbar(xs, m["value"], yerr=np.clip([m["value"] - m["ci_low"], m["ci_high"] - m["value"]], 0, None),
                        fmt="none", ecolor="k", capsize=3)
            ok = m["paper"].notna().to_numpy()
            ax.scatter(xs[ok], m["paper"].to_numpy()[ok], marker="D", color="k", s=20, zorder=3,
                       label="paper" if q == "flip_wrong" else None)
        ax.set_xticks(range(len(arms)), [display_label("arm", a) for a in arms])
        ax.set_ylabel("flip rate (Wilson 95 % CI)")
        ax.set_title(f"Probe arms ({label})")
        ax.legend(frameon=False)
        fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- Appendix H (Table 7)
def table7_deltas(t7: pd.DataFrame) -> pd.DataFrame:
    """The change in AUROC of each drop-one variant of Table 7 against the full score, ours and
    the paper's: ``backbone, dataset, dropped_family, delta, paper_delta``."""
    full = t7[t7["variant"] == "full"].set_index("dataset")
    drops = t7[t7["variant"].str.startswith("without")].copy()
    drops["delta"] = drops["value"].to_numpy() - full.loc[drops["dataset"], "value"].to_numpy()
    drops["paper_delta"] = drops["paper"].to_numpy() - full.loc[drops["dataset"], "paper"].to_numpy()
    return drops[["backbone", "dataset", "dropped_family", "delta", "paper_delta"]]


def plot_table7_deltas(deltas: pd.DataFrame) -> Any:
    """Figure H.1 from :func:`table7_deltas`: per benchmark, the change in AUROC when each family
    is dropped, ours beside the paper's."""
    import matplotlib.pyplot as plt

    fams = list(dict.fromkeys(deltas["dropped_family"]))
    parts = list(deltas.groupby("dataset", sort=False))
    with _rc():
        fig, axes = plt.subplots(1, max(1, len(parts)), figsize=(min(WIDTH, 2.6 * len(parts) + 1.6), 3.4),
                                 sharey=True, squeeze=False)
        for ax, (d, part) in zip(axes[0], parts):
            part = part.set_index("dropped_family").loc[fams]
            ax.barh(np.arange(len(fams)) + 0.2, part["delta"], height=0.4, color="tab:purple", label="ours")
            ax.barh(np.arange(len(fams)) - 0.2, part["paper_delta"], height=0.4, color="lightgray", label="paper")
            ax.axvline(0, color="k", lw=0.8)
            ax.set_yticks(range(len(fams)), fams)
            ax.set_title(display_label("dataset", d))
            ax.set_xlabel("ΔAUROC vs full")
        axes[0][0].invert_yaxis()
        # the legend sits under the charts, never over a bar
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="lower center", ncol=2, frameon=False)
        fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


# --------------------------------------------------------------------------- Appendix I (Table 8)
def plot_table8(long: pd.DataFrame, alpha: float, n_splits: int, min_unanimous: int, label: str) -> Any:
    """Figure I.1 from :func:`tables.table8`'s long table: certified coverage against the layer's
    error rate per specialty shown in Table 8, ours and the paper's, α dashed."""
    import matplotlib.pyplot as plt

    shown = long[long["shown"] & (long["specialty"] != "(whole layer)")]
    with _rc():
        fig, ax = plt.subplots(figsize=(WIDTH * 0.8, 4.6))
        if shown.empty:
            ax.text(0.5, 0.5, f"no specialty has ≥ {min_unanimous} unanimous questions in this release",
                    ha="center", va="center", transform=ax.transAxes, color="dimgray")
        else:
            wide = shown.pivot_table(index="specialty", columns="quantity", values=["value", "paper"], sort=False,
                                     dropna=False)
            ax.scatter(wide[("value", "unanimous_error")], wide[("value", "certified_coverage")], color="tab:purple",
                       label="ours")
            if ("paper", "certified_coverage") in wide and wide[("paper", "certified_coverage")].notna().any():
                ax.scatter(wide[("paper", "unanimous_error")], wide[("paper", "certified_coverage")],
                           color="lightgray", edgecolor="k", label="paper")
            for sp, row in wide.iterrows():
                ax.annotate(sp, (row[("value", "unanimous_error")], row[("value", "certified_coverage")]),
                            fontsize=FONT - 2, xytext=(4, 3), textcoords="offset points")
            ax.legend(frameon=False)
        ax.axvline(alpha, color="k", ls="--", lw=0.8)
        ax.set_xlabel("unanimous-layer error in the specialty")
        ax.set_ylabel(f"certified coverage (α = {alpha:.2f})")
        ax.set_title(f"Specialties ({label}, {n_splits} splits)")
        fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- Appendix J
def plot_appendix_j(cells: Sequence[Any], arm: str, backbone: str) -> Any:
    """Figure J.1: per benchmark of ``backbone``, histograms of the wall seconds per probed
    question of the substrate and of the ``arm`` probe (read from the records' ``cost``)."""
    import matplotlib.pyplot as plt

    from probeguard_core.tables.appendices import cost_frame

    frames = {c.label: cost_frame(c, arm) for c in cells if c.backbone == backbone}
    cells = [c for c in cells if c.label in frames and frames[c.label]["probe_cost"].any()
             and frames[c.label]["substrate_cost"].any()]
    if not cells:
        return _placeholder(f"Appendix J ({display_label('backbone', backbone)}): this release has no cell with both "
                            f"substrate and {display_label('arm', arm)} probe costs; the figure needs them")
    ncol = min(2, len(cells))
    nrow = -(-len(cells) // ncol)
    with _rc():
        fig, axes = plt.subplots(nrow, ncol, figsize=(WIDTH, 3.0 * nrow + 0.6), squeeze=False, sharey=True)
        for ax, c in zip(axes.flat, cells):
            f = frames[c.label]
            probed = f["probe_wall_s"].to_numpy()[f["probe_cost"].to_numpy()]
            sub = f["substrate_wall_s"].to_numpy()[(f["probe_cost"] & f["substrate_cost"]).to_numpy()]
            bins = np.linspace(0, max([*sub.tolist(), *probed.tolist()]) * 1.02, 30)
            ax.hist(sub, bins=bins, alpha=0.6, color="tab:gray", label="substrate")
            ax.hist(probed, bins=bins, alpha=0.6, color="tab:orange", label="probe")
            ax.set_title(display_label("dataset", c.dataset))
            ax.set_xlabel("wall seconds per probed question")
        for ax in list(axes.flat)[len(cells):]:
            ax.axis("off")
        axes[0][0].legend(frameon=False)
        fig.suptitle(f"Cost of a unanimous question ({display_label('backbone', backbone)})")
        fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- beyond the paper
def plot_theorem1(audit: pd.DataFrame, delta: float, n_draws: int) -> Any:
    """Figure T.1 from :func:`tables.theorem1_audit`: violation fraction per α and population,
    with its one-sided 95 % upper bound, against δ."""
    import matplotlib.pyplot as plt

    with _rc():
        fig, ax = plt.subplots(figsize=(WIDTH * 0.85, 3.8))
        for (src, g), off in zip(audit.groupby("source", sort=False), (-0.004, 0.004)):
            ax.errorbar(g.alpha + off, g.violation_fraction, yerr=[0 * g.upper_95, g.upper_95 - g.violation_fraction],
                        fmt="o", capsize=4, label=f"{src} (bar: 95 % upper bound)")
        ax.axhline(delta, color="tab:red", ls="--", label=f"δ = {delta}")
        ax.set(xlabel="target α", ylabel="P[risk(λ̂) > α]", title=f"Theorem 1 audit ({n_draws} draws per α)")
        ax.legend(frameon=False)
        fig.tight_layout()
    return fig


def plot_whatif(wi: pd.DataFrame, observed: Mapping[str, Any], why: str | None, paper_points: Sequence[tuple[float, float]],
                alpha: float) -> Any:
    """Figure W.1 from :func:`tables.whatif`: certified coverage against calibration size (one
    line per base error rate) and against base error rate (one line per calibration size), the
    release's own layer starred unless ``why`` says it is absent, the paper's §4.4 points as
    diamonds (those that are finite)."""
    import matplotlib.pyplot as plt

    rates, sizes = wi["error_rate"].nunique(), wi["n_cal"].nunique()
    with _rc():
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(WIDTH, 4.2))
        for (_, part), col in zip(wi.groupby("error_rate"), plt.cm.viridis(np.linspace(0, 0.9, rates))):
            a1.errorbar(part["n_cal"], part["coverage_mean"], yerr=part["coverage_sd"], marker="o", ms=4, capsize=2,
                        color=col, label=f"error {part['base_error'].iloc[0]:.3f}")
        if not why:
            a1.scatter([observed["n_cal"]], [observed["coverage_mean"]], marker="*", s=160, color="tab:red", zorder=4,
                       label="this release")
        pts = [(x, y) for x, y in paper_points if np.isfinite(x) and np.isfinite(y)]
        if pts:
            a1.scatter(*zip(*pts), marker="D", color="k", zorder=4, label="paper §4.4")
        a1.set_xscale("log")
        a1.set(xlabel="calibration questions", ylabel=f"certified coverage (α = {alpha:.2f})", ylim=(-0.03, 1.03))
        a1.legend(fontsize=FONT - 3, frameon=False)
        for (n_cal, part), col in zip(wi.groupby("n_cal"), plt.cm.magma(np.linspace(0.1, 0.85, sizes))):
            a2.plot(part["base_error"], part["coverage_mean"], marker="o", ms=4, color=col, label=f"{n_cal} questions")
        a2.axvline(alpha, color="k", ls="--", lw=0.8)
        a2.text(alpha, 1.0, " α", va="top")
        if not why:
            a2.scatter([observed["base_error"]], [observed["coverage_mean"]], marker="*", s=160, color="tab:red", zorder=4)
        a2.set(xlabel="base error rate", ylim=(-0.03, 1.03))
        a2.legend(fontsize=FONT - 3, frameon=False)
        fig.tight_layout()
    return fig


def whatif_paper_points(backbone: str, dataset: str, alpha: float) -> list[tuple[float, float]]:
    """The paper's two MedQA operating points at ``alpha`` for Figure W.1, as (calibration
    size, certified coverage): the calibration half of its unanimous layer (§1's n unanimous)
    and that half enlarged with the §4.4 in-domain questions; NaN where the paper has no value."""
    from probeguard_core.paper import reported

    def paper_value(**k: Any) -> float:
        r = reported(missing_ok=True, **k)
        return float(r["value"].iloc[0]) if len(r) == 1 else np.nan

    n_layer = paper_value(source="§1", quantity="n_unanimous", backbone=backbone, dataset=dataset)
    n_added = paper_value(source="§4.4", quantity="n_calibration_added", backbone=backbone, dataset=dataset)
    cov = {arm: paper_value(source="§4.4", quantity="certified_coverage", backbone=backbone, dataset=dataset, arm=arm,
                            alpha=alpha, stratum="S1") for arm in ("stratified_ltt", "stratified_ltt_augmented")}
    return [(n_layer // 2, cov["stratified_ltt"]), (n_layer // 2 + n_added, cov["stratified_ltt_augmented"])]
