"""Amazon Linux 2023, the EKS-optimized AMI (Karpenter's `al2023@v<release>` alias)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from warmstart.checks.fix import removing, setting
from warmstart.node_os.base import NodeOs, SnapshotObstacle, dotted
from warmstart.refusal import Refusal

if TYPE_CHECKING:
    from warmstart.config import ImagePreload, KarpenterCompute

# nodeadm's RAID0 (Karpenter instanceStorePolicy RAID0 -> nodeadm localStorage RAID0): amazon-eks-ami
# templates/al2023/runtime/bin/setup-local-disks mounts the array here.
NVME_MOUNT = "/mnt/k8s-disks/0"
# Karpenter's default GPU pool OS: a pinned EKS-optimized AMI release ("latest" would roll nodes on every release).
DEFAULT_AMI_ALIAS = "al2023@v20260930"
# NodeConfig spec.featureGates.FastImagePull exists from amazon-eks-ami v20250821 (PR #2352 added it in v20250813
# under another name), but setup-local-disks binds /var/lib/soci-snapshotter-grpc onto the RAID0 array only from
# v20251217 (BIND_SOCI): before it, SOCI unpacks every image onto the root EBS volume.
FAST_IMAGE_PULL_SINCE = (20251217,)
# nodeadm applies FastImagePull only on nodes with at least 4 vCPUs and 7 GiB of memory
# (nodeadm/internal/containerd/config.go, UseSOCISnapshotter).
FAST_IMAGE_PULL_MIN_VCPUS = 4
FAST_IMAGE_PULL_MIN_MEMORY_GIB = 7
# SOCI parallel pull and unpack (nodeadm NodeConfig feature gate; Karpenter merges this NodeConfig with its own,
# amazon-eks-ami v20250821+).
FAST_IMAGE_PULL_NODE_CONFIG = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  featureGates:
    FastImagePull: true

--//--
"""


class Al2023(NodeOs):
    name = "al2023"
    # aws-samples/karpenter-blueprints, blueprints/soci-snapshotter (2026-06-08): the 9,354,342,327-byte vLLM 0.22.0
    # DLC pulled in 39.553 s with FastImagePull on AL2023: 236 MB/s (on c/m/r instances: no GPU-node figure for
    # AL2023 is published).
    parallel_pull_mb_per_s = 236
    alias_example = "al2023@v<release>"
    nvme_mount = NVME_MOUNT
    parallel_pull_min_node = (FAST_IMAGE_PULL_MIN_VCPUS, FAST_IMAGE_PULL_MIN_MEMORY_GIB)

    def parallel_pull_refusal(self, preload: ImagePreload) -> Refusal | None:
        if self.release >= FAST_IMAGE_PULL_SINCE:
            return None
        return Refusal(
            "image_preload.parallel_pull",
            f"{self.alias} predates v{dotted(FAST_IMAGE_PULL_SINCE)}, from which the AL2023 AMI keeps "
            "SOCI's store on the NVMe array (earlier releases lack FastImagePull or unpack every image onto the "
            "root EBS volume)",
            f"pin compute.ami_alias to al2023@v{dotted(FAST_IMAGE_PULL_SINCE)} or later, or remove parallel_pull",
            (setting("compute.ami_alias", DEFAULT_AMI_ALIAS), removing("image_preload.parallel_pull")),
        )

    def snapshot_obstacle(self) -> SnapshotObstacle | None:
        return SnapshotObstacle(
            "on AL2023",
            "containerd's store is on the root volume or the NVMe array, which a snapshot cannot fill",
            "a Bottlerocket ami_alias allows image_preload.mode: snapshot",
        )

    def karpenter_storage(
        self, compute: KarpenterCompute, preload: ImagePreload, snapshot_id: str | None
    ) -> dict[str, Any]:
        gp3 = {"volumeType": "gp3", "encrypted": True, "deleteOnTermination": True}
        return {
            # Without it Karpenter ignores the instance store and the array would not exist.
            "instanceStorePolicy": "RAID0",
            "blockDeviceMappings": [
                {
                    "deviceName": "/dev/xvda",
                    "rootVolume": True,
                    "ebs": {"volumeSize": f"{compute.root_volume_gib}Gi", **gp3},
                }
            ],
            **({"userData": FAST_IMAGE_PULL_NODE_CONFIG} if preload.parallel_pull else {}),
        }
