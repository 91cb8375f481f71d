"""The cold-start dashboard and the alert rules as files (observability/): their shape, that every series they read
is one the agent or vLLM serves, the manifests against their schemas, and the config that labels them. A real
Prometheus evaluates every query (tests/engine/test_monitoring.py) and promtool tests every rule
(tests/monitoring/)."""

from __future__ import annotations

import json

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from contracts.pruner_report import PrunerReport
from contracts.start_record import StartTimeline
from node_agent.runtime.liveness import Liveness
from node_agent.runtime.metrics import AgentMetrics
from observability.alerts import PREFETCH_FLOOR_SECONDS, alert_rules, prefetch_bound_seconds
from observability.dashboard import UID, build_dashboard, dashboard_json
from observability.files import FOLDER, dashboard_config_map, prometheus_rule, write_monitoring
from observability.panels import concrete, panels, series_names
from render import render_workloads, write_kustomization
from tests.builders import only_problem, raw
from tests.manifest_validation import validate_manifest
from tests.synth import SHIPPED_ENVIRONMENTS
from warmstart.autoscaling import METRICS
from warmstart.catalog import default_catalog
from warmstart.loader import load_config, parse_config

VLLM_SERIES = set(METRICS.values()) | {"vllm:num_requests_running"}


def agent_series() -> set[str]:
    """Every sample name the agent serves once each of its metrics has a value."""
    metrics = AgentMetrics()
    timeline = StartTimeline(
        model="m", namespace="m", pod="p", uid="u", node="n", start=0, outcome="ready", created=0.0, ready=9.0,
        new_node=True, image="present", restore="restored", weights_source="node", compile_cache="hit",
        vllm_log_format="0.21.0", phases={"engine": 3.0}, engine_caches={"deep_gemm": "loaded"},
    )  # fmt: skip
    metrics.observe_start(timeline)
    metrics.restored("m", "restored", 1)
    metrics.published("m", "published", 1)
    metrics.judged("m", "hit", "loaded")
    metrics.weights_synced("m", "downloaded", 1)
    metrics.refused("pod")
    metrics.pruner_reported(PrunerReport(1796600000.0, "pruned"))
    liveness = Liveness()
    liveness.register("tick", 10)
    metrics.watch_loops(liveness)
    return {s.name for f in text_string_to_metric_families(metrics.exposition()) for s in f.samples}


def every_expression(config) -> list[str]:
    expressions = [query.expr for panel in panels() for query in panel.queries]
    return expressions + [rule["expr"] for group in alert_rules(config, default_catalog()) for rule in group["rules"]]


@pytest.mark.parametrize("name", SHIPPED_ENVIRONMENTS)
def test_every_series_a_panel_or_an_alert_reads_is_one_the_agent_or_vllm_serves(name):
    served = agent_series()
    for expr in every_expression(load_config(f"config/{name}.yaml")):
        names = series_names(expr)
        assert names, expr
        for series in names:
            assert series in served or series in VLLM_SERIES, (series, expr)


def test_the_dashboard_is_grafanas_json_with_every_panel_on_the_data_source_variable():
    board = build_dashboard()
    assert board["uid"] == UID and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["model"]["multi"] and variables["model"]["includeAll"] and variables["model"]["allValue"] == ".+"
    drawn = [p for p in board["panels"] if p["type"] != "row"]
    assert [p["title"] for p in drawn] == [spec.title for spec in panels()]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in drawn:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"] and all(t["expr"] for t in panel["targets"])
        assert [t["refId"] for t in panel["targets"]] == [chr(ord("A") + i) for i in range(len(panel["targets"]))]
        position = panel["gridPos"]
        assert position["x"] + position["w"] <= 24 and position["h"] > 0
    assert json.loads(dashboard_json()) == board  # the file is the dashboard, byte-stable (sorted keys)
    assert dashboard_json() == dashboard_json()


def test_the_queries_use_only_the_dashboards_own_variables():
    for panel in panels():
        for query in panel.queries:
            left = concrete(query.expr)
            assert "$" not in left, query.expr  # no variable the dashboard does not define


@pytest.mark.parametrize("name", SHIPPED_ENVIRONMENTS)
def test_the_dashboard_configmap_and_the_prometheusrule_against_their_schemas(name):
    config = load_config(f"config/{name}.yaml")
    config_map = dashboard_config_map(config)
    validate_manifest(config_map, config.cluster.kubernetes_version)
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"  # the sidecar's default label
    # kubectl's client-side apply keeps the whole object in an annotation of at most 256 KiB.
    assert len(json.dumps(config_map)) < 256 * 1024
    rule = prometheus_rule(config, default_catalog())
    validate_manifest(rule, config.cluster.kubernetes_version)
    assert rule["spec"]["groups"] == alert_rules(config, default_catalog())


def test_each_alert_names_its_severity_and_what_to_read():
    config = load_config("config/prod.yaml")
    (group,) = alert_rules(config, default_catalog())
    names = [rule["alert"] for rule in group["rules"]]
    assert {
        "WarmstartStartsFallingBackToCold",
        "WarmstartAgentLoopStalled",
        "WarmstartCompileCacheLoadFailures",
        "WarmstartCompileCacheRestoresFailing",
        "WarmstartCompileCachePublishFailing",
        "WarmstartNodeCopyMissing",
        "WarmstartPrunerFailing",
        "WarmstartPrunerNotRunning",
    } == set(names)
    for rule in group["rules"]:
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert rule["annotations"]["runbook"].startswith("docs/monitoring.md#")
    # One copy rule per model whose weights the nodes cache, each with its own bound.
    copies = [rule for rule in group["rules"] if rule["alert"] == "WarmstartNodeCopyMissing"]
    assert sorted(json.dumps(r["expr"]).split('model=\\"')[1].split('\\"')[0] for r in copies) == sorted(
        m.name for m in config.models
    )


def test_the_pruner_is_late_after_two_periods_of_a_rate_schedule_and_a_cron_schedule_gets_no_lateness_alert():
    document = raw()
    document["pruning"] = {"schedule": "rate(6 hours)"}
    (group,) = alert_rules(parse_config(document), default_catalog())
    (late,) = [rule for rule in group["rules"] if rule["alert"] == "WarmstartPrunerNotRunning"]
    assert late["expr"].endswith(f"> {2 * 6 * 3600 + 3600}")
    document["pruning"] = {"schedule": "cron(0 3 * * ? *)"}
    (group,) = alert_rules(parse_config(document), default_catalog())
    names = [rule["alert"] for rule in group["rules"]]
    assert "WarmstartPrunerFailing" in names and "WarmstartPrunerNotRunning" not in names


def test_a_model_whose_weights_are_not_cached_gets_no_copy_alert():
    document = raw()
    document["models"][0]["weights_cache"] = False
    config = parse_config(document)
    (group,) = alert_rules(config, default_catalog())
    assert "WarmstartNodeCopyMissing" not in [rule["alert"] for rule in group["rules"]]


def test_the_prefetch_bound_grows_with_the_model_and_never_falls_below_the_floor():
    config = load_config("config/prod.yaml")
    model = config.models[0]
    small = prefetch_bound_seconds(model, config, default_catalog())
    huge = prefetch_bound_seconds(model.model_copy(update={"size_gb": 20_000.0}), config, default_catalog())
    assert small >= PREFETCH_FLOOR_SECONDS and small % 60 == 0
    assert huge > small


def test_render_writes_the_monitoring_files_beside_the_kustomization_and_not_in_it(tmp_path):
    config = load_config("config/dev.yaml")
    files = render_workloads(config, tmp_path)
    kustomization = yaml.safe_load(write_kustomization(tmp_path, files).read_text())
    written = write_monitoring(config, default_catalog(), tmp_path)
    assert {p.name for p in written} == {
        "cold-starts-dashboard.json",
        "cold-starts-dashboard.configmap.yaml",
        "warmstart-alerts.rules.yml",
        "warmstart-alerts.prometheusrule.yaml",
    }
    assert all(p.parent == tmp_path / FOLDER for p in written)
    assert not any(FOLDER in resource for resource in kustomization["resources"])
    rules = yaml.safe_load((tmp_path / FOLDER / "warmstart-alerts.rules.yml").read_text())
    assert rules == {"groups": alert_rules(config, default_catalog())}
    config_map = yaml.safe_load((tmp_path / FOLDER / "cold-starts-dashboard.configmap.yaml").read_text())
    assert json.loads(config_map["data"]["cold-starts-dashboard.json"]) == build_dashboard()


def test_the_labels_and_namespace_of_the_exports_come_from_the_config():
    document = raw()
    document["monitoring"] = {
        "namespace": "monitoring",
        "dashboard_labels": {"grafana_dashboard": "warmstart"},
        "rule_labels": {"release": "kube-prometheus-stack"},
    }
    config = parse_config(document)
    assert dashboard_config_map(config)["metadata"]["namespace"] == "monitoring"
    assert dashboard_config_map(config)["metadata"]["labels"]["grafana_dashboard"] == "warmstart"
    assert prometheus_rule(config, default_catalog())["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("rule_labels", {"release": "not a label value"}, "monitoring.rule_labels.release"),
        ("dashboard_labels", {"-bad-key": "1"}, "monitoring.dashboard_labels.-bad-key"),
        ("namespace", "Monitoring", "monitoring.namespace"),
    ],
)
def test_a_label_or_namespace_kubernetes_would_refuse_is_refused_at_synth(field, value, where):
    document = raw()
    document["monitoring"] = {field: value}
    problem = only_problem(document)
    assert problem.field.startswith(where.rsplit(".", 1)[0]), problem.field
