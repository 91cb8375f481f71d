"""EKS Auto Mode: the node role and the GPU NodePool/NodeClass."""

from __future__ import annotations

import cdk8s
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from k8s.gpu_nodes import AutoModeGpuNodes
from warmstart.config import AutoModeCompute

# Built-in pools kept next to ours: "system" runs cluster add-ons, "general-purpose" small workloads.
BUILT_IN_NODE_POOLS = ["system", "general-purpose"]


class AutoModeNodeRole(Construct):
    """Role of every Auto Mode node, built-in pools and ours; EKS creates its access entry."""

    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description="EKS Auto Mode node role",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonEKSWorkerNodeMinimalPolicy"),
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonEC2ContainerRegistryPullOnly"),
            ],
        )

    def compute_config(self) -> eks.ComputeConfig:
        return eks.ComputeConfig(node_pools=BUILT_IN_NODE_POOLS, node_role=self.role)


class AutoModeGpuPool(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.Cluster,
        charts: cdk8s.App,
        compute: AutoModeCompute,
        node_role: iam.IRole,
        subnets: list[ec2.ISubnet],
        tags: dict[str, str],
    ) -> None:
        super().__init__(scope, id)
        self.chart = AutoModeGpuNodes(
            charts,
            "AutoModeGpuNodes",
            compute=compute,
            node_role_name=node_role.role_name,
            subnet_ids=[subnet.subnet_id for subnet in subnets],
            security_group_ids=[cluster.cluster_security_group_id],
            tags=tags,
        )
        self.manifest = cluster.add_cdk8s_chart("GpuNodes", self.chart)
