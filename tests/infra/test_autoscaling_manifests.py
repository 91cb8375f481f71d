"""What an autoscaled model deploys: a KEDA ScaledObject on vLLM's queue with the policy derived from its start
time, a Deployment whose count is the autoscaler's, pods Prometheus scrapes; and, once per cluster, Prometheus and
KEDA (pinned charts, no AWS permission). Models without autoscaling keep their fixed count and get none of it."""

from __future__ import annotations

import json

from construct_kit.serving_metrics import KEDA_CHART_VERSION, PROMETHEUS_CHART_VERSION
from tests.manifest_validation import validate_manifest
from tests.manifests import helm_charts, of_kind
from warmstart.autoscaling import scaling_policy
from warmstart.catalog import default_catalog


def test_turning_autoscaling_off_deletes_the_autoscaler(prod):
    """The ScaledObject is a manifest of its own, which CloudFormation deletes (kubectl delete) when the model stops
    autoscaling; KEDA then deletes the HPA it owns."""
    template = prod.model_template_json("llama-3-3-70b")
    manifests = {
        k: json.loads(r["Properties"]["Manifest"])
        for k, r in template["Resources"].items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and isinstance(r["Properties"]["Manifest"], str)
    }
    (autoscaler_id,) = [k for k in manifests if "Autoscaler" in k]
    assert [o["kind"] for o in manifests[autoscaler_id]] == ["ScaledObject"]
    assert not any(
        o["kind"] in ("ScaledObject", "HorizontalPodAutoscaler")
        for k, m in manifests.items()
        if k != autoscaler_id
        for o in m
    )


def _objects(prod, model: str) -> list[dict]:
    from tests.manifests import deployed_manifests

    return deployed_manifests(prod.model_template_json(model))


def test_the_autoscaler_of_an_autoscaled_model(prod):
    llama = next(m for m in prod.config.models if m.name == "llama-3-3-70b")
    policy = scaling_policy(llama, prod.config, default_catalog())
    (scaled,) = of_kind(_objects(prod, "llama-3-3-70b"), "ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1" and scaled["metadata"]["namespace"] == "llama-3-3-70b"
    # The HPA it makes keeps the name the HPA had before KEDA, which it takes over (its webhook asks for this).
    assert scaled["metadata"]["name"] == "vllm"
    assert scaled["metadata"]["annotations"] == {"scaledobject.keda.sh/transfer-hpa-ownership": "true"}
    assert scaled["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
        "minReplicaCount": 2,
        "maxReplicaCount": 4,
        "advanced": {
            "horizontalPodAutoscalerConfig": {
                "name": "vllm",
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
        },
        "triggers": [
            {
                "type": "prometheus",
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": "http://prometheus-server.warmstart-monitoring.svc",
                    # One series (the scaler refuses several): the model's pods' queues, each a minute's average.
                    "query": 'sum(avg_over_time(vllm:num_requests_waiting{namespace="llama-3-3-70b"}[1m]))',
                    "threshold": "5",
                },
            }
        ],
    }
    assert policy.scale_down_window > policy.start_seconds
    validate_manifest(scaled, prod.config.cluster.kubernetes_version)  # the schema from KEDA's CRD


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
    assert not of_kind(objects, "ScaledObject") and not of_kind(objects, "HorizontalPodAutoscaler")
    (deployment,) = of_kind(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert "prometheus.io/scrape" not in (deployment["spec"]["template"]["metadata"].get("annotations") or {})


def test_prometheus_and_keda_come_with_the_first_autoscaled_model(prod, dev):
    charts = helm_charts(prod.template_json("cluster"))
    prometheus, keda = charts["prometheus"], charts["keda"]
    assert prometheus["Repository"] == "https://prometheus-community.github.io/helm-charts"
    assert keda["Repository"] == "https://kedacore.github.io/charts"
    for chart, version in ((prometheus, PROMETHEUS_CHART_VERSION), (keda, KEDA_CHART_VERSION)):
        assert chart["Version"] == version and chart["Namespace"] == "warmstart-monitoring"
        assert chart["Wait"] is True
    values = json.loads(prometheus["Values"])
    assert values["server"]["global"]["scrape_interval"] == "15s"  # the chart's default minute scales late
    assert values["server"]["persistentVolume"] == {"enabled": False}  # Auto Mode has no default StorageClass
    # The chart's server.enableServiceLinks (29.27.0 values.yaml, on its Deployment): off, as on every warmstart pod.
    assert values["server"]["enableServiceLinks"] is False
    assert all(values[c] == {"enabled": False} for c in ("alertmanager", "kube-state-metrics"))
    keda_values = json.loads(keda["Values"])
    assert keda_values["crds"] == {"install": True, "additionalAnnotations": {"helm.sh/resource-policy": "keep"}}
    # Two of each, one at a time in a drain: the external metrics API is down while no adapter runs.
    assert keda_values["operator"]["replicaCount"] == keda_values["metricsServer"]["replicaCount"] == 2
    one_at_a_time = {"maxUnavailable": 1}
    assert keda_values["podDisruptionBudget"] == {"operator": one_at_a_time, "metricServer": one_at_a_time}
    assert set(helm_charts(dev.template_json("cluster"))) == {"prometheus", "keda"}  # Auto Mode too


def test_the_metrics_path_needs_no_aws_permission(prod, dev):
    """In-cluster only: the cluster stack's IAM is what it was without autoscaling."""
    prod_roles = {k for k, r in prod.template_json("cluster")["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
    assert not any("Prometheus" in k or "ServingMetrics" in k for k in prod_roles)
