"""Derived values: pure functions of the config and the GPU catalog."""

from __future__ import annotations

from warmstart.catalog import Catalog, GpuInstance
from warmstart.config import GIB, AutoModeCompute, EnvironmentConfig, KarpenterCompute, ModelSpec

# Where the instance-store NVMe is mounted (RAID0 when several drives), by node OS:
# - AL2023 (Karpenter instanceStorePolicy RAID0 -> nodeadm localStorage RAID0): amazon-eks-ami
#   templates/al2023/runtime/bin/setup-local-disks mounts the array at /mnt/k8s-disks/0.
# - Bottlerocket (Karpenter RAID0, warmstart's own bootstrap command, and EKS Auto Mode, whose nodes run
#   Bottlerocket): `apiclient ephemeral-storage init` mounts /dev/md/ephemeral at /mnt/.ephemeral
#   (bottlerocket-core-kit, apiclient ephemeral_storage.rs).
AL2023_NVME_MOUNT = "/mnt/k8s-disks/0"
BOTTLEROCKET_NVME_MOUNT = "/mnt/.ephemeral"


def ami_family(compute: AutoModeCompute | KarpenterCompute) -> str:
    """'bottlerocket' or 'al2023': each mode's settings know their nodes' OS."""
    return compute.node_os


def ami_version(compute: KarpenterCompute) -> tuple[int, ...]:
    """The pinned release of the alias: 'bottlerocket@v1.46.0' -> (1, 46, 0); 'al2023@v20260930' -> (20260930,)."""
    return tuple(int(part) for part in compute.ami_alias.split("@", 1)[1].lstrip("v").split("."))


class SizingError(ValueError):
    """A derived value cannot be computed; the message names the numbers."""


def nvme_mount(compute: AutoModeCompute | KarpenterCompute) -> str:
    return BOTTLEROCKET_NVME_MOUNT if ami_family(compute) == "bottlerocket" else AL2023_NVME_MOUNT


def candidate_instances(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog) -> list[GpuInstance]:
    """The catalog entries of every instance type the model's pods may land on."""
    types = model.instance_types or config.compute.gpu_pool.instance_types
    return [catalog.instance(name) for name in types]


def valid_tensor_parallel_sizes(instance: GpuInstance) -> list[int]:
    """TP sizes that split one instance's GPUs evenly (vLLM places one rank per GPU on one node)."""
    return [size for size in range(1, instance.gpu_count + 1) if instance.gpu_count % size == 0]


def weights_fit(size_gb: float, tensor_parallel: int, instance: GpuInstance, fraction: float) -> bool:
    """True when each rank's shard of the weights leaves (1 - fraction) of its GPU for KV cache."""
    return size_gb <= tensor_parallel * instance.gpu_memory_gb * fraction


def smallest_tensor_parallel(size_gb: float, instances: list[GpuInstance], fraction: float) -> int:
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


def tensor_parallel_size(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog) -> int:
    if model.tensor_parallel_size != "auto":
        return model.tensor_parallel_size
    instances = candidate_instances(model, config, catalog)
    return smallest_tensor_parallel(model.size_gb, instances, model.weights_memory_fraction)


def ephemeral_storage_bytes(compute: AutoModeCompute) -> int:
    return compute.ephemeral_storage_gib * GIB


def ephemeral_storage_below_nvme(compute: AutoModeCompute, instance: GpuInstance) -> bool:
    """Auto Mode mounts instance store only when the requested root size is smaller than the NVMe."""
    return ephemeral_storage_bytes(compute) < instance.nvme_bytes
