"""The cold-start dashboard's panels as data: each one's title, its queries (PromQL with Grafana's `$model` and
`$__rate_interval` variables) and how to draw it. observability/dashboard.py builds the Grafana dashboard from
them; the tests evaluate every query in a real Prometheus holding the agents' and vLLM's own series.

Series: the node agent's (docs/metrics.md, node_agent/runtime/metrics.py) and vLLM's (`vllm:` series of its
`PrometheusStatLogger`, vllm/v1/metrics/loggers.py), as the community chart's `kubernetes-pods` job labels them
(`namespace`, `pod`, `node`). A vLLM pod's namespace is its model's name (model_workload), so `$model` selects both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from warmstart.autoscaling import METRICS, SIGNAL_WINDOW

MODEL = 'model=~"$model"'
MODEL_NAMESPACE = 'namespace=~"$model"'
RATE = "$__rate_interval"
# A bar's own interval: each event in one bar only (the panels give it a floor of BAR_FLOOR, four 15 s scrapes).
BAR = "$__interval"
BAR_FLOOR = "1m"
RUNNING = f"vllm:num_requests_running{{{MODEL_NAMESPACE}}}"
WAITING = METRICS["waiting_requests"]  # what the autoscaler reads, averaged as it averages (SIGNAL_WINDOW)


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # timeseries | stacked (bars per interval, at least BAR_FLOOR) | stat
    width: int = 12
    tags: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class RowSpec:
    title: str
    panels: tuple[PanelSpec, ...]


def _increase(metric: str, by: str, selector: str = MODEL) -> str:
    """Events per bar."""
    return f"sum by ({by}) (increase({metric}{{{selector}}}[{BAR}]))"


ROWS = (
    RowSpec(
        "Pod starts",
        (
            PanelSpec(
                "Starts by case",
                "vLLM pod starts that became Ready, by the estimate's three cases: cold (torch.compile ran), new "
                "node (a node created for the pod, its caches restored) and warm (a node that was there).",
                (Query(_increase("warmstart_pod_start_seconds_count", "case"), "{{case}}"),),
                kind="stacked",
            ),
            PanelSpec(
                "Start time by case (p90)",
                "Creation to Ready, the 90th percentile of the interval's starts of each case.",
                (
                    Query(
                        "histogram_quantile(0.9, sum by (le, case) "
                        f"(rate(warmstart_pod_start_seconds_bucket{{{MODEL}}}[{RATE}])))",
                        "{{case}}",
                    ),
                ),
                unit="s",
            ),
            PanelSpec(
                "Seconds per phase (mean of the interval's starts)",
                "Where a start's time goes: node, scheduling, image, restore, weights, compile, engine, other.",
                (
                    Query(
                        f"sum by (phase) (rate(warmstart_pod_start_phase_seconds_sum{{{MODEL}}}[{RATE}])) / "
                        f"sum by (phase) (rate(warmstart_pod_start_phase_seconds_count{{{MODEL}}}[{RATE}]))",
                        "{{phase}}",
                    ),
                ),
                unit="s",
                kind="stacked",
            ),
            PanelSpec(
                "Starts by outcome",
                "Starts timed on the nodes: ready, or not-ready (the pod went away or its container restarted first).",
                (Query(_increase("warmstart_pod_starts_total", "outcome"), "{{outcome}}"),),
                kind="stacked",
            ),
        ),
    ),
    RowSpec(
        "Caches",
        (
            PanelSpec(
                "Compile cache per start",
                "The agent's judgement of each Ready start: hit (loaded), or miss and why (load-failure, "
                "hash-changed, not-restored, compiled).",
                (Query(_increase("warmstart_compile_cache_use_total", "outcome, cause"), "{{outcome}} {{cause}}"),),
                kind="stacked",
            ),
            PanelSpec(
                "Compile cache per node",
                "Hits and misses on each node over the interval.",
                (Query(_increase("warmstart_compile_cache_use_total", "node, outcome"), "{{node}} {{outcome}}"),),
                kind="stacked",
            ),
            PanelSpec(
                "Engine caches per start",
                "What each start did with the engine's other caches (DeepGEMM, FlashInfer, the startup plan, ...).",
                (Query(_increase("warmstart_engine_cache_use_total", "cache, use"), "{{cache}} {{use}}"),),
                kind="stacked",
            ),
            PanelSpec(
                "Restores and publishes",
                "Compile-cache archives restored onto nodes and published from them, by outcome.",
                (
                    Query(_increase("warmstart_compile_cache_restores_total", "outcome"), "restore {{outcome}}"),
                    Query(_increase("warmstart_compile_cache_publishes_total", "outcome"), "publish {{outcome}}"),
                ),
                kind="stacked",
            ),
        ),
    ),
    RowSpec(
        "Nodes and prefetch",
        (
            PanelSpec(
                "Nodes warm and cold",
                "Nodes holding the model's cache (warm) and nodes whose last outcome left them without (cold).",
                (
                    Query(f"sum by (cache) (warmstart_node_cache_ready{{{MODEL}}})", "warm ({{cache}})"),
                    Query(f"sum by (cache) (1 - warmstart_node_cache_ready{{{MODEL}}})", "cold ({{cache}})"),
                ),
            ),
            PanelSpec(
                "Weights prefetch throughput",
                "Bytes per second downloaded into the nodes' weights copies.",
                (
                    Query(
                        f"sum by (model) (rate(warmstart_weights_downloaded_bytes_total{{{MODEL}}}[{RATE}]))",
                        "{{model}}",
                    ),
                ),
                unit="Bps",
            ),
            PanelSpec(
                "Bytes moved",
                "Weights downloaded to node copies and compile-cache archives restored and published.",
                (
                    Query(_increase("warmstart_weights_downloaded_bytes_total", "model"), "weights {{model}}"),
                    Query(_increase("warmstart_compile_cache_bytes_total", "direction"), "compile cache {{direction}}"),
                ),
                unit="bytes",
                kind="stacked",
            ),
            PanelSpec(
                "Time without a node copy",
                "Each node's seconds without a complete copy of the model's weights (0: it has one); the alert "
                "WarmstartNodeCopyMissing fires past the model's prefetch bound.",
                (Query(f"max by (node) (warmstart_node_copy_missing_seconds{{{MODEL}}})", "{{node}}"),),
                unit="s",
            ),
        ),
    ),
    RowSpec(
        "Autoscaling and load",
        (
            PanelSpec(
                "Queue (what the autoscaler reads)",
                "vLLM's requests waiting, each pod's minute average summed over the model's pods: the value KEDA "
                "gives the HPA, which divides it by the replicas (starting ones included) and compares it with the "
                "model's target per pod (docs/autoscaling.md).",
                (
                    Query(
                        f"sum by (namespace) (avg_over_time({WAITING}{{{MODEL_NAMESPACE}}}[{SIGNAL_WINDOW}]))",
                        "{{namespace}}",
                    ),
                ),
            ),
            PanelSpec(
                "Serving pods and running requests",
                "vLLM pods reporting (serving) and the requests they run.",
                (
                    Query(
                        f"count by (namespace) (vllm:num_requests_running{{{MODEL_NAMESPACE}}})", "pods {{namespace}}"
                    ),
                    Query(
                        f"sum by (namespace) (vllm:num_requests_running{{{MODEL_NAMESPACE}}})", "running {{namespace}}"
                    ),
                ),
            ),
            PanelSpec(
                "KV cache usage",
                "vLLM's KV-cache use, 0 to 1, averaged over the model's pods.",
                (Query(f"avg by (namespace) (vllm:kv_cache_usage_perc{{{MODEL_NAMESPACE}}})", "{{namespace}}"),),
                unit="percentunit",
            ),
            PanelSpec(
                "Agent loops: seconds since progress",
                "Each node agent loop's seconds since it last made progress; past its bound the liveness probe "
                "restarts the agent and WarmstartAgentLoopStalled fires.",
                (Query("max by (loop) (warmstart_agent_loop_seconds_since_progress)", "{{loop}}"),),
                unit="s",
            ),
        ),
    ),
)


def panels() -> list[PanelSpec]:
    return [panel for row in ROWS for panel in row.panels]


def concrete(expr: str, *, model: str = ".+", rate_interval: str = "5m", interval: str = BAR_FLOOR) -> str:
    """The query as Grafana sends it, its variables given values (for evaluating it outside Grafana)."""
    return expr.replace(RATE, rate_interval).replace(BAR, interval).replace("$model", model)


def series_names(expr: str) -> set[str]:
    """The metric names a query reads (warmstart's and vLLM's)."""
    return set(re.findall(r"\b(warmstart_[a-z_]+|vllm:[a-z_:]+)", expr))
