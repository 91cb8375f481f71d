"""EKS Auto Mode's switch for NetworkPolicy enforcement: the `amazon-vpc-cni` ConfigMap in kube-system with
`enable-network-policy-controller: "true"` (EKS user guide, "Use Network Policies with EKS Auto Mode")."""

from __future__ import annotations

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

NETWORK_POLICY_CONFIG_MAP = "amazon-vpc-cni"


class AutoModeNetworkPolicyController(cdk8s.Chart):
    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        k8s.KubeConfigMap(
            self,
            "Controller",
            metadata=k8s.ObjectMeta(name=NETWORK_POLICY_CONFIG_MAP, namespace="kube-system"),
            data={"enable-network-policy-controller": "true"},
        )
