"""The estimate as a picture: one stacked bar per model and case, one colour per phase (matplotlib, no display)."""

from __future__ import annotations

from pathlib import Path

from warmstart.estimate import CASES, PHASES, ModelEstimate

# One colour per phase, in PHASES order (colour-blind safe: Okabe-Ito).
COLOURS = ("#999999", "#E69F00", "#56B4E9", "#009E73", "#D55E00", "#0072B2", "#CC79A7")
SHORT_CASES = {CASES[0]: "cold, no warmstart", CASES[1]: "new node, warmstart", CASES[2]: "warm node"}


def plot_estimates(estimates: list[ModelEstimate], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI or servers
    from matplotlib import pyplot

    labels, bars = [], []
    for estimate in estimates:
        for case in estimate.cases:
            labels.append(f"{estimate.model}\n{SHORT_CASES[case.case]}")
            bars.append([case.seconds(phase) / 60 for phase in PHASES])
    figure, axes = pyplot.subplots(figsize=(max(6.0, 1.5 * len(labels)), 5.0), layout="constrained")
    bottoms = [0.0] * len(bars)
    for index, (phase, colour) in enumerate(zip(PHASES, COLOURS, strict=True)):
        heights = [bar[index] for bar in bars]
        axes.bar(range(len(bars)), heights, bottom=bottoms, color=colour, label=phase, width=0.7)
        bottoms = [bottom + height for bottom, height in zip(bottoms, heights, strict=True)]
    for position, total in enumerate(bottoms):
        axes.annotate(f"{total:.1f}", (position, total), ha="center", va="bottom", fontsize=8)
    axes.set_xticks(range(len(labels)), labels, fontsize=7)
    axes.set_ylabel("minutes until the pod is Ready")
    axes.set_title(title)
    axes.legend(title="phase", fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
    return path
