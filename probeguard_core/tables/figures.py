"""The paper's figures drawn from the tables builders return (matplotlib; display only).

Labels are the paper's words (:func:`paper.display_label`: dataset, model and method names),
fonts are sized for the book's page width, and a figure whose inputs the release lacks still
draws, with a line saying why. Nothing here computes a number that a CSV holds.
"""

from __future__ import annotations

from typing import Any

from probeguard_core.paper import display_label

__all__ = ["FONT", "plot_figure4"]

#: Base font size (points) of the book's figures: legible when an 11-inch-wide figure is
#: shown at the 820-px article width.
FONT = 11


def plot_figure4(r: Any) -> Any:
    """Figure 4 (§4.4) from a :class:`tables.certification.Figure4`: left, realized test risk
    against the target α of the pooled-stream arms and the stratified rule (with the risk = α
    diagonal); right, certified coverage of the unanimous layer per backbone (mean ± sd over
    splits), the stratified rule at the page's α starred."""
    import matplotlib.pyplot as plt

    arms, per_bb, alpha = r.arms, r.per_backbone, r.alpha
    with plt.rc_context({"font.size": FONT, "axes.titlesize": FONT + 1, "legend.fontsize": FONT - 1}):
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.4))
        for arm, stratum, style in (("naive_quantile", "all", "o--"), ("global_ltt", "all", "s-"),
                                    ("stratified_ltt", "S1", "^-"), ("stratified_ltt_augmented", "S1", "v-")):
            g = arms[(arms.arm == arm) & (arms.stratum == stratum)]
            where = "pooled stream" if stratum == "all" else "unanimous layer"
            a.plot(g.alpha, g.risk_mean, style, ms=3, label=f"{display_label('arm', arm)} ({where})")
        a.plot([0, 0.3], [0, 0.3], color="black", lw=1, ls=":", label="risk = α")
        a.set(xlabel="target risk α", ylabel="realized test risk (mean over splits)",
              title="Realized risk against the target", xlim=(0, 0.3))
        a.legend(loc="upper left")
        for bb, g in per_bb[per_bb.stratum == "S1"].groupby("backbone", sort=False):
            line, = b.plot(g.alpha, g.coverage_mean, label=display_label("backbone", bb))
            b.fill_between(g.alpha, g.coverage_mean - g.coverage_sd, g.coverage_mean + g.coverage_sd, alpha=0.2,
                           color=line.get_color())
        at = arms[(arms.arm == "stratified_ltt") & (arms.stratum == "S1") & (arms.alpha.round(2) == round(alpha, 2))]
        b.scatter([alpha] * len(at), at.coverage_mean, marker="*", s=160, color="black", zorder=5,
                  label=f"stratified rule at α = {alpha:.2f}")
        b.text(0.15, 0.5, "" if len(per_bb) else "the paper's rule cannot run on this release\n"
               "(no probe / NLI records for the unanimous layer)", ha="center", va="center", color="dimgray")
        b.set(xlabel="target risk α", ylabel=f"certified coverage of the unanimous layer ({display_label('dataset', r.dataset)})",
              title="Certified coverage per backbone", xlim=(0, 0.3), ylim=(0, 1))
        b.legend(loc="upper left")
        fig.tight_layout()
    return fig
