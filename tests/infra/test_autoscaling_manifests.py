"""What an autoscaled model deploys: a HorizontalPodAutoscaler on vLLM's per-pod queue with the policy derived
from its start time, a Deployment whose count is the autoscaler's, pods Prometheus scrapes; and, once per
cluster, Prometheus and prometheus-adapter (pinned charts, no AWS permission). Models without autoscaling keep
their fixed count and get none of it."""

from __future__ import annotations

import json

from construct_kit.serving_metrics import ADAPTER_CHART_VERSION, PROMETHEUS_CHART_VERSION, adapter_rules
from tests.manifest_validation import validate_manifest
from tests.manifests import helm_charts, of_kind
from warmstart.autoscaling import scaling_policy
from warmstart.catalog import default_catalog


def test_turning_autoscaling_off_deletes_the_autoscaler(prod):
    """kubectl's prune leaves autoscaling/v2 objects alone: the HPA is a manifest of its own, which CloudFormation
    deletes (kubectl delete) when the model stops autoscaling."""
    template = prod.model_template_json("llama-3-3-70b")
    manifests = {
        k: json.loads(r["Properties"]["Manifest"])
        for k, r in template["Resources"].items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and isinstance(r["Properties"]["Manifest"], str)
    }
    (autoscaler_id,) = [k for k in manifests if "Autoscaler" in k]
    assert [o["kind"] for o in manifests[autoscaler_id]] == ["HorizontalPodAutoscaler"]
    assert not any(
        o["kind"] == "HorizontalPodAutoscaler" for k, m in manifests.items() if k != autoscaler_id for o in m
    )


def _objects(prod, model: str) -> list[dict]:
    from tests.manifests import deployed_manifests

    return deployed_manifests(prod.model_template_json(model))


def test_the_autoscaler_of_an_autoscaled_model(prod):
    llama = next(m for m in prod.config.models if m.name == "llama-3-3-70b")
    policy = scaling_policy(llama, prod.config, default_catalog())
    (hpa,) = of_kind(_objects(prod, "llama-3-3-70b"), "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2" and hpa["metadata"]["namespace"] == "llama-3-3-70b"
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
        "minReplicas": 2,
        "maxReplicas": 4,
        "metrics": [
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "vllm_num_requests_waiting"},
                    "target": {"type": "AverageValue", "averageValue": "5"},
                },
            }
        ],
        "behavior": {
            "scaleUp": {
                "stabilizationWindowSeconds": 0,
                "selectPolicy": "Max",
                "policies": [
                    {"type": "Percent", "value": 100, "periodSeconds": 15},
                    {"type": "Pods", "value": 4, "periodSeconds": 15},
                ],
            },
            "scaleDown": {
                "stabilizationWindowSeconds": policy.scale_down_window,
                "selectPolicy": "Max",
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
            },
        },
    }
    assert policy.scale_down_window > policy.start_seconds
    validate_manifest(hpa, prod.config.cluster.kubernetes_version)  # the official schema, strict


def test_the_deployment_leaves_the_count_to_the_autoscaler_and_is_scraped(prod):
    (deployment,) = of_kind(_objects(prod, "llama-3-3-70b"), "Deployment")
    assert "replicas" not in deployment["spec"]  # a count here would be applied again on every deploy
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert {k: annotations[k] for k in annotations if k.startswith("prometheus.io/")} == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8000",
        "prometheus.io/path": "/metrics",
    }
    (budget,) = of_kind(_objects(prod, "llama-3-3-70b"), "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1  # scaled in to min_replicas 2, one may still go at a time


def test_a_fixed_model_keeps_its_count_and_gets_no_autoscaler(prod):
    objects = _objects(prod, "qwen3-6-35b-a3b")
    assert not of_kind(objects, "HorizontalPodAutoscaler")
    (deployment,) = of_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert "prometheus.io/scrape" not in (deployment["spec"]["template"]["metadata"].get("annotations") or {})


def test_prometheus_and_the_adapter_come_with_the_first_autoscaled_model(prod, dev):
    charts = helm_charts(prod.template_json("cluster"))
    prometheus, adapter = charts["prometheus"], charts["prometheus-adapter"]
    for chart, version in ((prometheus, PROMETHEUS_CHART_VERSION), (adapter, ADAPTER_CHART_VERSION)):
        assert chart["Repository"] == "https://prometheus-community.github.io/helm-charts"
        assert chart["Version"] == version and chart["Namespace"] == "warmstart-monitoring"
        assert chart["Wait"] is True
    values = json.loads(prometheus["Values"])
    assert values["server"]["global"]["scrape_interval"] == "15s"  # the chart's default minute scales late
    assert values["server"]["persistentVolume"] == {"enabled": False}  # Auto Mode has no default StorageClass
    # The chart's server.enableServiceLinks (29.27.0 values.yaml, on its Deployment): off, as on every warmstart pod.
    assert values["server"]["enableServiceLinks"] is False
    assert all(values[c] == {"enabled": False} for c in ("alertmanager", "kube-state-metrics"))
    adapter_values = json.loads(adapter["Values"])
    assert adapter_values["prometheus"] == {"url": "http://prometheus-server.warmstart-monitoring.svc", "port": 80}
    assert adapter_values["rules"]["default"] is False
    assert {rule["name"]["as"] for rule in adapter_values["rules"]["custom"]} == {
        "vllm_num_requests_waiting",
        "vllm_kv_cache_usage_perc",
    }
    assert set(helm_charts(dev.template_json("cluster"))) == {"prometheus", "prometheus-adapter"}  # Auto Mode too
    assert (adapter_values["replicas"], adapter_values["podDisruptionBudget"]) == (
        2,
        {"enabled": True, "maxUnavailable": 1},
    )


def test_the_adapter_serves_each_vllm_series_per_pod_under_a_name_without_colon():
    (waiting, kv_cache) = adapter_rules()
    assert waiting == {
        "seriesQuery": 'vllm:num_requests_waiting{namespace!="",pod!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": "^vllm:num_requests_waiting$", "as": "vllm_num_requests_waiting"},
        # A minute's average: one noisy 15 s sample does not start a GPU node.
        "metricsQuery": "sum(avg_over_time(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)",
    }
    assert kv_cache["name"]["as"] == "vllm_kv_cache_usage_perc"


def test_the_metrics_path_needs_no_aws_permission(prod, dev):
    """In-cluster only: the cluster stack's IAM is what it was without autoscaling."""
    prod_roles = {k for k, r in prod.template_json("cluster")["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
    assert not any("Prometheus" in k or "ServingMetrics" in k for k in prod_roles)
