"""Derived values: pure functions of the config and the GPU catalog."""

from __future__ import annotations

import math

from warmstart.catalog import Catalog, GpuInstance
from warmstart.config.base import GIB
from warmstart.config.compute import AutoModeCompute, KarpenterCompute
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import ModelSpec


class SizingError(ValueError):
    """A derived value cannot be computed; the message names the numbers."""


def nvme_mount(compute: AutoModeCompute | KarpenterCompute) -> str:
    """Where the GPU nodes' OS mounts the instance-store array (warmstart/node_os/)."""
    return compute.node_os.nvme_mount


def candidate_instances(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog) -> list[GpuInstance]:
    """The catalog entries of every instance type the model's pods may land on."""
    types = model.instance_types or config.compute.gpu_pool.instance_types
    return [catalog.instance(name) for name in types]


def valid_tensor_parallel_sizes(instance: GpuInstance) -> list[int]:
    """TP sizes that split one instance's GPUs evenly (vLLM places one rank per GPU on one node)."""
    return [size for size in range(1, instance.gpu_count + 1) if instance.gpu_count % size == 0]


def weights_fit(size_gb: float, tensor_parallel_size: int, instance: GpuInstance, fraction: float) -> bool:
    """True when each rank's shard of the weights leaves (1 - fraction) of its GPU for KV cache."""
    return size_gb <= tensor_parallel_size * instance.gpu_memory_gb * fraction


def smallest_tensor_parallel_size(size_gb: float, instances: list[GpuInstance], fraction: float) -> int:
    """The fewest GPUs that hold the weights with headroom on every candidate instance type."""
    common = set.intersection(*(set(valid_tensor_parallel_sizes(i)) for i in instances))
    for size in sorted(common):
        if all(weights_fit(size_gb, size, i, fraction) for i in instances):
            return size
    limits = ", ".join(
        f"{i.instance_type}: {i.gpu_count} x {i.gpu_memory_gb} GB x {fraction:g} = "
        f"{i.total_gpu_memory_gb * fraction:g} GB"
        for i in instances
    )
    raise SizingError(f"{size_gb:g} GB of weights do not fit any tensor parallel size ({limits})")


def derived_tensor_parallel_size(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog) -> int:
    if model.tensor_parallel_size != "auto":
        return model.tensor_parallel_size
    instances = candidate_instances(model, config, catalog)
    return smallest_tensor_parallel_size(model.size_gb, instances, model.weights_memory_fraction)


def ephemeral_storage_bytes(compute: AutoModeCompute) -> int:
    return compute.ephemeral_storage_gib * GIB


def ephemeral_storage_below_nvme(compute: AutoModeCompute, instance: GpuInstance) -> bool:
    """Auto Mode mounts instance store only when the requested root size is smaller than the NVMe."""
    return ephemeral_storage_bytes(compute) < instance.nvme_bytes


# Share of a node's CPU and memory a GPU pod may request by default: the rest leaves room for kube-reserved, the
# eviction threshold and the DaemonSets, which the node model takes first (every catalog type's defaults fit what its
# node offers: tests/unit/test_node_model.py).
POD_SHARE_OF_NODE = 0.75


def default_requests(instances: list[GpuInstance], tensor_parallel_size: int) -> tuple[float, int]:
    """(cpu, memory GiB): the pod's GPU share of the smallest candidate instance, less the node reserve."""
    cpu = min(i.vcpus * tensor_parallel_size / i.gpu_count for i in instances) * POD_SHARE_OF_NODE
    memory = min(i.memory_gib * tensor_parallel_size / i.gpu_count for i in instances) * POD_SHARE_OF_NODE
    return max(1.0, math.floor(cpu)), max(1, math.floor(memory))
