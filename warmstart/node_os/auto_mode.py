"""EKS Auto Mode's managed OS: Bottlerocket, whose release is AWS's choice, behind a NodeClass that takes no AMI,
user data or block device mapping."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from warmstart.checks.fix import removing
from warmstart.node_os.base import NodeOs, SnapshotObstacle
from warmstart.node_os.bottlerocket import NVME_MOUNT
from warmstart.refusal import Refusal

if TYPE_CHECKING:
    from warmstart.config import ImagePreload, KarpenterCompute


class AutoModeOs(NodeOs):
    name = "auto-mode"
    pinned_by_alias = False
    # Auto Mode's nodes run Bottlerocket: the array is where Bottlerocket mounts it.
    nvme_mount = NVME_MOUNT

    def parallel_pull_refusal(self, preload: ImagePreload) -> Refusal | None:
        return Refusal(
            "image_preload.parallel_pull",
            "Auto Mode has no setting for the container runtime's snapshotter (its NodeClass takes no user data)",
            "remove parallel_pull (or move the environment to compute.mode: karpenter with an AL2023 ami_alias, "
            "whose settings differ)",
            (removing("image_preload.parallel_pull"),),
        )

    def snapshot_obstacle(self) -> SnapshotObstacle | None:
        return SnapshotObstacle("in Auto Mode", "its NodeClass takes no AMI, user data or block device mapping")

    def karpenter_storage(
        self, compute: KarpenterCompute, preload: ImagePreload, snapshot_id: str | None
    ) -> dict[str, Any]:
        raise TypeError("Auto Mode's nodes have no EC2NodeClass: their storage is the NodeClass's ephemeralStorage")
