from __future__ import annotations

import cdk8s
from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from construct_kit.buckets import ArtifactBuckets
from construct_kit.network import ClusterNetwork, ImportedVpc
from construct_kit.serving_metrics import ServingMetrics
from construct_kit.source import applies_objects
from gpu_compute import gpu_compute
from image_preload.prepull import PrepullDaemonSets
from kube.system import SystemNamespace
from node_agent.chart import MetricsScrapers, NodeFolders
from node_agent.construct import NodeAgent
from node_agent.image import AgentImage
from warmstart.agent_config import agent_settings, metrics_scraper_cidrs
from warmstart.catalog import default_catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.node_caches import serving_images
from warmstart.workload import compile_cache_root, pod_records_root, weights_root


class ClusterStack(Stack):
    """EKS cluster, GPU capacity for the configured compute mode, and the node-level caches; each model's
    workload lives in a ModelStack of its own."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        config: EnvironmentConfig,
        network: ClusterNetwork | None,
        buckets: ArtifactBuckets,
        **kwargs,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        if network is None:  # an existing VPC that the network stack has nothing to add to: imported here
            assert config.network.existing is not None
            network = ImportedVpc(self, "Vpc", existing=config.network.existing, add_s3_endpoint=False)
        # Every cdk8s chart of this stack lives in this app; the cluster renders them into manifests.
        self.charts = cdk8s.App()
        # The compute mode creates the cluster and what runs its nodes.
        self.compute = gpu_compute(self, "GpuCompute", config=config, network=network, charts=self.charts)
        self.control_plane = self.compute.control_plane
        # Autoscaled models read their load through the external metrics API (Prometheus and KEDA).
        self.serving_metrics = (
            ServingMetrics(
                self, "ServingMetrics", cluster=self.cluster, kubernetes_version=config.cluster.kubernetes_version
            )
            if any(model.autoscaling for model in config.models)
            else None
        )
        if self.serving_metrics is not None:
            # After the compute mode's nodes for cluster services (Karpenter's system node group; Auto Mode's
            # built-in pools), which Prometheus and KEDA run on.
            self.serving_metrics.prometheus.node.add_dependency(self.compute.cluster_services)
        self.system_namespace: eks.KubernetesManifest | None = None
        self.node_agent: NodeAgent | None = None
        self.prepull: PrepullDaemonSets | None = None
        self.agent_image: AgentImage | None = None
        self._node_caches(config)

    def _node_caches(self, config: EnvironmentConfig) -> None:
        """The node agent and the prepull DaemonSets, in warmstart's own namespace, when any model uses one."""
        catalog = default_catalog()
        settings = agent_settings(config, catalog)
        images = serving_images(config) if config.image_preload.strategy.prepulls else []
        if not (settings.models or images):
            return  # no node-level cache: no agent image, no warmstart-system namespace
        namespace = SystemNamespace(
            self.charts, "WarmstartSystem", kubernetes_version=config.cluster.kubernetes_version
        )
        # None where a GitOps tool applies the charts (rendered to dist/<env>/).
        self.system_namespace = (
            self.cluster.add_cdk8s_chart("WarmstartSystem", namespace) if applies_objects(self.cluster) else None
        )
        self.agent_image = AgentImage(self, "AgentImage", prebuilt=config.deploy.agent_image)
        if settings.models:
            self.node_agent = NodeAgent(
                self,
                "NodeAgent",
                cluster=self.cluster,
                charts=self.charts,
                image=self.agent_image,
                settings=settings,
                folders=NodeFolders(
                    compile_cache_root(config),
                    weights_root(config),
                    pod_records_root(config),
                    tuple(config.cluster.trusted_node_readers),
                ),
                scrapers=MetricsScrapers(metrics_scraper_cidrs(config), list(config.metrics.scraper_namespaces)),
                model_kms_key_arn=config.buckets.models.kms_key_arn,
            )
            if self.node_agent.manifest and self.system_namespace:
                self.node_agent.manifest.node.add_dependency(self.system_namespace)
        if images:
            self.prepull = PrepullDaemonSets(
                self,
                "ImageCache",
                cluster=self.cluster,
                charts=self.charts,
                images=images,
                pause_image=config.caches.pause_image,
                gate_image=self.agent_image,
                rollout_wait_seconds=config.image_preload.rollout_wait_minutes * 60,
            )
            if self.prepull.manifest and self.system_namespace:
                self.prepull.manifest.node.add_dependency(self.system_namespace)

    def before_workload(self, image: str) -> list[Construct]:
        """What a model's workload must wait for: its compute mode's (the GPU pool to land on), and its image's
        rollout gate."""
        gate = [self.prepull.gates[image]] if self.prepull is not None and self.prepull.gates else []
        return [*self.compute.workloads_wait_for, *gate]

    @property
    def cluster(self) -> eks.Cluster:
        return self.control_plane.cluster
