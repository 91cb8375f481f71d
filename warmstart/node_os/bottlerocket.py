"""Bottlerocket (Karpenter's `bottlerocket@v<x.y.z>` alias, the NVIDIA variant on GPU instances)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from warmstart.checks.fix import removing, setting
from warmstart.node_os.base import NodeOs, SnapshotObstacle, dotted, release
from warmstart.refusal import Refusal

if TYPE_CHECKING:
    from warmstart.config import ImagePreload, KarpenterCompute

# `apiclient ephemeral-storage init` mounts /dev/md/ephemeral here (bottlerocket-core-kit, ephemeral_storage.rs).
NVME_MOUNT = "/mnt/.ephemeral"
# `settings.bootstrap-commands` and `apiclient ephemeral-storage` (bottlerocket-core-kit v2.4.0, first in
# Bottlerocket v1.22.0).
BOOTSTRAP_COMMANDS_SINCE = (1, 22, 0)
# The OS volume, as Karpenter's Bottlerocket defaults size it (v1.14.1 amifamily/bottlerocket.go); listing any
# mapping replaces all of Karpenter's defaults, so both volumes are listed.
OS_VOLUME = {
    "deviceName": "/dev/xvda",
    "ebs": {"volumeSize": "4Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True},
}
DATA_DEVICE = "/dev/xvdb"
# SOCI parallel pull and unpack: Bottlerocket's soci-snapshotter since v1.44.0 (all aws-k8s variants, nvidia too);
# its store /var/lib/soci-snapshotter is among the directories `apiclient ephemeral-storage bind` binds by default
# (bottlerocket-core-kit v10.3.0), which Karpenter's RAID0 setup runs from Bottlerocket v1.46.0 (Karpenter v1.8.0,
# pkg/providers/version SupportsDefaultBind); before it Karpenter bound only containerd, kubelet and pod logs.
SOCI_ON_ARRAY_SINCE = (1, 46, 0)
# The settings of aws-samples/karpenter-blueprints' Bottlerocket SOCI blueprint, whose pull time the estimate uses
# (Bottlerocket's own defaults are 3 downloads and 1 unpack per image); Karpenter merges them with its own.
SOCI_PARALLEL_PULL = """[settings.container-runtime]
snapshotter = "soci"

[settings.container-runtime-plugins.soci-snapshotter]
pull-mode = "parallel-pull-unpack"

[settings.container-runtime-plugins.soci-snapshotter.parallel-pull-unpack]
max-concurrent-downloads-per-image = 20
concurrent-download-chunk-size = "16mb"
max-concurrent-unpacks-per-image = 12
discard-unpacked-layers = true
"""
# Snapshot mode: the NVMe array set up as Karpenter's RAID0 does it, but binding only the kubelet's folder and
# the pod logs onto it, so /var/lib/containerd stays on the data volume made from the image snapshot
# (`apiclient ephemeral-storage bind` mounts over a folder without copying it).
SNAPSHOT_MODE_BOOTSTRAP = """[settings.bootstrap-commands.000-warmstart-instance-storage]
commands = [
  ["apiclient", "ephemeral-storage", "init"],
  ["apiclient", "ephemeral-storage", "bind", "--dirs", "/var/lib/kubelet", "/var/log/pods"],
]
essential = true
mode = "always"
"""


def builder_ami_parameter(alias: str, kubernetes_version: str) -> str:
    """Public SSM parameter of the Bottlerocket AMI an image-snapshot builder runs: the release of the alias (so the
    same containerd and snapshotter write the store), the standard variant (no GPU needed to pull)."""
    return f"/aws/service/bottlerocket/aws-k8s-{kubernetes_version}/x86_64/{dotted(release(alias))}/image_id"


class Bottlerocket(NodeOs):
    name = "bottlerocket"
    alias_example = "bottlerocket@v<x.y.z>"
    nvme_mount = NVME_MOUNT
    # aws-samples/karpenter-blueprints, blueprints/soci-snapshotter (2026-06-08), with the settings of
    # SOCI_PARALLEL_PULL below: the 9,354,342,327-byte vLLM 0.22.0 DLC pulled in 23.229 s: 403 MB/s.
    parallel_pull_mb_per_s = 403

    def parallel_pull_refusal(self, preload: ImagePreload) -> Refusal | None:
        if preload.strategy.boots_with_images or self.release >= SOCI_ON_ARRAY_SINCE:
            return None  # the snapshot's own rule says why parallel pull has no use there
        since = f"bottlerocket@v{dotted(SOCI_ON_ARRAY_SINCE)}"
        return Refusal(
            "image_preload.parallel_pull",
            f"{self.alias} predates v{dotted(SOCI_ON_ARRAY_SINCE)}, from which Karpenter's RAID0 setup binds "
            "Bottlerocket's SOCI store (/var/lib/soci-snapshotter) onto the NVMe array; before it, every image "
            "would be unpacked onto the EBS data volume",
            f"pin compute.ami_alias to {since} or later, or remove parallel_pull",
            (setting("compute.ami_alias", since), removing("image_preload.parallel_pull")),
        )

    def snapshot_obstacle(self) -> SnapshotObstacle | None:
        return None

    def snapshot_builder_ami_parameter(self, kubernetes_version: str) -> str:
        assert self.alias is not None
        return builder_ami_parameter(self.alias, kubernetes_version)

    @classmethod
    def snapshot_alias(cls) -> str | None:
        return f"bottlerocket@v{dotted(BOOTSTRAP_COMMANDS_SINCE)}"

    def snapshot_release_refusal(self) -> Refusal | None:
        if self.release >= BOOTSTRAP_COMMANDS_SINCE:
            return None
        return Refusal(
            "compute.ami_alias",
            f"{self.alias} predates Bottlerocket's bootstrap commands (v{dotted(BOOTSTRAP_COMMANDS_SINCE)}), "
            "which set up the NVMe array without moving the image store",
            f"pin bottlerocket@v{dotted(BOOTSTRAP_COMMANDS_SINCE)} or later",
            (setting("compute.ami_alias", f"bottlerocket@v{dotted(BOOTSTRAP_COMMANDS_SINCE)}"),),
        )

    def karpenter_storage(
        self, compute: KarpenterCompute, preload: ImagePreload, snapshot_id: str | None
    ) -> dict[str, Any]:
        if not preload.strategy.boots_with_images:
            gp3 = {"volumeType": "gp3", "encrypted": True, "deleteOnTermination": True}
            return {
                "instanceStorePolicy": "RAID0",
                "blockDeviceMappings": [
                    OS_VOLUME,
                    {"deviceName": DATA_DEVICE, "ebs": {"volumeSize": f"{compute.root_volume_gib}Gi", **gp3}},
                ],
                **({"userData": SOCI_PARALLEL_PULL} if preload.parallel_pull else {}),
            }
        if snapshot_id is None:
            raise ValueError("image_preload.mode snapshot needs the data volume's snapshot ID")
        return {
            "blockDeviceMappings": [
                OS_VOLUME,
                {"deviceName": DATA_DEVICE, "ebs": snapshot_volume(preload, snapshot_id)},
            ],
            "userData": SNAPSHOT_MODE_BOOTSTRAP,
        }


def snapshot_volume(preload: ImagePreload, snapshot_id: str) -> dict[str, Any]:
    """The data volume made from the image snapshot."""
    volume = preload.snapshot
    return {
        "snapshotID": snapshot_id,
        # Set explicitly: Karpenter sizes the node's ephemeral storage from it (else Bottlerocket's 20Gi default).
        "volumeSize": f"{volume.data_volume_gib}Gi",
        "volumeType": "gp3",
        "iops": volume.data_volume_iops,
        "throughput": volume.data_volume_throughput_mibps,
        # Encryption comes from the snapshot: a volume made from an encrypted snapshot is encrypted (EC2 user
        # guide, "Amazon EBS encryption"), and the builder encrypts its data volume.
        "deleteOnTermination": True,
        **(
            {"volumeInitializationRate": volume.volume_initialization_rate_mibps}
            if volume.volume_initialization_rate_mibps
            else {}
        ),
    }
