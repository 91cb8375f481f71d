"""The `caches` and `image_preload` sections: which caches warmstart keeps on the node, and how serving images
reach a new node."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    Field,
    model_validator,
)

from warmstart.checks.fix import Edit, setting, together
from warmstart.config.base import Strict
from warmstart.preload_modes import PRELOAD_MODES, PreloadMode
from warmstart.problem import Refused

# The preload modes' names, from their objects (warmstart/preload_modes/): a new mode's module adds its name.
if TYPE_CHECKING:
    PreloadModeName = str
else:
    PreloadModeName = Literal[tuple(PRELOAD_MODES)]


# The image-cache DaemonSet's long-running container by default (tiny, pinned).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


class CacheSwitches(Strict):
    compile: bool = True
    weights: bool = False
    # Host folder of the torch.compile cache; default <NVMe mount>/compile-cache. Must stay under the
    # compute mode's NVMe mount, or DirectoryOrCreate would silently create it on the EBS root volume.
    compile_host_path: str | None = Field(default=None, pattern=r"^/")
    # Longest an inference pod waits for the node agent's restore before it compiles on its own.
    restore_wait_seconds: int = Field(default=90, ge=0, le=900)
    # How often the agent re-lists each cached model's S3 prefix: an update there is served by new pods
    # after at most this long (pods stream from S3 until the new copy is complete).
    weights_poll_seconds: int = Field(default=30, ge=5, le=3600)
    # NVMe budget per node beside the weights: container images (one per distinct serving image) and the
    # torch.compile cache.
    image_size_gb: float = Field(default=25, gt=0)
    compile_cache_reserve_gb: float = Field(default=10, ge=0)
    # The image-cache DaemonSet's long-running container (tiny, pinned).
    pause_image: str = PAUSE_IMAGE

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "image" in data:
            mode = "prepull" if data["image"] is True else "off"
            raise Refused(
                "caches.image moved to image_preload.mode",
                "write image_preload: {mode: prepull} (for true) or {mode: off} (for false)",
                together(Edit("image"), Edit("/image_preload.mode", mode)),
            )
        return data


class ImageSnapshot(Strict):
    """The EBS snapshot GPU nodes' container-image volume starts from (image_preload.mode: snapshot)."""

    # Bottlerocket's data volume (/dev/xvdb): the container images, plus room for what containers write.
    data_volume_gib: int = Field(default=150, ge=20, le=16384)
    data_volume_iops: int = Field(default=6000, ge=3000, le=16000)
    data_volume_throughput_mibps: int = Field(default=500, ge=125, le=1000)
    # A volume made from a snapshot fetches each block from S3 on first read; an initialization rate (100-300
    # MiB/s, EBS "Provisioned rate for volume initialization") makes the whole volume local at a known pace.
    volume_initialization_rate_mibps: int | None = Field(default=300, ge=100, le=300)
    # The short-lived instance that pulls the images (network and CPU for unpacking).
    builder_instance_type: str = Field(default="m7i.2xlarge", pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
    # Longest one build may take (launch, pull, stop, snapshot); the deploy waits for it inside one custom
    # resource call, which CloudFormation (and CDK's provider framework) bound at one hour.
    build_timeout_minutes: int = Field(default=50, ge=30, le=50)


class ImagePreload(Strict):
    """How the serving images reach a GPU node before the pods that need them.

    off: every pod pulls its image itself. prepull: a DaemonSet per image pulls it onto every GPU node as the
    node joins, and a new image reaches the existing nodes before its pods roll. snapshot (Karpenter with
    Bottlerocket): new nodes boot with the images already on their data volume, made from an EBS snapshot the
    stack builds; the prepull DaemonSets stay for nodes that predate a new snapshot."""

    mode: PreloadModeName = "prepull"
    # SOCI parallel pull and unpack for every pull on the GPU nodes (Karpenter nodes; not lazy loading).
    parallel_pull: bool = False
    # Longest a rollout to a new image waits for its prepull DaemonSet (the deploy's kubectl step lasts 15 min,
    # which must also hold the gate Job's start and status).
    rollout_wait_minutes: int = Field(default=10, ge=1, le=10)
    snapshot: ImageSnapshot = ImageSnapshot()

    @property
    def strategy(self) -> PreloadMode:
        """The mode's object: what it runs and how an image reaches a new node."""
        return PRELOAD_MODES[self.mode]

    @model_validator(mode="before")
    @classmethod
    def _lazy(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("mode") == "lazy":
            raise Refused(
                "lazy loading is not available on EKS nodes: Bottlerocket's SOCI snapshotter runs in parallel-pull "
                "mode only and the AL2023 AMI's FastImagePull turns lazy loading off (docs/caches.md, 'Container "
                "images on new nodes')",
                "use mode: prepull or snapshot, with parallel_pull: true for faster pulls",
                setting("mode", "prepull"),
            )
        return data
