"""The cold-start dashboard and the alert rules on real series: the environment's Prometheus (the shipped chart's
version, its `kubernetes-pods` job, warmstart's rendered settings and rules) scraped every real agent and vLLM of the
chain from its first start (tests/engine/scraping.py). A warm start on node A serving 32 clients adds the third case
and vLLM's load.

Every panel's query returns data over the chain, as Grafana asks it (a range query); every alert rule evaluates
without an error; the query KEDA runs for the autoscaler returns the sum over the serving pods. Where
WARMSTART_DASHBOARD_PICTURES names a folder, each panel's results are drawn there (make dashboard-pictures)."""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from observability.alerts import COLD_SHARE, COLD_STARTS_MIN
from observability.panels import concrete, panels
from tests.engine.server import PROMPT
from warmstart.autoscaling import scaling_policy
from warmstart.catalog import default_catalog
from warmstart.workload import VLLM_PORT

pytestmark = pytest.mark.engine

# Clients sending completions back to back for LOAD_SECONDS, each of this many tokens: vLLM runs them through
# several scrapes.
CLIENTS, LOAD_SECONDS, COMPLETION_TOKENS = 32, 15, 256
# Grafana's $__rate_interval and a bar's $__interval for a panel of the chain's few minutes (scraped every second).
RATE_INTERVAL, BAR_INTERVAL = "2m", "10s"
STEP = 2.0  # seconds between a range query's points


def _client(model: str, until: float, answers: list) -> None:
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": COMPLETION_TOKENS, "temperature": 0}).encode()
    while time.time() < until:
        request = urllib.request.Request(
            f"http://127.0.0.1:{VLLM_PORT}/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310 - loopback
            answers.append(json.loads(response.read()))


@pytest.fixture(scope="session")
def scraped(chain):
    """The chain, then a warm start on node A serving clients while Prometheus scrapes it."""
    cluster = chain["cluster"]
    prometheus = cluster.scraping.server
    warm, server = cluster.start("warm", cluster.nodes["node-a"], keep_serving=True)
    answers: list = []
    try:
        until = time.time() + LOAD_SECONDS
        clients = [threading.Thread(target=_client, args=(cluster.model.name, until, answers)) for _ in range(CLIENTS)]
        for thread in clients:
            thread.start()
        for thread in clients:
            thread.join(timeout=LOAD_SECONDS + 180)
        time.sleep(3)  # a scrape of the server at rest
        pods = {r["metric"]["pod"] for r in prometheus.query('vllm:num_requests_running{namespace!=""}')}
    finally:
        server.stop()
    time.sleep(3)  # the agents' last scrape after the warm start's judgement
    return {**chain, "warm": warm, "answers": answers, "vllm_pods": pods, "until": time.time()}


def _finite(results: list[dict]) -> bool:
    return any(not math.isnan(float(value)) for series in results for _, value in series.get("values", []))


def test_every_target_is_scraped_through_the_charts_job_and_its_labels(scraped):
    prometheus = scraped["cluster"].scraping.server
    targets = prometheus.targets()
    agents = [t for t in targets if t["labels"].get("app_kubernetes_io_name") == "warmstart-agent"]
    assert sorted(t["labels"]["node"] for t in agents) == ["node-a", "node-b", "node-c", "node-d"]
    for target in agents:
        assert target["health"] == "up", target
        assert target["labels"]["namespace"] == "warmstart-system" and target["labels"]["job"] == "kubernetes-pods"
        assert target["scrapeUrl"].endswith(":9400/metrics")  # the annotations' port and path
    assert len(scraped["answers"]) >= CLIENTS
    assert scraped["vllm_pods"], "vLLM's own series were scraped through the pod's annotations"


def test_every_panel_query_returns_data_from_the_real_series(scraped):
    prometheus = scraped["cluster"].scraping.server
    start, end = scraped["scraped_from"], scraped["until"]
    drawn = {}
    empty = []
    for panel in panels():
        for query in panel.queries:
            expr = concrete(query.expr, rate_interval=RATE_INTERVAL, interval=BAR_INTERVAL)
            results = prometheus.query_range(expr, start, end, STEP)
            drawn.setdefault(panel.title, []).append({"legend": query.legend, "expr": expr, "results": results})
            if not _finite(results):
                empty.append((panel.title, expr))
    assert not empty, empty
    pictures = os.environ.get("WARMSTART_DASHBOARD_PICTURES")
    if pictures:
        from tests.monitoring.pictures import draw_panels

        draw_panels(drawn, Path(pictures), start=start)


Labels = tuple[tuple[str, str], ...]


def _agents_total(cluster, name: str) -> dict[Labels, float]:
    """A counter's samples summed over every node's agent, by their labels but the model's (the agents' own)."""
    totals: dict[Labels, float] = {}
    for node in cluster.nodes.values():
        for family in text_string_to_metric_families(node.agent.metrics.exposition()):
            for sample in family.samples:
                if sample.name == name:
                    key = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "model"))
                    totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def _prometheus_total(prometheus, name: str, by: list[str], at: float) -> dict[Labels, float]:
    results = prometheus.query(f'sum by ({", ".join(by)}) ({name}{{model=~".+"}})', at)
    return {tuple(sorted((k, r["metric"][k]) for k in by)): float(r["value"][1]) for r in results}


def test_the_scraped_counts_are_the_agents_own(scraped):
    """What Prometheus holds is what the agents counted: each start's case, each compile-cache judgement."""
    cluster, prometheus, at = scraped["cluster"], scraped["cluster"].scraping.server, scraped["until"]
    for name, by in (
        ("warmstart_pod_start_seconds_count", ["case", "node_kind"]),
        ("warmstart_compile_cache_use_total", ["cause", "outcome"]),
        ("warmstart_compile_cache_restores_total", ["outcome"]),
    ):
        assert _prometheus_total(prometheus, name, by, at) == _agents_total(cluster, name), name
    cases = _prometheus_total(prometheus, "warmstart_pod_start_seconds_count", ["case"], at)
    assert sum(cases.values()) == 4, cases  # cold, restored, node copy, warm: each start timed once
    assert cases[(("case", "cold"),)] >= 1, cases  # node A compiled


def test_the_alerts_the_runs_series_call_for_fire_in_the_real_prometheus(scraped):
    """vLLM's CPU build cannot load its own AOT artifact (test_engine.py): every restored start compiles again, so
    the run's own series call for the load-failure alert and, with most starts cold, the cold-start one."""
    cluster, prometheus, at = scraped["cluster"], scraped["cluster"].scraping.server, scraped["until"]
    causes = _prometheus_total(prometheus, "warmstart_compile_cache_use_total", ["cause"], at)
    cases = _prometheus_total(prometheus, "warmstart_pod_start_seconds_count", ["case"], at)
    cold, every = cases.get((("case", "cold"),), 0), sum(cases.values())
    expected = set()
    if causes.get((("cause", "load-failure"),), 0) > 0:
        expected.add("WarmstartCompileCacheLoadFailures")
    if cold >= COLD_STARTS_MIN and cold / every > COLD_SHARE:
        expected.add("WarmstartStartsFallingBackToCold")
    assert expected, (causes, cases)  # the CPU build's run calls for at least the load-failure alert
    deadline = time.monotonic() + 45  # the rendered evaluation interval is 15 s
    while True:
        firing = {
            a["labels"]["alertname"]
            for a in prometheus.api("alerts")["alerts"]
            if a["state"] == "firing" and a["labels"].get("model") == cluster.model.name
        }
        if expected <= firing or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert expected <= firing, (expected, firing)
    assert "WarmstartAgentLoopStalled" not in firing and "WarmstartCompileCacheRestoresFailing" not in firing


def test_every_alert_rule_evaluates_in_the_real_prometheus(scraped):
    prometheus = scraped["cluster"].scraping.server
    time.sleep(1)
    groups = prometheus.rule_groups()
    rules = [rule for group in groups for rule in group["rules"]]
    assert rules, groups
    deadline = time.monotonic() + 40  # the rendered evaluation interval is 15 s
    while any(rule.get("lastEvaluation", "").startswith("0001") for rule in rules) and time.monotonic() < deadline:
        time.sleep(2)
        rules = [rule for group in prometheus.rule_groups() for rule in group["rules"]]
    for rule in rules:
        assert rule["health"] == "ok", (rule["name"], rule.get("lastError"))
        assert not rule["lastEvaluation"].startswith("0001"), rule["name"]
        prometheus.query(rule["query"])  # and directly, as an instant query


def test_the_autoscalers_query_returns_the_sum_over_the_serving_pods(scraped):
    """The query KEDA's Prometheus scaler runs for the model (one series: it refuses several), on vLLM's own
    series: the sum of each pod's minute average."""
    cluster = scraped["cluster"]
    prometheus = cluster.scraping.server
    policy = scaling_policy(cluster.model, cluster.config, default_catalog())
    assert policy is not None  # dev's model autoscales
    namespace = cluster.model.name
    at = scraped["until"] - 6  # while the warm pod served
    (result,) = prometheus.query(policy.query(namespace), at)
    per_pod = prometheus.query(f'avg_over_time({policy.source_metric}{{namespace="{namespace}"}}[1m])', at)
    assert sorted(r["metric"]["pod"] for r in per_pod) == sorted(scraped["vllm_pods"])
    assert float(result["value"][1]) == pytest.approx(sum(float(r["value"][1]) for r in per_pod))
