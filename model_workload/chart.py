"""One served model: Namespace, ServiceAccount, Deployment, Service, PodDisruptionBudget, NetworkPolicy, and its
autoscaler.

Built with the generated L1 classes: cdk8s-plus cannot request nvidia.com/gpu and injects CPU limits.
Every value comes from the model's plan (`warmstart.workload.plan_model`); the pod itself is `pod_spec.py`.
"""

from __future__ import annotations

import hashlib

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from contracts.pod_labels import (
    model_labels,
)
from kube.hardening import (
    RUNS_AS_ROOT,
    WRITABLE_ROOT,
    departure,
    scanner_annotations,
)
from kube.pod_security import MODEL_LEVEL, pod_security_labels
from kube.scraping import scrape_annotations
from model_workload.pod_spec import ENTRY_FILES, RUNTIME, SERVICE_ACCOUNT, entry_key, pod_spec
from warmstart.autoscaling import (
    HPA_NAME,
    MONITORING_NAMESPACE,
    PROMETHEUS_SERVER_LABELS,
    PROMETHEUS_URL,
    TRANSFER_HPA_OWNERSHIP,
    ScalingPolicy,
)
from warmstart.workload import (
    VLLM_PORT,
    ModelPlan,
)

# Shared with the agent: the endpoints' connection bounds, and the identities of a verified copy's files.
ENTRY_FILES |= {
    name: RUNTIME.parent.parent / "contracts" / name for name in ("connection_guard.py", "file_identity.py")
}


class VllmModel(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str, *, plan: ModelPlan, scaling: ScalingPolicy | None = None) -> None:
        super().__init__(scope, id)
        name = plan.model.name
        labels = model_labels(name)
        namespace_labels = {**labels, **pod_security_labels(MODEL_LEVEL, plan.kubernetes_version)}
        self.namespace_object = k8s.KubeNamespace(
            self, "Namespace", metadata=k8s.ObjectMeta(name=name, labels=namespace_labels)
        )
        # No eks.amazonaws.com/role-arn annotation: the role comes from a Pod Identity association.
        self.service_account = k8s.KubeServiceAccount(
            self, "ServiceAccount", metadata=k8s.ObjectMeta(name=SERVICE_ACCOUNT, namespace=name, labels=labels)
        )
        self.entry_script = None
        if plan.entry_step:
            self.entry_script = k8s.KubeConfigMap(
                self,
                "EntryScript",
                metadata=k8s.ObjectMeta(name="warmstart-entry", namespace=name, labels=labels),
                data={entry_key(file): path.read_text() for file, path in ENTRY_FILES.items()},
            )
            self.entry_script.add_dependency(self.namespace_object)
        self.deployment = k8s.KubeDeployment(
            self,
            "Deployment",
            metadata=k8s.ObjectMeta(name="vllm", namespace=name, labels=labels, annotations=DEPLOYMENT_ANNOTATIONS),
            spec=_deployment_spec(plan, scaling, labels),
        )
        self.service = k8s.KubeService(
            self,
            "Service",
            metadata=k8s.ObjectMeta(name="vllm", namespace=name, labels=labels),
            spec=k8s.ServiceSpec(selector=labels, ports=[_http_port()]),
        )
        self.disruption_budget = k8s.KubePodDisruptionBudget(
            self,
            "DisruptionBudget",
            metadata=k8s.ObjectMeta(name="vllm", namespace=name, labels=labels),
            spec=k8s.PodDisruptionBudgetSpec(
                max_unavailable=k8s.IntOrString.from_number(1), selector=k8s.LabelSelector(match_labels=labels)
            ),
        )
        # Only the listed client namespaces (and the model's own) reach the serving port; the AWS network
        # policy agent always admits the node's own IP, so kubelet's probes still arrive (aws-network-policy-agent
        # PR #65, "Ignore policy restrictions against Node IP").
        self.network_policy = k8s.KubeNetworkPolicy(
            self,
            "NetworkPolicy",
            metadata=k8s.ObjectMeta(name="vllm-clients", namespace=name, labels=labels),
            spec=_clients_only(plan, scaling, labels),
        )
        for obj in (self.service_account, self.deployment, self.service, self.disruption_budget, self.network_policy):
            obj.add_dependency(self.namespace_object)
        if self.entry_script is not None:
            self.deployment.add_dependency(self.entry_script)


def _http_port() -> k8s.ServicePort:
    return k8s.ServicePort(name="http", port=VLLM_PORT, target_port=k8s.IntOrString.from_string("http"), protocol="TCP")


def _deployment_spec(plan: ModelPlan, scaling: ScalingPolicy | None, labels: dict[str, str]) -> k8s.DeploymentSpec:
    return k8s.DeploymentSpec(
        # An autoscaled model's count is the autoscaler's: a count here would be applied again on
        # every deploy (the Deployment starts at 1, then the autoscaler raises it to min_replicas).
        replicas=None if scaling else plan.model.replicas,
        selector=k8s.LabelSelector(match_labels=labels),
        # The new pod first (no serving gap) when the pool's GPU limit leaves a node for it; otherwise
        # one pod at a time, as the plan says.
        strategy=k8s.DeploymentStrategy(
            type="RollingUpdate",
            rolling_update=k8s.RollingUpdateDeployment(
                max_surge=k8s.IntOrString.from_number(1 if plan.surge else 0),
                max_unavailable=k8s.IntOrString.from_number(0 if plan.surge else 1),
            ),
        ),
        template=k8s.PodTemplateSpec(
            metadata=k8s.ObjectMeta(labels=labels, annotations=_template_annotations(plan, scaling)),
            spec=pod_spec(plan),
        ),
    )


def _clients_only(plan: ModelPlan, scaling: ScalingPolicy | None, labels: dict[str, str]) -> k8s.NetworkPolicySpec:
    name = plan.model.name
    return k8s.NetworkPolicySpec(
        pod_selector=k8s.LabelSelector(match_labels=labels),
        policy_types=["Ingress"],
        ingress=[
            k8s.NetworkPolicyIngressRule(
                from_=[
                    k8s.NetworkPolicyPeer(
                        namespace_selector=k8s.LabelSelector(
                            match_expressions=[
                                k8s.LabelSelectorRequirement(
                                    key="kubernetes.io/metadata.name",
                                    operator="In",
                                    values=sorted({name, *plan.client_namespaces}),
                                )
                            ]
                        )
                    ),
                    # An autoscaled model's Prometheus reads /metrics on the same port (its server only).
                    *([_prometheus_server()] if scaling else []),
                ],
                ports=[k8s.NetworkPolicyPort(port=k8s.IntOrString.from_number(VLLM_PORT), protocol="TCP")],
            )
        ],
    )


DEPLOYMENT_ANNOTATIONS = scanner_annotations(
    [
        departure(
            RUNS_AS_ROOT,
            "the vLLM serving image runs as root (it has no other user); no capabilities, no "
            "privilege escalation, seccomp RuntimeDefault",
        ),
        departure(
            WRITABLE_ROOT,
            "vLLM, Triton, FlashInfer and torch write caches and IPC sockets under $HOME and the "
            "temporary folder; not verified to run on a read-only root",
        ),
    ],
    host_paths="node NVMe folders of warmstart: the torch.compile cache, the weights copy (read-only), the pods' "
    "entry records; they are what makes a start on this node fast",
)


def _template_annotations(plan: ModelPlan, scaling: ScalingPolicy | None) -> dict[str, str] | None:
    """A new entry step rolls the pods, like any other change of what they run; an autoscaled model's pods are
    scraped (vLLM's /metrics on the serving port) by the environment's Prometheus."""
    annotations = {}
    if plan.entry_step:
        digest = hashlib.sha256(b"".join(path.read_bytes() for path in ENTRY_FILES.values())).hexdigest()
        annotations["warmstart.io/entry-sha256"] = digest
    if scaling:
        annotations.update(scrape_annotations(VLLM_PORT))
    return annotations or None


def _prometheus_server() -> k8s.NetworkPolicyPeer:
    return k8s.NetworkPolicyPeer(
        namespace_selector=k8s.LabelSelector(match_labels={"kubernetes.io/metadata.name": MONITORING_NAMESPACE}),
        pod_selector=k8s.LabelSelector(match_labels=PROMETHEUS_SERVER_LABELS),
    )


class VllmAutoscaler(cdk8s.Chart):
    """The model's KEDA ScaledObject, in a chart (and a manifest) of its own: turning autoscaling off deletes this
    manifest, and KEDA deletes the HorizontalPodAutoscaler it owns."""

    def __init__(self, scope: Construct, id: str, *, scaling: ScalingPolicy) -> None:
        super().__init__(scope, id)
        self.autoscaler = _scaled_object(self, scaling, scaling.model, model_labels(scaling.model))


def _scaled_object(chart: Construct, scaling: ScalingPolicy, namespace: str, labels: dict[str, str]) -> cdk8s.ApiObject:
    """Replicas on vLLM's load summed over the model's pods (KEDA's Prometheus scaler), an AverageValue target per
    pod, and the policy derived from the model's start time (warmstart.autoscaling). The HPA KEDA makes keeps the
    name `vllm`: an environment deployed before KEDA has an HPA of that name, which KEDA takes over (the
    annotation is what its admission webhook asks for), so the replicas are never reset (docs/upgrades.md)."""
    scaled_object = cdk8s.ApiObject(
        chart,
        "Autoscaler",
        api_version="keda.sh/v1alpha1",
        kind="ScaledObject",
        metadata=cdk8s.ApiObjectMetadata(
            name=HPA_NAME, namespace=namespace, labels=labels, annotations={TRANSFER_HPA_OWNERSHIP: "true"}
        ),
    )
    scaled_object.add_json_patch(
        cdk8s.JsonPatch.add(
            "/spec",
            {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
                "minReplicaCount": scaling.min_replicas,
                "maxReplicaCount": scaling.max_replicas,
                "advanced": {"horizontalPodAutoscalerConfig": {"name": HPA_NAME, "behavior": scaling.behavior()}},
                "triggers": [
                    {
                        "type": "prometheus",
                        "metricType": "AverageValue",
                        "metadata": {
                            "serverAddress": PROMETHEUS_URL,
                            "query": scaling.query(namespace),
                            "threshold": f"{scaling.target:g}",
                        },
                    }
                ],
            },
        )
    )
    return scaled_object
