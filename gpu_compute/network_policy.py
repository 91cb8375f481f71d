"""Kubernetes NetworkPolicy enforcement, which neither compute mode has by default; each mode has its own way.

- Auto Mode: the `amazon-vpc-cni` ConfigMap in kube-system with `enable-network-policy-controller: "true"`
  (EKS user guide, "Use Network Policies with EKS Auto Mode"); the GPU NodeClass keeps the default
  `networkPolicy: DefaultAllow`, so only pods a policy selects are restricted.
- Karpenter (self-managed nodes with the VPC CNI): the `vpc-cni` add-on with `{"enableNetworkPolicy": "true"}`
  (EKS user guide, "Restrict Pod network traffic with Kubernetes network policies"; VPC CNI 1.14 or later),
  taking over the add-on EKS installed with the cluster.
"""

from __future__ import annotations

import json

import cdk8s
from aws_cdk import RemovalPolicy
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from construct_kit.source import applies_objects, cluster_ref
from kube.network_policy import AutoModeNetworkPolicyController


class AutoModeNetworkPolicy(Construct):
    """The ConfigMap's chart, applied where warmstart applies the cluster's objects (else rendered to dist/<env>/)."""

    def __init__(self, scope: Construct, id: str, *, cluster: eks.Cluster, charts: cdk8s.App, keep: bool) -> None:
        super().__init__(scope, id)
        self.chart = AutoModeNetworkPolicyController(charts, "NetworkPolicyController")
        # Applied, not created: the ConfigMap may exist already (the docs `kubectl apply` it too). `keep`: in a
        # cluster warmstart did not create, destroying warmstart must not turn the cluster's enforcement off.
        self.config_map = (
            eks.KubernetesManifest(
                self,
                "NetworkPolicyController",
                cluster=cluster_ref(cluster),
                overwrite=True,
                manifest=self.chart.to_json(),
                removal_policy=RemovalPolicy.RETAIN if keep else None,
            )
            if applies_objects(cluster)
            else None
        )


class VpcCniNetworkPolicy(Construct):
    def __init__(self, scope: Construct, id: str, *, cluster: eks.Cluster) -> None:
        super().__init__(scope, id)
        self.addon = eks.CfnAddon(
            self,
            "VpcCni",
            addon_name="vpc-cni",
            cluster_name=cluster.cluster_name,
            configuration_values=json.dumps({"enableNetworkPolicy": "true"}),
            resolve_conflicts="OVERWRITE",  # the add-on EKS installed with the cluster becomes this one
        )
