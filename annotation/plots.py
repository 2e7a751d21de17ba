"""The stacked preference bar chart of the paper's Figure 7, as a matplotlib figure or a PNG file.

One horizontal bar per comparison: focal system wins | tie | both bad | baseline wins, as shares of
all judgments, with the sign-test stars at the end. Uses the Agg backend (no display needed).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (backend must be chosen first)
from matplotlib.figure import Figure  # noqa: E402

from annotation.stats import Comparison  # noqa: E402

SEGMENTS = (
    ("wins", "#2b6cb0", "{system} wins"),
    ("ties", "#a0aec0", "Tie"),
    ("both_bad", "#e2e8f0", "Both bad"),
    ("losses", "#dd6b20", "Baseline wins"),
)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def preference_figure(comparisons: Sequence[Comparison], title: str = "Human preference") -> Figure:
    """Build the stacked bar chart; an empty study gives a figure that says so."""
    # long system names wrap onto lines of their own instead of squeezing the bars
    labels = [f"{_clip(c.system, 60)}\nvs {_clip(c.baseline, 60)}" for c in comparisons]
    labels = ["\n".join(textwrap.fill(line, 24) for line in label.splitlines()) for label in labels]
    lines = max((label.count("\n") + 1 for label in labels), default=1)
    height = 1.2 + (0.35 + 0.18 * lines) * max(1, len(comparisons))
    fig, ax = plt.subplots(figsize=(8, height), dpi=120)
    if not comparisons:
        ax.text(0.5, 0.5, "No judgments yet", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return fig
    focal = {c.system for c in comparisons}
    for key, color, label in SEGMENTS:
        left = [
            sum(c.shares[k] for k, _, _ in SEGMENTS[: [s[0] for s in SEGMENTS].index(key)])
            for c in comparisons
        ]
        widths = [c.shares[key] for c in comparisons]
        name = label.format(system=_clip(next(iter(focal)), 24) if len(focal) == 1 else "System")
        bars = ax.barh(labels, widths, left=left, color=color, edgecolor="white", label=name)
        for bar, width in zip(bars, widths):
            if width >= 0.06:
                ax.text(
                    bar.get_x() + width / 2,
                    bar.get_y() + bar.get_height() / 2,
                    f"{width:.1%}",
                    ha="center",
                    va="center",
                    fontsize=9,
                    color="white" if key in ("wins", "losses") else "black",
                )
    for y, c in enumerate(comparisons):
        ax.text(1.01, y, c.test.stars or "n.s.", va="center", fontsize=10)
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.set_title(title)
    ax.legend(
        loc="upper center",
        bbox_to_anchor=(0.5, -0.15 if len(comparisons) > 1 else -0.3),
        ncol=4,
        frameon=False,
    )
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    fig.tight_layout()
    return fig


def save_preference_chart(
    comparisons: Sequence[Comparison], path: str | Path, title: str = "Human preference"
) -> Path:
    """Write the chart as a PNG to `path` (folders created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = preference_figure(comparisons, title)
    try:
        fig.savefig(path, format="png", bbox_inches="tight")
    finally:
        plt.close(fig)
    return path
