"""Self-managed Karpenter as a compute mode: a managed system node group for the controllers, Karpenter itself,
the Pod Identity agent and the VPC CNI's NetworkPolicy enforcement (neither is built in here), the NVIDIA device
plugin, and the GPU NodePool with an EC2NodeClass; in image snapshot mode also the snapshot its nodes' data
volumes start from (the config refuses the snapshot in Auto Mode)."""

from __future__ import annotations

import cdk8s
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from construct_kit.control_plane import (
    ClusterHandle,
    ControlPlane,
    ImportedControlPlane,
    gpu_node_security_groups,
)
from construct_kit.network import ClusterNetwork
from construct_kit.pod_identity import PodIdentityAgent
from gpu_compute.contract import ComputeInfo
from gpu_compute.gpu_pool import GpuNodePool
from gpu_compute.karpenter_parts import KarpenterController, NvidiaDevicePlugin, SystemNodes
from gpu_compute.network_policy import VpcCniNetworkPolicy
from image_preload.snapshot import ImageSnapshotBuild, SnapshotRequest
from kube.gpu_nodes import KarpenterGpuNodes
from warmstart.config.caches import ImagePreload
from warmstart.config.cluster import ClusterConfig
from warmstart.config.compute import KarpenterCompute


class KarpenterGpuCompute(Construct):
    """Creates the cluster (beside itself, in `scope`) with node groups for capacity, then Karpenter and what it
    needs to launch the GPU nodes; or, in an existing cluster, adds what the config says is missing (the Pod
    Identity agent, the device plugin, a Karpenter) and uses what is there."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        compute: KarpenterCompute,
        cluster: ClusterConfig,
        tags: dict[str, str],
        image_preload: ImagePreload,
        snapshot: SnapshotRequest | None,
        network: ClusterNetwork,
        charts: cdk8s.App,
    ) -> None:
        super().__init__(scope, id)
        control_plane = self._control_plane(scope, compute, cluster, network)
        eks_cluster = control_plane.cluster
        existing = cluster.existing
        self.pod_identity_agent = (
            PodIdentityAgent(self, "PodIdentityAgent", cluster=eks_cluster)
            if existing is None or existing.pod_identity_agent == "add"
            else None
        )
        self.karpenter: KarpenterController | None = None
        node_role: iam.IRole
        if compute.existing_controller is None:
            self.karpenter = KarpenterController(
                self, "Karpenter", cluster=eks_cluster, cluster_name=cluster.name, version=compute.karpenter_version
            )
            self.karpenter.chart.node.add_dependency(*filter(None, (self.pod_identity_agent, self.system_nodes)))
            node_role = self.karpenter.node_role
        else:
            node_role = iam.Role.from_role_name(self, "ExistingNodeRole", compute.existing_controller.node_role_name)
        self.device_plugin = (
            NvidiaDevicePlugin(
                self, "NvidiaDevicePlugin", cluster=eks_cluster, version=compute.nvidia_device_plugin_version
            )
            if existing is None or existing.nvidia_device_plugin == "add"
            else None
        )
        subnets = network.private_subnet_list()
        self.image_snapshot = (
            # In the stack, as before the modes had a construct: its custom resource owns the snapshot the nodes
            # boot from, and a new logical ID would create a new resource for the same image set, then delete
            # the old one with the snapshot both name.
            ImageSnapshotBuild(scope, "ImageSnapshot", request=snapshot, vpc=network.vpc, subnet=subnets[0])
            if snapshot is not None
            else None
        )
        gpu_pool = self._gpu_pool(compute, cluster, tags, image_preload, eks_cluster, node_role, subnets, charts)
        self.info = ComputeInfo(
            control_plane=control_plane,
            node_role=node_role,
            gpu_pool=gpu_pool,
            cluster_services=self,
            workloads_wait_for=tuple(filter(None, [gpu_pool.manifest])),
        )

    def _control_plane(
        self, scope: Construct, compute: KarpenterCompute, cluster: ClusterConfig, network: ClusterNetwork
    ) -> ClusterHandle:
        """The cluster created with node groups for capacity, its NetworkPolicy enforcement and the system node
        group for the controllers; or an existing cluster, which has nodes for them already (make preflight checks
        its VPC CNI enforces NetworkPolicy: warmstart does not take over its add-on's settings)."""
        self.system_nodes: SystemNodes | None = None
        self.network_policy: VpcCniNetworkPolicy | None = None
        if cluster.existing is not None:
            return ImportedControlPlane(
                scope, "ControlPlane", cluster=cluster, existing=cluster.existing, network=network
            )
        control_plane = ControlPlane(
            scope,
            "ControlPlane",
            cluster=cluster,
            network=network,
            capacity=eks.DefaultCapacityType.NODEGROUP,
            compute=None,
        )
        self.network_policy = VpcCniNetworkPolicy(self, "NetworkPolicySupport", cluster=control_plane.cluster)
        self.system_nodes = SystemNodes(
            self,
            "SystemNodes",
            cluster=control_plane.cluster,
            group=compute.system_node_group,
            subnets=network.private_subnets,
        )
        return control_plane

    def _gpu_pool(
        self,
        compute: KarpenterCompute,
        cluster: ClusterConfig,
        tags: dict[str, str],
        image_preload: ImagePreload,
        eks_cluster: eks.Cluster,
        node_role: iam.IRole,
        subnets: list[ec2.ISubnet],
        charts: cdk8s.App,
    ) -> GpuNodePool:
        chart = KarpenterGpuNodes(
            charts,
            "GpuNodes",
            compute=compute,
            node_role_name=node_role.role_name,
            subnet_ids=[subnet.subnet_id for subnet in subnets],
            security_group_ids=gpu_node_security_groups(cluster, eks_cluster),
            tags=tags,
            image_preload=image_preload,
            data_volume_snapshot_id=self.image_snapshot.snapshot_id if self.image_snapshot else None,
            existing_cluster=cluster.existing is not None,
        )
        # After the Karpenter chart, which installs the NodePool and EC2NodeClass CRDs (an existing Karpenter has).
        after = [self.karpenter.chart] if self.karpenter is not None else []
        return GpuNodePool(self, "GpuPool", cluster=eks_cluster, chart=chart, after=after)
