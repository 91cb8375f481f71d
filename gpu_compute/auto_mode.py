"""EKS Auto Mode as a compute mode: the node role every Auto Mode node uses (ours included; it exists before the
cluster, which is created with it), what the cluster role needs for the GPU NodeClass's custom tags,
NetworkPolicy enforcement, and the GPU NodePool with its NodeClass."""

from __future__ import annotations

import cdk8s
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from construct_kit.control_plane import (
    ClusterHandle,
    ControlPlane,
    ImportedControlPlane,
    gpu_node_security_groups,
)
from construct_kit.nag import acknowledge, managed, wildcard
from construct_kit.network import ClusterNetwork
from gpu_compute.contract import ComputeInfo
from gpu_compute.gpu_pool import GpuNodePool
from gpu_compute.network_policy import AutoModeNetworkPolicy
from kube.gpu_nodes import AutoModeGpuNodes
from warmstart.config.cluster import ClusterConfig
from warmstart.config.compute import AutoModeCompute

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
        acknowledge(
            self.role,
            "The two AWS-managed policies EKS documents for the Auto Mode node role: minimal node permissions "
            "and image pulls.",
            managed("AmazonEKSWorkerNodeMinimalPolicy"),
            managed("AmazonEC2ContainerRegistryPullOnly"),
        )

    def compute_config(self) -> eks.ComputeConfig:
        return eks.ComputeConfig(node_pools=BUILT_IN_NODE_POOLS, node_role=self.role)


def custom_tag_statements() -> list[iam.PolicyStatement]:
    """The same creations as the Auto Mode managed policies, for this cluster only, with any further tags."""
    this_cluster = {"aws:RequestTag/eks:eks-cluster-name": "${aws:PrincipalTag/eks:eks-cluster-name}"}
    return [
        iam.PolicyStatement(
            sid="Compute",
            actions=["ec2:CreateFleet", "ec2:RunInstances", "ec2:CreateLaunchTemplate"],
            resources=["*"],
            conditions={
                "StringEquals": this_cluster,
                "StringLike": {
                    "aws:RequestTag/eks:kubernetes-node-class-name": "*",
                    "aws:RequestTag/eks:kubernetes-node-pool-name": "*",
                },
            },
        ),
        iam.PolicyStatement(
            sid="Storage",
            actions=["ec2:CreateVolume", "ec2:CreateSnapshot"],
            resources=["arn:aws:ec2:*:*:volume/*", "arn:aws:ec2:*:*:snapshot/*"],
            conditions={"StringEquals": this_cluster},
        ),
        iam.PolicyStatement(
            sid="Networking",
            actions=["ec2:CreateNetworkInterface"],
            resources=["*"],
            conditions={
                "StringEquals": this_cluster,
                "StringLike": {"aws:RequestTag/eks:kubernetes-cni-node-name": "*"},
            },
        ),
        # A changed `tags` setting updates the tags of what already runs; without this those updates
        # fail with an authorization error (same guide). Only on this cluster's own resources.
        iam.PolicyStatement(
            sid="RetagThisClustersResources",
            actions=["ec2:CreateTags", "ec2:DeleteTags"],
            resources=[
                f"arn:aws:ec2:*:*:{kind}/*"
                for kind in ("instance", "volume", "snapshot", "network-interface", "launch-template")
            ],
            conditions={
                "StringEquals": {"aws:ResourceTag/eks:eks-cluster-name": "${aws:PrincipalTag/eks:eks-cluster-name}"}
            },
        ),
    ]


class AutoModeCustomTags(Construct):
    """Lets Auto Mode put the NodeClass's own `tags` on what it creates for it.

    The Auto Mode managed policies on the cluster role allow only EKS's tag keys on the instances, launch
    templates, volumes and network interfaces they create (AmazonEKSComputePolicy: `aws:TagKeys` limited to
    eks:* and kubernetes.io/cluster/*), so a NodeClass with user tags never launches a node. These statements
    follow the EKS user guide ("Custom AWS tags for EKS Auto resources", Auto Mode cluster IAM role): the same
    creations, still only for this cluster (the eks:eks-cluster-name tag must match the role session's), with
    any further tags, and re-tagging this cluster's existing resources when the tags change; load balancers and
    Shield are left out (warmstart creates none).
    """

    def __init__(self, scope: Construct, id: str, *, cluster_role: iam.IRole) -> None:
        super().__init__(scope, id)
        self.policy = iam.Policy(
            self,
            "Policy",
            roles=[cluster_role],
            statements=custom_tag_statements(),
        )
        acknowledge(
            self.policy,
            "The documented grant for custom tags on Auto Mode resources (EKS user guide, Auto Mode cluster IAM role): "
            "instances, launch templates, volumes, snapshots and interfaces have no ARN before they exist; every "
            "creation must carry this cluster's eks:eks-cluster-name tag, and re-tagging is limited to resources that "
            "already carry it.",
            wildcard("*"),
            *(
                wildcard(f"arn:aws:ec2:*:*:{kind}/*")
                for kind in ("volume", "snapshot", "instance", "network-interface", "launch-template")
            ),
        )


class AutoModeGpuCompute(Construct):
    """EKS Auto Mode: AWS runs the nodes (Bottlerocket, AWS's AMI) and the Pod Identity agent; warmstart adds the
    GPU NodePool and NodeClass, and NetworkPolicy enforcement. Creates the cluster (beside itself, in `scope`:
    the control plane's place does not depend on the mode) with the node role every Auto Mode node uses, or
    imports an existing Auto Mode cluster and its node role."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        compute: AutoModeCompute,
        cluster: ClusterConfig,
        tags: dict[str, str],
        network: ClusterNetwork,
        charts: cdk8s.App,
    ) -> None:
        super().__init__(scope, id)
        control_plane, node_role, cluster_role = self._cluster(scope, compute, cluster, network)
        self.network_policy = AutoModeNetworkPolicy(
            self,
            "NetworkPolicySupport",
            cluster=control_plane.cluster,
            charts=charts,
            keep=cluster.existing is not None,
        )
        after: list[Construct] = []
        self.custom_tags: AutoModeCustomTags | None = None
        if tags and cluster_role is not None:  # the NodeClass carries them: Auto Mode needs leave to apply them
            self.custom_tags = AutoModeCustomTags(self, "AutoModeCustomTags", cluster_role=cluster_role)
            after.append(self.custom_tags.policy)
        chart = AutoModeGpuNodes(
            charts,
            "GpuNodes",
            compute=compute,
            node_role_name=node_role.role_name,
            subnet_ids=[subnet.subnet_id for subnet in network.private_subnet_list()],
            security_group_ids=gpu_node_security_groups(cluster, control_plane.cluster),
            tags=tags,
            existing_cluster=cluster.existing is not None,
        )
        gpu_pool = GpuNodePool(self, "GpuPool", cluster=control_plane.cluster, chart=chart, after=after)
        self.info = ComputeInfo(
            control_plane=control_plane,
            node_role=node_role,
            gpu_pool=gpu_pool,
            cluster_services=self,
            workloads_wait_for=tuple(filter(None, [gpu_pool.manifest])),
        )

    def _cluster(
        self, scope: Construct, compute: AutoModeCompute, cluster: ClusterConfig, network: ClusterNetwork
    ) -> tuple[ClusterHandle, iam.IRole, iam.IRole | None]:
        """(the control plane, the node role, the cluster role): created, or an existing cluster's (the checks
        required both role names there)."""
        if cluster.existing is not None:
            assert compute.node_role_name is not None
            imported = ImportedControlPlane(
                scope, "ControlPlane", cluster=cluster, existing=cluster.existing, network=network
            )
            node_role = iam.Role.from_role_name(self, "ExistingNodeRole", compute.node_role_name)
            cluster_role = (
                iam.Role.from_role_name(self, "ExistingClusterRole", compute.cluster_role_name)
                if compute.cluster_role_name
                else None
            )
            return imported, node_role, cluster_role
        self.node_role = AutoModeNodeRole(self, "AutoModeNodeRole")
        created = ControlPlane(
            scope,
            "ControlPlane",
            cluster=cluster,
            network=network,
            capacity=eks.DefaultCapacityType.AUTOMODE,
            compute=self.node_role.compute_config(),
        )
        return created, self.node_role.role, created.cluster.role
