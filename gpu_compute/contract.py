"""What every compute mode provides, so that the cluster stack composes any of them the same way.

A mode's construct creates the cluster (the control plane, with the mode's capacity: Auto Mode's node role must
exist before the cluster, which is created with it) and everything that runs on or for it (node groups,
controllers, add-ons, NetworkPolicy enforcement, the GPU NodePool), in one step, and hands back `ComputeInfo`:
what every other construct reads. Each mode's constructs acknowledge their own cdk-nag findings.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from construct_kit.control_plane import ClusterHandle
from gpu_compute.gpu_pool import GpuNodePool


@dataclass(frozen=True)
class ComputeInfo:
    """The cluster a compute mode created and what the rest of the stack needs of the mode."""

    control_plane: ClusterHandle
    # The GPU nodes' role.
    node_role: iam.IRole
    gpu_pool: GpuNodePool
    # What runs cluster services (Karpenter's system node group; Auto Mode's built-in pools): their charts wait
    # for it.
    cluster_services: Construct
    # What a model's workload is applied after (the GPU pool it lands on).
    workloads_wait_for: tuple[Construct, ...]

    @property
    def cluster(self) -> eks.Cluster:
        return self.control_plane.cluster
