"""EKS Auto Mode: the node role every Auto Mode node uses, ours included."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct


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

