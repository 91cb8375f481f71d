"""GPU instance catalog: typed access to catalog.yaml (no AWS or CDK imports)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

CATALOG_FILE = Path(__file__).with_name("catalog.yaml")
BYTES_PER_GB = 10**9


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GpuModel(_Frozen):
    architecture: str = Field(pattern=r"^sm_\d{2,3}$")
    memory_gb: PositiveInt
    device_name: str = Field(min_length=1)  # as the driver reports it (NVML, torch.cuda.get_device_name)


class InstanceSpec(_Frozen):
    gpu: str
    gpu_count: PositiveInt
    nvme_gb: PositiveInt
    vcpus: PositiveInt
    memory_gib: PositiveInt
    network_gbit_per_s: PositiveFloat
    max_pods: PositiveInt  # Karpenter's ENI-limited pod count: its kube-reserved memory grows with it
    nvme_read_gb_per_s: PositiveFloat | None = None  # only where a published figure applies


class GpuInstance(_Frozen):
    """One instance type with its GPU facts resolved."""

    instance_type: str
    gpu_name: str
    device_name: str
    architecture: str
    gpu_count: int
    gpu_memory_gb: int
    nvme_gb: int
    vcpus: int
    memory_gib: int
    network_gbit_per_s: float
    max_pods: int
    nvme_read_gb_per_s: float | None = None

    @property
    def compute_capability(self) -> tuple[int, int]:
        """sm_90 -> (9, 0), sm_103 -> (10, 3): the last digit is the minor version."""
        digits = self.architecture.removeprefix("sm_")
        return int(digits[:-1]), int(digits[-1])

    @property
    def nvme_bytes(self) -> int:
        return self.nvme_gb * BYTES_PER_GB

    @property
    def total_gpu_memory_gb(self) -> int:
        return self.gpu_count * self.gpu_memory_gb


class Catalog(_Frozen):
    gpus: dict[str, GpuModel]
    instances: dict[str, InstanceSpec]

    @model_validator(mode="after")
    def _gpus_known(self) -> Catalog:
        unknown = sorted({spec.gpu for spec in self.instances.values()} - set(self.gpus))
        if unknown:
            raise ValueError(f"instances name GPUs missing from 'gpus': {unknown}")
        return self

    def knows(self, instance_type: str) -> bool:
        return instance_type in self.instances

    def instance(self, instance_type: str) -> GpuInstance:
        try:
            spec = self.instances[instance_type]
        except KeyError:
            raise KeyError(
                f"{instance_type!r} is not in the GPU catalog ({CATALOG_FILE.name}); "
                f"known types: {', '.join(sorted(self.instances))}"
            ) from None
        gpu = self.gpus[spec.gpu]
        return GpuInstance(
            instance_type=instance_type,
            gpu_name=spec.gpu,
            device_name=gpu.device_name,
            architecture=gpu.architecture,
            gpu_count=spec.gpu_count,
            gpu_memory_gb=gpu.memory_gb,
            nvme_gb=spec.nvme_gb,
            vcpus=spec.vcpus,
            memory_gib=spec.memory_gib,
            network_gbit_per_s=spec.network_gbit_per_s,
            max_pods=spec.max_pods,
            nvme_read_gb_per_s=spec.nvme_read_gb_per_s,
        )


@lru_cache(maxsize=1)
def default_catalog() -> Catalog:
    return Catalog.model_validate(yaml.safe_load(CATALOG_FILE.read_text()))
