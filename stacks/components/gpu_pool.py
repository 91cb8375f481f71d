"""The GPU NodePool and its node class, for whichever compute mode the config names."""

from __future__ import annotations

from collections.abc import Sequence

import cdk8s
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from k8s.gpu_nodes import AutoModeGpuNodes, KarpenterGpuNodes
from warmstart.config import AutoModeCompute, ImagePreload, KarpenterCompute


class GpuNodePool(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.Cluster,
        charts: cdk8s.App,
        compute: AutoModeCompute | KarpenterCompute,
        node_role: iam.IRole,
        subnets: Sequence[ec2.ISubnet],
        tags: dict[str, str],
        image_preload: ImagePreload,
        data_volume_snapshot_id: str | None = None,
        after: Sequence[Construct] = (),
    ) -> None:
        super().__init__(scope, id)
        role, subnet_ids = node_role.role_name, [subnet.subnet_id for subnet in subnets]
        groups = [cluster.cluster_security_group_id]
        self.chart: AutoModeGpuNodes | KarpenterGpuNodes
        if isinstance(compute, AutoModeCompute):
            self.chart = AutoModeGpuNodes(
                charts,
                "GpuNodes",
                compute=compute,
                node_role_name=role,
                subnet_ids=subnet_ids,
                security_group_ids=groups,
                tags=tags,
            )
        else:
            self.chart = KarpenterGpuNodes(
                charts,
                "GpuNodes",
                compute=compute,
                node_role_name=role,
                subnet_ids=subnet_ids,
                security_group_ids=groups,
                tags=tags,
                image_preload=image_preload,
                data_volume_snapshot_id=data_volume_snapshot_id,
            )
        self.manifest = cluster.add_cdk8s_chart("GpuNodes", self.chart)
        for dependency in after:  # e.g. the Karpenter chart, which installs the CRDs
            self.manifest.node.add_dependency(dependency)
