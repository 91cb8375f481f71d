"""Self-managed Karpenter as a compute mode: a managed system node group for the controllers, Karpenter itself,
the Pod Identity agent and the VPC CNI's NetworkPolicy enforcement (neither is built in here), the NVIDIA device
plugin, and the GPU NodePool with an EC2NodeClass; in image snapshot mode also the snapshot its nodes' data
volumes start from (the config refuses the snapshot in Auto Mode)."""

from __future__ import annotations

import cdk8s
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from image_preload.snapshot import ImageSnapshotBuild, SnapshotRequest
from kube.gpu_nodes import KarpenterGpuNodes
from stacks.components.compute.contract import ComputeInfo
from stacks.components.compute.gpu_pool import GpuNodePool
from stacks.components.compute.karpenter_parts import KarpenterController, NvidiaDevicePlugin, SystemNodes
from stacks.components.compute.network_policy import VpcCniNetworkPolicy
from stacks.components.control_plane import ControlPlane
from stacks.components.network import WarmstartVpc
from stacks.components.pod_identity import PodIdentityAgent
from warmstart.config import ClusterConfig, ImagePreload, KarpenterCompute


class KarpenterGpuCompute(Construct):
    """Creates the cluster (beside itself, in `scope`) with node groups for capacity, then Karpenter and what it
    needs to launch the GPU nodes."""

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
        network: WarmstartVpc,
        charts: cdk8s.App,
    ) -> None:
        super().__init__(scope, id)
        # Node groups, not Auto Mode: the system node group below, and Karpenter's nodes.
        control_plane = ControlPlane(
            scope,
            "ControlPlane",
            cluster=cluster,
            network=network,
            capacity=eks.DefaultCapacityType.NODEGROUP,
            compute=None,
        )
        eks_cluster = control_plane.cluster
        self.network_policy = VpcCniNetworkPolicy(self, "NetworkPolicySupport", cluster=eks_cluster)
        self.pod_identity_agent = PodIdentityAgent(self, "PodIdentityAgent", cluster=eks_cluster)
        self.system_nodes = SystemNodes(
            self, "SystemNodes", cluster=eks_cluster, group=compute.system_node_group, subnets=network.private_subnets
        )
        self.karpenter = KarpenterController(
            self, "Karpenter", cluster=eks_cluster, cluster_name=cluster.name, version=compute.karpenter_version
        )
        self.karpenter.chart.node.add_dependency(self.pod_identity_agent, self.system_nodes)
        self.device_plugin = NvidiaDevicePlugin(
            self, "NvidiaDevicePlugin", cluster=eks_cluster, version=compute.nvidia_device_plugin_version
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
        gpu_pool = self._gpu_pool(compute, tags, image_preload, eks_cluster, subnets, charts)
        self.info = ComputeInfo(
            control_plane=control_plane,
            node_role=self.karpenter.node_role,
            gpu_pool=gpu_pool,
            cluster_services=self,
            workloads_wait_for=(gpu_pool.manifest,),
        )

    def _gpu_pool(
        self,
        compute: KarpenterCompute,
        tags: dict[str, str],
        image_preload: ImagePreload,
        eks_cluster: eks.Cluster,
        subnets: list[ec2.ISubnet],
        charts: cdk8s.App,
    ) -> GpuNodePool:
        chart = KarpenterGpuNodes(
            charts,
            "GpuNodes",
            compute=compute,
            node_role_name=self.karpenter.node_role.role_name,
            subnet_ids=[subnet.subnet_id for subnet in subnets],
            security_group_ids=[eks_cluster.cluster_security_group_id],
            tags=tags,
            image_preload=image_preload,
            data_volume_snapshot_id=self.image_snapshot.snapshot_id if self.image_snapshot else None,
        )
        # After the Karpenter chart, which installs the NodePool and EC2NodeClass CRDs.
        return GpuNodePool(self, "GpuPool", cluster=eks_cluster, chart=chart, after=[self.karpenter.chart])
