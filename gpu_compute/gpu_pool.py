"""The GPU NodePool and its node class, applied through the cluster; each compute mode builds the chart."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from construct_kit.source import applies_objects
from kube.gpu_nodes import AutoModeGpuNodes, KarpenterGpuNodes


class GpuNodePool(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.Cluster,
        chart: AutoModeGpuNodes | KarpenterGpuNodes,
        after: Sequence[Construct] = (),
    ) -> None:
        super().__init__(scope, id)
        self.chart = chart
        # None where a GitOps tool applies the chart (rendered to dist/<env>/).
        self.manifest = cluster.add_cdk8s_chart("GpuNodes", chart) if applies_objects(cluster) else None
        if self.manifest is not None:
            for dependency in after:  # e.g. the Karpenter chart, which installs the CRDs
                self.manifest.node.add_dependency(dependency)
