"""Self-managed Karpenter as a compute mode: a managed system node group for the controllers, Karpenter itself,
the Pod Identity agent and the VPC CNI's NetworkPolicy enforcement (neither is built in here), the NVIDIA device
plugin, and the GPU NodePool with an EC2NodeClass; in image snapshot mode also the snapshot its nodes' data
volumes start from (the config refuses the snapshot in Auto Mode)."""

from __future__ import annotations

import cdk8s
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from image_preload.snapshot import ImageSnapshotBuild, SnapshotRequest
from k8s.gpu_nodes import KarpenterGpuNodes
from stacks.components.compute.contract import ClusterCapacity, attached
from stacks.components.compute.gpu_pool import GpuNodePool
from stacks.components.compute.karpenter_parts import KarpenterController, NvidiaDevicePlugin, SystemNodes
from stacks.components.compute.network_policy import VpcCniNetworkPolicy
from stacks.components.network import WarmstartVpc
from stacks.components.pod_identity import PodIdentityAgent
from warmstart.config import ImagePreload, KarpenterCompute


class KarpenterGpuCompute(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        compute: KarpenterCompute,
        cluster_name: str,
        tags: dict[str, str],
        image_preload: ImagePreload,
        snapshot: SnapshotRequest | None,
        network: WarmstartVpc,
    ) -> None:
        super().__init__(scope, id)
        self._compute, self._cluster_name, self._tags = compute, cluster_name, tags
        self._image_preload, self._snapshot, self._network = image_preload, snapshot, network
        self.image_snapshot: ImageSnapshotBuild | None = None
        self._karpenter: KarpenterController | None = None
        self._gpu_pool: GpuNodePool | None = None

    def cluster_capacity(self) -> ClusterCapacity:
        # Node groups, not Auto Mode: the system node group below, and Karpenter's nodes.
        return ClusterCapacity(eks.DefaultCapacityType.NODEGROUP)

    def attach(self, *, cluster: eks.Cluster, charts: cdk8s.App) -> None:
        self.network_policy = VpcCniNetworkPolicy(self, "NetworkPolicySupport", cluster=cluster)
        self.pod_identity_agent = PodIdentityAgent(self, "PodIdentityAgent", cluster=cluster)
        self.system_nodes = SystemNodes(
            self,
            "SystemNodes",
            cluster=cluster,
            group=self._compute.system_node_group,
            subnets=self._network.private_subnets,
        )
        self._karpenter = KarpenterController(
            self, "Karpenter", cluster=cluster, cluster_name=self._cluster_name, version=self._compute.karpenter_version
        )
        self._karpenter.chart.node.add_dependency(self.pod_identity_agent, self.system_nodes)
        self.device_plugin = NvidiaDevicePlugin(
            self, "NvidiaDevicePlugin", cluster=cluster, version=self._compute.nvidia_device_plugin_version
        )
        subnets = self._network.private_subnet_list()
        if self._snapshot is not None:
            self.image_snapshot = ImageSnapshotBuild(
                self,
                "ImageSnapshot",
                environment=self._snapshot.environment,
                settings=self._snapshot.settings,
                images=self._snapshot.images,
                image_set_key=self._snapshot.image_set_key,
                ami_parameter=self._snapshot.ami_parameter,
                vpc=self._network.vpc,
                subnet=subnets[0],
            )
        chart = KarpenterGpuNodes(
            charts,
            "GpuNodes",
            compute=self._compute,
            node_role_name=self.node_role.role_name,
            subnet_ids=[subnet.subnet_id for subnet in subnets],
            security_group_ids=[cluster.cluster_security_group_id],
            tags=self._tags,
            image_preload=self._image_preload,
            data_volume_snapshot_id=self.image_snapshot.snapshot_id if self.image_snapshot else None,
        )
        # After the Karpenter chart, which installs the NodePool and EC2NodeClass CRDs.
        self._gpu_pool = GpuNodePool(self, "GpuPool", cluster=cluster, chart=chart, after=[self._karpenter.chart])

    @property
    def karpenter(self) -> KarpenterController:
        return attached(self._karpenter, self)

    @property
    def node_role(self) -> iam.IRole:
        return self.karpenter.node_role

    @property
    def gpu_pool(self) -> GpuNodePool:
        return attached(self._gpu_pool, self)

    @property
    def workloads_wait_for(self) -> list[Construct]:
        return [self.gpu_pool.manifest]
