"""What every compute mode's construct provides, so that the cluster stack composes any of them the same way.

A mode is built in two phases, because the cluster needs part of it and the rest needs the cluster:
1. its constructor, before the cluster: what the cluster is created with (`cluster_capacity`; Auto Mode's node
   role must exist first);
2. `attach(cluster=..., charts=...)`, once the cluster exists: everything that runs on or for it (node groups,
   controllers, add-ons, NetworkPolicy enforcement, the GPU NodePool).
After `attach` it exposes `node_role` (the GPU nodes' role), `gpu_pool` and `workloads_wait_for` (what a model's
workload must be applied after). Each mode's constructs acknowledge their own cdk-nag findings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

import cdk8s
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, Node

from stacks.components.compute.gpu_pool import GpuNodePool


@dataclass(frozen=True)
class ClusterCapacity:
    """How the cluster itself is created for a mode (aws_eks_v2 Cluster's default capacity and compute)."""

    type: eks.DefaultCapacityType
    compute: eks.ComputeConfig | None = None


class GpuCompute(Protocol):
    @property
    def node(self) -> Node: ...

    @property
    def node_role(self) -> iam.IRole: ...

    def cluster_capacity(self) -> ClusterCapacity: ...

    def attach(self, *, cluster: eks.Cluster, charts: cdk8s.App) -> None: ...

    @property
    def gpu_pool(self) -> GpuNodePool: ...

    @property
    def workloads_wait_for(self) -> list[Construct]: ...


Attached = TypeVar("Attached")


def attached(parts: Attached | None, mode: Construct) -> Attached:
    """A mode's second-phase parts; asking for them before `attach` is a wiring mistake, named as such."""
    if parts is None:
        raise RuntimeError(f"{mode.node.path}: call attach(cluster=...) before using what it creates")
    return parts
