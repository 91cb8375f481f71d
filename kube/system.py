"""The namespace of warmstart's own node-level components (agent, prepull DaemonSets), created once."""

from __future__ import annotations

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from contracts.agent_settings import AGENT_NAMESPACE
from kube.pod_security import SYSTEM_LEVEL, pod_security_labels

SYSTEM_LABELS = {"app.kubernetes.io/part-of": "warmstart"}


class SystemNamespace(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str, *, kubernetes_version: str) -> None:
        super().__init__(scope, id)
        labels = {**SYSTEM_LABELS, **pod_security_labels(SYSTEM_LEVEL, kubernetes_version)}
        self.namespace_object = k8s.KubeNamespace(
            self, "Namespace", metadata=k8s.ObjectMeta(name=AGENT_NAMESPACE, labels=labels)
        )
        # Nothing connects to the agent or the prepull DaemonSets: no ingress at all (their egress stays open: S3,
        # the Kubernetes API, the registries).
        self.no_ingress = k8s.KubeNetworkPolicy(
            self,
            "NoIngress",
            metadata=k8s.ObjectMeta(name="no-ingress", namespace=AGENT_NAMESPACE, labels=SYSTEM_LABELS),
            spec=k8s.NetworkPolicySpec(pod_selector=k8s.LabelSelector(), policy_types=["Ingress"]),
        )
        self.no_ingress.add_dependency(self.namespace_object)
