"""Pictures of the cold-start dashboard's panels from a real Prometheus's answers (make dashboard-pictures): one
PNG per panel and an overview of them all, drawn with matplotlib (no Grafana is run). The README shows the
overview; docs/monitoring.md each panel."""

from __future__ import annotations

import math
import re
from pathlib import Path

from observability.panels import ROWS

COLUMNS = 4


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _label(legend: str, metric: dict) -> str:
    return re.sub(r"\{\{(\w+)\}\}", lambda m: metric.get(m.group(1), ""), legend).strip() or "value"


def _draw(axes, title: str, queries: list[dict], start: float) -> None:
    for query in queries:
        for series in query["results"]:
            points = [(float(t) - start, float(v)) for t, v in series["values"] if not math.isnan(float(v))]
            if points:
                axes.plot(*zip(*points, strict=True), label=_label(query["legend"], series["metric"]), linewidth=1.2)
    axes.set_title(title, fontsize=9)
    axes.set_xlabel("seconds into the run", fontsize=7)
    axes.tick_params(labelsize=7)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=6, loc="upper left")


def draw_panels(drawn: dict[str, list[dict]], folder: Path, *, start: float) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    titles = [panel.title for row in ROWS for panel in row.panels]
    for title in titles:
        figure, axes = plt.subplots(figsize=(6, 3.2))
        _draw(axes, title, drawn[title], start)
        figure.tight_layout()
        path = folder / f"{slug(title)}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    rows = math.ceil(len(titles) / COLUMNS)
    figure, grid = plt.subplots(rows, COLUMNS, figsize=(4.2 * COLUMNS, 2.8 * rows))
    for axes, title in zip(grid.flat, titles, strict=False):
        _draw(axes, title, drawn[title], start)
    for axes in list(grid.flat)[len(titles) :]:
        axes.axis("off")
    figure.suptitle("warmstart: cold starts (the engine tier's run, a real Prometheus's answers)", fontsize=11)
    figure.tight_layout()
    overview = folder / "overview.png"
    figure.savefig(overview, dpi=90)
    plt.close(figure)
    return [*written, overview]
