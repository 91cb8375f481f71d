"""vLLM's load, where a HorizontalPodAutoscaler can read it: an in-cluster Prometheus that scrapes the autoscaled
models' pods (their prometheus.io annotations) and KEDA, whose Prometheus scaler queries it and whose metrics
adapter serves the result through the external metrics API (v1beta1.external.metrics.k8s.io). Created when a
model autoscales.

Why KEDA and not prometheus-adapter (which warmstart ran before): KEDA's own build runs in the control-plane tier
against the real HPA controller and this Prometheus (prometheus-adapter's Go module is not served where the tests
run, so its rules were never run), it is a CNCF graduated project, and it is what SageMaker HyperPod autoscales
inference with. Its Prometheus scaler needs no AWS permission (the query goes to the in-cluster server). Prometheus
keeps 6 hours on an emptyDir: the autoscaler reads the last minutes, and Auto Mode has no default StorageClass for
a volume. Versions: prometheus-community `prometheus` 29.27.0 (Prometheus v3.14.0), kedacore `keda` 2.21.0 (KEDA
v2.21.0) (docs/upstream-facts.md, "Autoscaling").
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from construct_kit.source import cluster_ref
from kube.pod_security import MONITORING_LEVEL, pod_security_labels
from warmstart.autoscaling import KEDA_CHART_VERSION, MONITORING_NAMESPACE, PROMETHEUS_RELEASE

CHART_REPOSITORY = "https://prometheus-community.github.io/helm-charts"
PROMETHEUS_CHART_VERSION = "29.27.0"
KEDA_CHART_REPOSITORY = "https://kedacore.github.io/charts"


def prometheus_values() -> dict:
    """The server only, scraping every 15 s (the chart's default is 1 minute: a minute-old signal scales late)."""
    return {
        "alertmanager": {"enabled": False},
        "kube-state-metrics": {"enabled": False},
        "prometheus-node-exporter": {"enabled": False},
        "prometheus-pushgateway": {"enabled": False},
        "server": {
            "global": {"scrape_interval": "15s", "scrape_timeout": "10s", "evaluation_interval": "15s"},
            "retention": "6h",
            "persistentVolume": {"enabled": False},
            # No variables from the namespace's Services (kubelet's service links), as on every warmstart pod.
            "enableServiceLinks": False,
            "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
        },
    }


def keda_values() -> dict:
    """The operator and its metrics adapter, two of each, one at a time in a drain: one of each serves (KEDA's
    leader and active adapter), the other takes over on a failure without waiting for a new pod (the external
    metrics API, and so every model's autoscaling, is down while no adapter runs). The admission webhooks stay on:
    they refuse a ScaledObject whose target another autoscaler holds."""
    resources = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    return {
        # Kept when the release goes (the last model stops autoscaling): deleting them would wait on the
        # ScaledObjects' finalizers, which no operator is left to remove.
        "crds": {"install": True, "additionalAnnotations": {"helm.sh/resource-policy": "keep"}},
        "operator": {"replicaCount": 2},
        "metricsServer": {"replicaCount": 2},
        "podDisruptionBudget": {"operator": {"maxUnavailable": 1}, "metricServer": {"maxUnavailable": 1}},
        "resources": {"operator": resources, "metricServer": resources, "webhooks": resources},
    }


class ServingMetrics(Construct):
    def __init__(self, scope: Construct, id: str, *, cluster: eks.Cluster, kubernetes_version: str) -> None:
        super().__init__(scope, id)
        # The namespace is ours, not Helm's (createNamespace makes one without labels): it carries its Pod Security
        # level (kube/pod_security.py). overwrite: a cluster deployed before this change has it already.
        self.namespace = eks.KubernetesManifest(
            self,
            "MonitoringNamespace",
            cluster=cluster_ref(cluster),
            overwrite=True,
            manifest=[
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {
                        "name": MONITORING_NAMESPACE,
                        "labels": {
                            "app.kubernetes.io/part-of": "warmstart",
                            **pod_security_labels(MONITORING_LEVEL, kubernetes_version),
                        },
                    },
                }
            ],
        )
        self.prometheus = cluster.add_helm_chart(
            "Prometheus",
            chart="prometheus",
            repository=CHART_REPOSITORY,
            release=PROMETHEUS_RELEASE,
            version=PROMETHEUS_CHART_VERSION,
            namespace=MONITORING_NAMESPACE,
            create_namespace=False,
            values=prometheus_values(),
            wait=True,
        )
        self.keda = cluster.add_helm_chart(
            "Keda",
            chart="keda",
            repository=KEDA_CHART_REPOSITORY,
            release="keda",
            version=KEDA_CHART_VERSION,
            namespace=MONITORING_NAMESPACE,
            values=keda_values(),
            wait=True,
        )
        self.prometheus.node.add_dependency(self.namespace)
        self.keda.node.add_dependency(self.prometheus)
