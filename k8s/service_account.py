"""Namespace and ServiceAccount of a workload that gets AWS access through EKS Pod Identity."""

from __future__ import annotations

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct


class PodIdentityServiceAccount(cdk8s.Chart):
    """No `eks.amazonaws.com/role-arn` annotation: the role comes from a Pod Identity association."""

    def __init__(self, scope: Construct, id: str, *, namespace: str, name: str, labels: dict[str, str]) -> None:
        super().__init__(scope, id)
        self.namespace_object = k8s.KubeNamespace(
            self, "Namespace", metadata=k8s.ObjectMeta(name=namespace, labels=dict(labels))
        )
        self.service_account = k8s.KubeServiceAccount(
            self,
            "ServiceAccount",
            metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=dict(labels)),
            automount_service_account_token=True,
        )
        self.service_account.add_dependency(self.namespace_object)
