"""What a GPU node's operating system decides: one object per OS answers every OS question warmstart asks (where
the instance-store array is mounted, the EC2NodeClass's block devices and user data, whether SOCI parallel pull and
image snapshots work, and from which release). Nothing outside warmstart/node_os/ names an OS."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

from warmstart.problem import Problem


# What a node OS reads of the config, as the shapes it needs: the config model (warmstart/config/) builds on the OS
# objects, so the objects name no config class (no import circle, not even for types).
class PoolDisk(Protocol):
    """A Karpenter pool's settings an OS reads (warmstart.config.compute.KarpenterCompute)."""

    @property
    def ami_alias(self) -> str: ...
    @property
    def root_volume_gib(self) -> int: ...


class SnapshotVolume(Protocol):
    """The image snapshot's data volume (warmstart.config.caches.ImageSnapshot)."""

    @property
    def data_volume_gib(self) -> int: ...
    @property
    def data_volume_iops(self) -> int: ...
    @property
    def data_volume_throughput_mibps(self) -> int: ...
    @property
    def volume_initialization_rate_mibps(self) -> int | None: ...


class BootsWithImages(Protocol):
    @property
    def boots_with_images(self) -> bool: ...


class Preload(Protocol):
    """The image preload settings an OS reads (warmstart.config.caches.ImagePreload)."""

    @property
    def mode(self) -> str: ...
    @property
    def parallel_pull(self) -> bool: ...
    @property
    def snapshot(self) -> SnapshotVolume: ...
    @property
    def strategy(self) -> BootsWithImages: ...


@dataclass(frozen=True)
class SnapshotObstacle:
    """Why new nodes of an OS cannot start from an image snapshot: where, why, and what would allow it."""

    where: str
    why: str
    alternative: str = ""


def release(alias: str) -> tuple[int, ...]:
    """The pinned release of an AMI alias: 'bottlerocket@v1.46.0' -> (1, 46, 0); 'al2023@v20260930' -> (20260930,)."""
    return tuple(int(part) for part in alias.split("@", 1)[1].lstrip("v").split("."))


def dotted(parts: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in parts)


def newer_than_known(alias: str, family: str, newest: str, source: str) -> str:
    """The note for an alias newer than an OS's release table: taken, and checked at deploy instead."""
    return (
        f"{alias} is newer than the {family} releases warmstart knows (through {newest}; {source}): make deploy's "
        "preflight checks that Karpenter finds its GPU AMI"
    )


class NodeOs(ABC):
    """One OS, at the release a Karpenter AMI alias pins (Auto Mode's OS has no alias: AWS picks its release)."""

    # The OS's name as Karpenter's AMI alias spells its family, and how its alias reads (for messages).
    name: str
    alias_example: str = ""
    # A Karpenter pool pins it by an AMI alias (Auto Mode's OS is AWS's choice).
    pinned_by_alias: bool = True
    # Where the OS mounts the instance-store NVMe (RAID0 when several drives).
    nvme_mount: str
    # The cluster's add-ons (VPC CNI, kube-proxy, Pod Identity agent, NVIDIA device plugin) run on these nodes as
    # DaemonSet pods, which take their requests from each node (warmstart/node_model.py); Auto Mode's run inside.
    add_ons_as_pods: bool = True
    # Where Karpenter's labels of the instance type live on these nodes (`<domain>instance-gpu-count`, ...), and the
    # labels every node of the OS has besides.
    instance_label_domain: str = "karpenter.k8s.aws/"
    node_labels: dict[str, str] = {}  # noqa: RUF012 (read only)

    def kube_reserved_pods(self, eni_limited: int) -> int:
        """The pod count kube-reserved memory is reserved for (11 MiB each): Karpenter's ENI-limited count, which AL2023
        and Bottlerocket share while no maxPods is set."""
        return eni_limited

    def __init__(self, alias: str | None = None) -> None:
        self.alias = alias
        self.release = release(alias) if alias else ()

    @abstractmethod
    def parallel_pull_refusal(self, preload: Preload) -> Problem | None:
        """Why `image_preload.parallel_pull` cannot work on these nodes, or None."""

    # nodeadm-style minimum (vCPUs, GiB of memory) below which the OS silently skips parallel pull; None: no minimum.
    parallel_pull_min_node: tuple[int, float] | None = None
    # A serving image's pull rate with SOCI parallel pull as this OS runs it (MB/s, a published measurement; each
    # OS module cites its own), and whether its nodes pull that way whatever the config says (Auto Mode).
    parallel_pull_mb_per_s: float
    always_pulls_in_parallel: bool = False

    def pulls_in_parallel(self, preload: Preload, instance_type: str) -> bool:
        """Whether a pull on this node uses SOCI parallel pull and unpack."""
        return preload.parallel_pull

    @abstractmethod
    def snapshot_obstacle(self) -> SnapshotObstacle | None:
        """Why new nodes of this OS cannot start from an image snapshot; None where they can."""

    @classmethod
    def snapshot_alias(cls) -> str | None:
        """The oldest ami_alias of this OS whose nodes boot from image snapshots; None where none does."""
        return None

    @classmethod
    def alias_for_kubernetes(cls, alias: str, kubernetes_version: str) -> str:
        """The alias raised, where the OS's table knows it, to a release with an AMI for the cluster's Kubernetes
        version (a version newer than the table: the alias as it is)."""
        return alias

    def image_refusal(self, kubernetes_version: str, preload: Preload) -> Problem | None:
        """Why the pinned alias has no AMI for the cluster's Kubernetes version, or None."""
        return None

    def release_note(self, kubernetes_version: str) -> str | None:
        """What the OS's release table cannot say of the pinned alias (a release newer than the table), or None."""
        return None

    def gpu_ami_parameter(self, kubernetes_version: str, architecture: str) -> str:
        """The public SSM parameter Karpenter reads for this alias's GPU (NVIDIA) AMI on a node of the architecture
        (aws/karpenter-provider-aws v1.14.1 pkg/providers/amifamily/<family>.go `DescribeImageQuery`)."""
        raise TypeError(f"{self.name} is not pinned by an AMI alias")

    def snapshot_builder_ami_parameter(self, kubernetes_version: str) -> str:
        """The public SSM parameter of the AMI an image-snapshot builder runs (an OS that boots from snapshots)."""
        raise TypeError(f"{self.name} nodes do not boot from an image snapshot")

    @abstractmethod
    def karpenter_storage(self, compute: PoolDisk, preload: Preload, snapshot_id: str | None) -> dict[str, Any]:
        """The GPU EC2NodeClass's instance-store policy, block devices and user data."""
