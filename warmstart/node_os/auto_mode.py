"""EKS Auto Mode's managed OS: Bottlerocket, whose release is AWS's choice, behind a NodeClass that takes no AMI,
user data or block device mapping."""

from __future__ import annotations

from typing import Any

from warmstart.node_os.base import NodeOs, PoolDisk, Preload, SnapshotObstacle
from warmstart.node_os.bottlerocket import NVME_MOUNT
from warmstart.problem import Problem

KUBELET_DEFAULT_MAX_PODS = 110


class AutoModeOs(NodeOs):
    name = "auto-mode"
    pinned_by_alias = False
    # Auto Mode's nodes run Bottlerocket: the array is where Bottlerocket mounts it.
    nvme_mount = NVME_MOUNT

    # Its VPC CNI, kube-proxy, Pod Identity agent and GPU plugin are part of the node, no DaemonSet (EKS user guide,
    # Auto Mode: "core components, as opposed to add-ons"; the add-ons' own manifests keep off compute-type auto).
    add_ons_as_pods = False
    instance_label_domain = "eks.amazonaws.com/"
    node_labels = {"eks.amazonaws.com/compute-type": "auto"}  # noqa: RUF012 (read only)

    def kube_reserved_pods(self, eni_limited: int) -> int:
        """Auto Mode caps a node's pods at 110 after its own ENI count and publishes no reserves (EKS user guide):
        the larger of the two counts it could reserve for, so that a node offers no less than warmstart takes."""
        return max(eni_limited, KUBELET_DEFAULT_MAX_PODS)

    # EKS user guide, "Load & Serve Models" (vLLM 0.21.0 DLC on g6e.4xlarge, Auto Mode): 8,802,823,997 bytes
    # pulled in 48.376 s with SOCI parallel pull: 182 MB/s.
    parallel_pull_mb_per_s = 182

    def pulls_in_parallel(self, preload: Preload, instance_type: str) -> bool:
        """EKS Auto Mode release notes (2025-11-19): SOCI parallel pull and unpack is always used on G, P and Trn
        instances with local NVMe, with no setting to turn it off; other families pull plainly."""
        return instance_type.startswith(("g", "p", "trn"))  # the catalog's GPU types all have local NVMe

    def parallel_pull_refusal(self, preload: Preload) -> Problem | None:
        return None  # Auto Mode pulls in parallel on GPU instances by itself: the setting changes nothing there

    def snapshot_obstacle(self) -> SnapshotObstacle | None:
        return SnapshotObstacle("in Auto Mode", "its NodeClass takes no AMI, user data or block device mapping")

    def karpenter_storage(self, compute: PoolDisk, preload: Preload, snapshot_id: str | None) -> dict[str, Any]:
        raise TypeError("Auto Mode's nodes have no EC2NodeClass: their storage is the NodeClass's ephemeralStorage")
