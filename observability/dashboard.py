"""The cold-start dashboard, built with grafana-foundation-sdk (Apache-2.0) from observability/panels.py: a
Grafana dashboard JSON whose every query is one of the panels' (no Grafana server is needed or run).

Variables: `datasource` (any Prometheus data source) and `model` (the models the agents report, several or all).
"""

from __future__ import annotations

import json

from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.builders.common import StackingConfig
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import GraphDrawStyle, StackingMode
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh, VariableSort

from observability.panels import BAR_FLOOR, ROWS, PanelSpec

UID = "warmstart-cold-starts"
TITLE = "warmstart: cold starts"
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
PANEL_HEIGHT = 8


def _panel(spec: PanelSpec, panel_id: int) -> timeseries.Panel | stat.Panel:
    built: timeseries.Panel | stat.Panel
    if spec.kind == "stat":
        built = stat.Panel()
    else:
        built = timeseries.Panel()
        if spec.kind == "stacked":
            built.draw_style(GraphDrawStyle.BARS).fill_opacity(80).stacking(StackingConfig().mode(StackingMode.NORMAL))
            built.interval(BAR_FLOOR)
    built.id(panel_id).title(spec.title).description(spec.description).unit(spec.unit).datasource(DATASOURCE)
    built.height(PANEL_HEIGHT).span(spec.width)
    for index, query in enumerate(spec.queries):
        built.with_target(
            prometheus.Dataquery().expr(query.expr).legend_format(query.legend).ref_id(chr(ord("A") + index))
        )
    return built


def build_dashboard() -> dict:
    """The dashboard as Grafana's JSON model (a dict)."""
    board = (
        dashboard.Dashboard(TITLE)
        .uid(UID)
        .tags(["warmstart", "vllm"])
        .description("vLLM pod starts on EKS: cases, phases, caches per start and per node, prefetch, autoscaling.")
        .refresh("1m")
        .time("now-24h", "now")
        .timezone("browser")
        .with_variable(dashboard.DatasourceVariable("datasource").label("Data source").type("prometheus"))
        .with_variable(
            dashboard.QueryVariable("model")
            .label("Model")
            .datasource(DATASOURCE)
            .query("label_values(warmstart_pod_starts_total, model)")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".+")
        )
    )
    panel_id = 0
    for row in ROWS:
        panel_id += 1
        board.with_row(dashboard.Row(row.title).id(panel_id))
        for spec in row.panels:
            panel_id += 1
            board.with_panel(_panel(spec, panel_id))
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def dashboard_json() -> str:
    return json.dumps(build_dashboard(), indent=2, sort_keys=True) + "\n"
