"""Bottlerocket (Karpenter's `bottlerocket@v<x.y.z>` alias, the NVIDIA variant on GPU instances)."""

from __future__ import annotations

from typing import Any

from warmstart.checks.fix import setting
from warmstart.node_os.base import NodeOs, PoolDisk, Preload, SnapshotObstacle, dotted, newer_than_known, release
from warmstart.problem import Problem

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
# The first Bottlerocket release with aws-k8s-<version> variants (the -nvidia ones came in the same release each
# time), read 2026-12-05: 1.34 in v1.47.0 (2025-09-15, bottlerocket PR #4631, CHANGELOG "Add support for
# kubernetes-1.34 variants"), 1.35 in v1.53.0 (PR #4735, "Add new kubernetes 1.35 variants"), 1.36 in v1.61.0
# (2026-05-18, PR #4827, "Add new Kubernetes 1.36 variants"); bottlerocket-project-website data/variants/ agrees for
# 1.34 and 1.35 (its data ends at 1.57.x). Karpenter resolves the alias to /aws/service/bottlerocket/aws-k8s-
# <version>[-nvidia]/<arch>/<release without v>/image_id, which does not exist for an older release. A Kubernetes
# version missing here is newer than the table: a note (release_note), not a refusal.
FIRST_RELEASE_FOR_KUBERNETES = {"1.34": (1, 47, 0), "1.35": (1, 53, 0), "1.36": (1, 61, 0)}
# The newest Bottlerocket release seen (GitHub releases and bottlerocket.dev, read 2026-12-05): a newer one is taken
# with a note, and make deploy's preflight checks its AMI exists.
NEWEST_KNOWN_RELEASE = (1, 68, 1)


# The settings of aws-samples/karpenter-blueprints' Bottlerocket SOCI blueprint, which the AI-on-EKS workshop
# measured on a GPU node (Bottlerocket's own defaults are 3 downloads and 1 unpack per image); Karpenter merges them
# with its own settings.
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
    # The AI-on-EKS startup workshop (arm C: g6.4xlarge, Bottlerocket 1.64.0, RAID0, the settings of
    # SOCI_PARALLEL_PULL below): the 9.35 GB vLLM 0.22.0 DLC in 62 s, 151 MB/s. (aws-samples/karpenter-blueprints
    # measured 403 MB/s with the same settings on c/m/r instances: a validation figure that disagrees.)
    parallel_pull_mb_per_s = 151

    def parallel_pull_refusal(self, preload: Preload) -> Problem | None:
        # Every release with an image for a supported Kubernetes version binds SOCI's store onto the array
        # (FIRST_RELEASE_FOR_KUBERNETES >= SOCI_ON_ARRAY_SINCE, checked by tests); older ones are refused there.
        return None

    def snapshot_obstacle(self) -> SnapshotObstacle | None:
        return None

    @classmethod
    def alias_for_kubernetes(cls, alias: str, kubernetes_version: str) -> str:
        """The alias raised to the first release that ships the cluster's Kubernetes version (a version newer than
        the table: the alias as it is); written x.y.z (Karpenter's default-bind check needs the three parts)."""
        floor = FIRST_RELEASE_FOR_KUBERNETES.get(kubernetes_version, ())
        wanted = max(release(alias), floor)
        return f"bottlerocket@v{dotted(wanted + (0,) * (3 - len(wanted)))}"

    def image_refusal(self, kubernetes_version: str, preload: Preload) -> Problem | None:
        assert self.alias is not None
        pinned = self.alias_for_kubernetes(self.alias, kubernetes_version)
        if len(self.release) != 3:
            return Problem(
                "compute.ami_alias",
                f"{self.alias} names no release: Bottlerocket's are x.y.z (and Karpenter binds SOCI's store onto "
                "the array only for a full version)",
                f"pin {pinned}",
                (setting("compute.ami_alias", pinned),),
            )
        if self.release < FIRST_RELEASE_FOR_KUBERNETES.get(kubernetes_version, ()):
            return Problem(
                "compute.ami_alias",
                f"{self.alias} predates Bottlerocket's first aws-k8s-{kubernetes_version} variant: Karpenter would "
                "find no AMI for it and launch no GPU node",
                f"pin {pinned} or later",
                (setting("compute.ami_alias", pinned),),
            )
        return None

    def release_note(self, kubernetes_version: str) -> str | None:
        if kubernetes_version not in FIRST_RELEASE_FOR_KUBERNETES:
            return (
                f"no Bottlerocket release in warmstart's table ships aws-k8s-{kubernetes_version} (it knows "
                f"{', '.join(FIRST_RELEASE_FOR_KUBERNETES)}, read 2026-12-05): make deploy's preflight checks that "
                f"Karpenter finds {self.alias}'s GPU AMI"
            )
        if self.release > NEWEST_KNOWN_RELEASE:
            newest = f"v{dotted(NEWEST_KNOWN_RELEASE)}"
            return newer_than_known(self.alias or "", "Bottlerocket", newest, "GitHub releases, read 2026-12-05")
        return None

    def gpu_ami_parameter(self, kubernetes_version: str, architecture: str) -> str:
        assert self.alias is not None
        version = self.alias.split("@", 1)[1].lstrip("v")  # Karpenter trims the v (amifamily/bottlerocket.go)
        return f"/aws/service/bottlerocket/aws-k8s-{kubernetes_version}-nvidia/{architecture}/{version}/image_id"

    def snapshot_builder_ami_parameter(self, kubernetes_version: str) -> str:
        assert self.alias is not None
        return builder_ami_parameter(self.alias, kubernetes_version)

    @classmethod
    def snapshot_alias(cls) -> str | None:
        return f"bottlerocket@v{dotted(BOOTSTRAP_COMMANDS_SINCE)}"

    def karpenter_storage(self, compute: PoolDisk, preload: Preload, snapshot_id: str | None) -> dict[str, Any]:
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


def snapshot_volume(preload: Preload, snapshot_id: str) -> dict[str, Any]:
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
