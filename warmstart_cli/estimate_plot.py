"""The estimate as a picture: one stacked bar per model and case, one colour per phase, hatched by where the figure
comes from (published, modelled from published rates, measured in this cluster), the title carrying the inputs
(nodes, instance types). Bars and totals are the same objects the table prints (matplotlib, no display)."""

from __future__ import annotations

from pathlib import Path

from warmstart.estimate import CASES, MEASURED, MODELLED, PHASES, PUBLISHED, ModelEstimate

# One colour per phase, in PHASES order (colour-blind safe: Okabe-Ito).
COLOURS = ("#999999", "#E69F00", "#56B4E9", "#009E73", "#D55E00", "#F0E442", "#0072B2", "#CC79A7")
SHORT_CASES = {CASES[0]: "cold, no warmstart", CASES[1]: "new node, warmstart", CASES[2]: "warm node"}
HATCHES = {PUBLISHED: "", MODELLED: "//", MEASURED: "xx"}


def chart_title(environment: str, estimates: list[ModelEstimate]) -> str:
    types = ", ".join(sorted({e.instance_type for e in estimates}))
    nodes = max(e.nodes for e in estimates)
    return f"warmstart {environment}: estimated pod start on {types}, {nodes} node(s) scaling out at once"


def plot_estimates(estimates: list[ModelEstimate], path: Path, environment: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI or servers
    from matplotlib import pyplot
    from matplotlib.patches import Patch

    labels, bars = [], []
    for estimate in estimates:
        for case in estimate.cases:
            labels.append(f"{estimate.model}\n{SHORT_CASES[case.case]}")
            bars.append([case.phase(phase) for phase in PHASES])
    figure, axes = pyplot.subplots(figsize=(max(7.0, 1.5 * len(labels)), 5.5), layout="constrained")
    bottoms = [0.0] * len(bars)
    for index, colour in enumerate(COLOURS):
        for position, bar in enumerate(bars):
            height = bar[index].seconds / 60
            axes.bar(
                position, height, bottom=bottoms[position], color=colour, hatch=HATCHES[bar[index].basis], width=0.7
            )
            bottoms[position] += height
    for position, total in enumerate(bottoms):
        axes.annotate(f"{total:.1f}", (position, total), ha="center", va="bottom", fontsize=8)
    axes.set_xticks(range(len(labels)), labels, fontsize=7)
    axes.set_ylabel("minutes until the pod is Ready")
    axes.set_title(chart_title(environment, estimates), fontsize=9)
    phases = [Patch(facecolor=colour, label=phase) for phase, colour in zip(PHASES, COLOURS, strict=True)]
    bases = [Patch(facecolor="white", edgecolor="black", hatch=hatch, label=basis) for basis, hatch in HATCHES.items()]
    axes.legend(handles=phases + bases, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
    return path
