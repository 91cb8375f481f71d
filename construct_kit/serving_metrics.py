"""vLLM's load, where a HorizontalPodAutoscaler can read it: an in-cluster Prometheus that scrapes the autoscaled
models' pods (their prometheus.io annotations) and prometheus-adapter, which serves the per-pod series through
the custom metrics API (v1beta1.custom.metrics.k8s.io). Created when a model autoscales.

Why this path and not Amazon Managed Service for Prometheus with KEDA: nothing leaves the cluster and no AWS
permission is involved (KEDA's AWS pod identity is documented for IRSA only, not EKS Pod Identity, which
warmstart uses), the HPA is a built-in object (no CRD to track), and the signal is 15 s old at most. Prometheus
keeps 6 hours on an emptyDir: the autoscaler reads the last minutes, and Auto Mode has no default StorageClass for
a volume. Versions: prometheus-community charts `prometheus` 29.27.0 (Prometheus v3.14.0) and
`prometheus-adapter` 5.3.0 (v0.12.0) (docs/upstream-facts.md, "Autoscaling").
"""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from construct_kit.source import cluster_ref
from kube.pod_security import MONITORING_LEVEL, pod_security_labels
from warmstart.autoscaling import METRICS, MONITORING_NAMESPACE

CHART_REPOSITORY = "https://prometheus-community.github.io/helm-charts"
PROMETHEUS_CHART_VERSION = "29.27.0"
ADAPTER_CHART_VERSION = "5.3.0"
PROMETHEUS_RELEASE = "prometheus"
# The chart's server Service: <release>-server, port 80.
PROMETHEUS_URL = f"http://{PROMETHEUS_RELEASE}-server.{MONITORING_NAMESPACE}.svc"
SIGNAL_WINDOW = "1m"


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


def adapter_rules() -> list[dict]:
    """One rule per vLLM series the autoscalers use, renamed without the ':' (vllm:num_requests_waiting ->
    vllm_num_requests_waiting), per pod and namespace (the kubernetes-pods job's labels)."""
    return [
        {
            "seriesQuery": f'{source}{{namespace!="",pod!=""}}',
            "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
            "name": {"matches": f"^{source}$", "as": exposed},
            # Averaged over the last minute (one noisy 15 s sample would otherwise start a GPU node), summed over
            # the pod's engines (a data-parallel pod reports one series per engine).
            "metricsQuery": f"sum(avg_over_time(<<.Series>>{{<<.LabelMatchers>>}}[{SIGNAL_WINDOW}])) by (<<.GroupBy>>)",
        }
        for source, exposed in METRICS.values()
    ]


def adapter_values() -> dict:
    return {
        "prometheus": {"url": PROMETHEUS_URL, "port": 80},
        "rules": {"default": False, "custom": adapter_rules()},
        # The custom metrics API is down while its only adapter is: two, and one at a time in a drain.
        "replicas": 2,
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}},
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
        self.adapter = cluster.add_helm_chart(
            "PrometheusAdapter",
            chart="prometheus-adapter",
            repository=CHART_REPOSITORY,
            release="prometheus-adapter",
            version=ADAPTER_CHART_VERSION,
            namespace=MONITORING_NAMESPACE,
            values=adapter_values(),
            wait=True,
        )
        self.prometheus.node.add_dependency(self.namespace)
        self.adapter.node.add_dependency(self.prometheus)
