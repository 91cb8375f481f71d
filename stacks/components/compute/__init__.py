"""GPU capacity, one construct per compute mode with one contract (`contract.GpuCompute`).

`gpu_compute` is the one place below app.py that turns the config's compute mode into constructs: the cluster
stack composes whatever it returns without asking which mode it is.
"""

from __future__ import annotations

from constructs import Construct

from image_preload.snapshot import SnapshotRequest
from stacks.components.compute.auto_mode import AutoModeGpuCompute
from stacks.components.compute.contract import GpuCompute
from stacks.components.compute.karpenter import KarpenterGpuCompute
from stacks.components.network import WarmstartVpc
from warmstart.config import AutoModeCompute, EnvironmentConfig, KarpenterCompute
from warmstart.image_preload import builder_ami_parameter, image_set_key, snapshot_images


def gpu_compute(scope: Construct, id: str, *, config: EnvironmentConfig, network: WarmstartVpc) -> GpuCompute:
    compute = config.compute
    if isinstance(compute, AutoModeCompute):
        return AutoModeGpuCompute(scope, id, compute=compute, tags=config.tags, network=network)
    assert isinstance(compute, KarpenterCompute)
    return KarpenterGpuCompute(
        scope,
        id,
        compute=compute,
        cluster_name=config.cluster.name,
        tags=config.tags,
        image_preload=config.image_preload,
        snapshot=snapshot_request(config, compute),
        network=network,
    )


def snapshot_request(config: EnvironmentConfig, compute: KarpenterCompute) -> SnapshotRequest | None:
    if config.image_preload.mode != "snapshot":
        return None
    return SnapshotRequest(
        environment=config.name,
        settings=config.image_preload.snapshot,
        images=snapshot_images(config),
        image_set_key=image_set_key(config),
        ami_parameter=builder_ami_parameter(compute, config.cluster.kubernetes_version),
    )
