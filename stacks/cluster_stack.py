from __future__ import annotations

import cdk8s
from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from k8s.system import SystemNamespace
from stacks.components.agent_image import AgentImage
from stacks.components.auto_mode import AutoModeCustomTags, AutoModeNodeRole
from stacks.components.buckets import ArtifactBuckets
from stacks.components.control_plane import ControlPlane
from stacks.components.gpu_pool import GpuNodePool
from stacks.components.image_cache import ImageCache
from stacks.components.image_snapshot import ImageSnapshotBuild
from stacks.components.karpenter import KarpenterController, NvidiaDevicePlugin, SystemNodes
from stacks.components.network import WarmstartVpc
from stacks.components.network_policy import NetworkPolicySupport
from stacks.components.node_agent import NodeAgent
from stacks.components.pod_identity import PodIdentityAgent
from warmstart.agent_settings import agent_settings
from warmstart.catalog import default_catalog
from warmstart.config import AutoModeCompute, EnvironmentConfig, KarpenterCompute
from warmstart.image_preload import builder_ami_parameter, image_set_key, snapshot_images
from warmstart.workload import compile_cache_root, pod_records_root, serving_images, weights_root


class ClusterStack(Stack):
    """EKS cluster, GPU capacity for the configured compute mode, and the node-level caches; each model's
    workload lives in a ModelStack of its own."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        network: WarmstartVpc,
        buckets: ArtifactBuckets,
        **kwargs,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        # Every cdk8s chart of this stack lives in this app; the cluster renders them into manifests.
        self.charts = cdk8s.App()
        compute = config.compute
        subnets = network.vpc.select_subnets(subnet_type=network.private_subnets.subnet_type).subnets
        auto_mode = isinstance(compute, AutoModeCompute)
        if auto_mode:
            self.auto_node_role = AutoModeNodeRole(self, "AutoModeNodeRole")
        self.control_plane = ControlPlane(
            self,
            "ControlPlane",
            cluster=config.cluster,
            vpc=network.vpc,
            private_subnets=network.private_subnets,
            capacity=eks.DefaultCapacityType.AUTOMODE if auto_mode else eks.DefaultCapacityType.NODEGROUP,
            compute=self.auto_node_role.compute_config() if auto_mode else None,
        )
        self.network_policy_support = NetworkPolicySupport(
            self, "NetworkPolicySupport", cluster=self.cluster, auto_mode=auto_mode
        )
        gpu_pool_after: list[Construct]
        if auto_mode:
            node_role, gpu_pool_after = self.auto_node_role.role, []
            if config.tags:  # the NodeClass carries them: Auto Mode needs leave to apply them before any launch
                self.custom_tags = AutoModeCustomTags(self, "AutoModeCustomTags", cluster_role=self.cluster.role)
                gpu_pool_after = [self.custom_tags.policy]
        else:
            assert isinstance(compute, KarpenterCompute)
            self.pod_identity_agent = PodIdentityAgent(self, "PodIdentityAgent", cluster=self.cluster)
            self.system_nodes = SystemNodes(
                self,
                "SystemNodes",
                cluster=self.cluster,
                group=compute.system_node_group,
                subnets=network.private_subnets,
            )
            self.karpenter = KarpenterController(
                self,
                "Karpenter",
                cluster=self.cluster,
                cluster_name=config.cluster.name,
                version=compute.karpenter_version,
            )
            self.karpenter.chart.node.add_dependency(self.pod_identity_agent, self.system_nodes)
            self.device_plugin = NvidiaDevicePlugin(
                self, "NvidiaDevicePlugin", cluster=self.cluster, version=compute.nvidia_device_plugin_version
            )
            node_role, gpu_pool_after = self.karpenter.node_role, [self.karpenter.chart]
        self.image_snapshot = None
        if config.image_preload.mode == "snapshot":
            assert isinstance(compute, KarpenterCompute)  # the config refuses a snapshot in Auto Mode
            self.image_snapshot = ImageSnapshotBuild(
                self,
                "ImageSnapshot",
                environment=config.name,
                settings=config.image_preload.snapshot,
                images=snapshot_images(config),
                image_set_key=image_set_key(config),
                ami_parameter=builder_ami_parameter(compute, config.cluster.kubernetes_version),
                vpc=network.vpc,
                subnet=subnets[0],
            )
        self.gpu_pool = GpuNodePool(
            self,
            "GpuPool",
            cluster=self.cluster,
            charts=self.charts,
            compute=compute,
            node_role=node_role,
            subnets=subnets,
            tags=config.tags,
            image_preload=config.image_preload,
            data_volume_snapshot_id=self.image_snapshot.snapshot_id if self.image_snapshot else None,
            after=gpu_pool_after,
        )
        catalog = default_catalog()
        settings = agent_settings(config, catalog)
        images = serving_images(config) if config.image_preload.mode != "off" else []
        self.system_namespace: eks.KubernetesManifest | None = None
        self.node_agent: NodeAgent | None = None
        self.image_cache: ImageCache | None = None
        self.agent_image: AgentImage | None = None
        if not (settings.models or images):
            return  # no node-level cache: no agent image, no warmstart-system namespace
        self.system_namespace = self.cluster.add_cdk8s_chart(
            "WarmstartSystem", SystemNamespace(self.charts, "WarmstartSystem")
        )
        self.agent_image = AgentImage(self, "AgentImage")
        if settings.models:
            self.node_agent = NodeAgent(
                self,
                "NodeAgent",
                cluster=self.cluster,
                charts=self.charts,
                image=self.agent_image,
                settings=settings,
                cache_root=compile_cache_root(config),
                weights_root=weights_root(config),
                pod_records_root=pod_records_root(config),
                model_kms_key_arn=config.buckets.models.kms_key_arn,
            )
            self.node_agent.manifest.node.add_dependency(self.system_namespace)
        if images:
            self.image_cache = ImageCache(
                self,
                "ImageCache",
                cluster=self.cluster,
                charts=self.charts,
                images=images,
                pause_image=config.caches.pause_image,
                gate_image=self.agent_image,
                rollout_wait_seconds=config.image_preload.rollout_wait_minutes * 60,
            )
            self.image_cache.manifest.node.add_dependency(self.system_namespace)

    def before_workload(self, image: str) -> list[Construct]:
        """What a model's workload must wait for: a GPU pool to land on, and its image's rollout gate."""
        gate = [self.image_cache.gates[image]] if self.image_cache is not None else []
        return [self.gpu_pool.manifest, *gate]

    @property
    def cluster(self) -> eks.Cluster:
        return self.control_plane.cluster
