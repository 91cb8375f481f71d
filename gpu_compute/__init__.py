"""GPU capacity, one construct per compute mode, each of which creates the cluster and hands back one
`contract.ComputeInfo`.

`gpu_compute` is the one place below app.py that turns the config's compute mode into constructs: the cluster
stack composes whatever it returns without asking which mode it is.
"""

from __future__ import annotations

import cdk8s
from constructs import Construct

from construct_kit.network import ClusterNetwork
from gpu_compute.auto_mode import AutoModeGpuCompute
from gpu_compute.contract import ComputeInfo
from gpu_compute.karpenter import KarpenterGpuCompute
from image_preload.snapshot import SnapshotRequest
from warmstart.config.compute import AutoModeCompute, KarpenterCompute
from warmstart.config.environment import EnvironmentConfig
from warmstart.image_preload import image_set_key, snapshot_images


def gpu_compute(
    scope: Construct, id: str, *, config: EnvironmentConfig, network: ClusterNetwork, charts: cdk8s.App
) -> ComputeInfo:
    """The cluster, created by the config's compute mode, and what the mode made for it."""
    compute = config.compute
    if isinstance(compute, AutoModeCompute):
        return AutoModeGpuCompute(
            scope, id, compute=compute, cluster=config.cluster, tags=config.tags, network=network, charts=charts
        ).info
    assert isinstance(compute, KarpenterCompute)
    return KarpenterGpuCompute(
        scope,
        id,
        compute=compute,
        cluster=config.cluster,
        tags=config.tags,
        image_preload=config.image_preload,
        snapshot=snapshot_request(config, compute),
        network=network,
        charts=charts,
    ).info


def snapshot_request(config: EnvironmentConfig, compute: KarpenterCompute) -> SnapshotRequest | None:
    if not config.image_preload.strategy.boots_with_images:
        return None
    return SnapshotRequest(
        environment=config.name,
        settings=config.image_preload.snapshot,
        images=snapshot_images(config),
        image_set_key=image_set_key(config),
        # The nodes' OS names the builder's AMI (the checks refused snapshots on an OS without one).
        ami_parameter=compute.node_os.snapshot_builder_ami_parameter(config.cluster.kubernetes_version),
    )
