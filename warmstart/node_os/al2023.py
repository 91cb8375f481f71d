"""Amazon Linux 2023, the EKS-optimized AMI (Karpenter's `al2023@v<release>` alias)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from warmstart.checks.fix import removing, setting
from warmstart.node_os.base import NodeOs, PoolDisk, Preload, SnapshotObstacle, dotted, newer_than_known
from warmstart.problem import Problem

# nodeadm's RAID0 (Karpenter instanceStorePolicy RAID0 -> nodeadm localStorage RAID0): amazon-eks-ami
# templates/al2023/runtime/bin/setup-local-disks mounts the array here.
NVME_MOUNT = "/mnt/k8s-disks/0"
# Karpenter's default GPU pool OS: a pinned EKS-optimized AMI release ("latest" would roll nodes on every release),
# the newest whose changelog lists an x86_64 NVIDIA AMI for every supported Kubernetes minor (al2023_releases.json).
DEFAULT_AMI_ALIAS = "al2023@v20260714"
# The EKS-optimized AL2023 AMI releases and the Kubernetes minors each has a GPU image of, recorded from
# awslabs/amazon-eks-ami's tags and CHANGELOG.md by tests/upstream/record_al2023.py.
RELEASES_TABLE = Path(__file__).resolve().with_name("al2023_releases.json")
# EKS names AL2023 releases v<YYYYMMDD>, and Karpenter puts the alias's version into the AMI's SSM parameter as
# written (it strips a leading v for Bottlerocket only): aws/karpenter-provider-aws v1.14.1
# pkg/providers/amifamily/al2023.go, bottlerocket.go.
RELEASE_FORM = re.compile(r"^v\d{8}$")
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


@cache
def release_table() -> dict[str, Any]:
    return json.loads(RELEASES_TABLE.read_text())


def ships(release: str, minor: str) -> bool | None:
    """Whether an AL2023 release has a GPU AMI for a Kubernetes minor: True, False, or None (not known). A release
    whose changelog section is not recorded yet takes it from its neighbours: it has a minor both recorded
    neighbours have (or the earlier one, when it is the newest), and lacks one both lack."""
    releases: dict[str, list[str] | None] = release_table()["releases"]
    listed = releases.get(release)
    if listed is not None:
        return minor in listed
    known = [(name, minors) for name, minors in releases.items() if minors is not None]
    before = [minors for name, minors in known if name < release][-1:]
    after = [minors for name, minors in known if name > release][:1]
    sides = [minor in minors for minors in before + after]
    if sides and all(sides) and before:
        return True
    if sides and not any(sides) and after:
        return False
    return None


def first_shipping(minor: str) -> str | None:
    """The first release recorded as having a GPU AMI of the minor."""
    return next((name for name, minors in release_table()["releases"].items() if minors and minor in minors), None)


def newest_shipping(minor: str) -> str | None:
    found = [name for name in release_table()["releases"] if ships(name, minor)]
    return found[-1] if found else None


class Al2023(NodeOs):
    name = "al2023"
    # aws-samples/karpenter-blueprints, blueprints/soci-snapshotter (2026-06-08): the 9,354,342,327-byte vLLM 0.22.0
    # DLC pulled in 39.553 s with FastImagePull on AL2023: 236 MB/s (on c/m/r instances: no GPU-node figure for
    # AL2023 is published).
    parallel_pull_mb_per_s = 236
    alias_example = "al2023@v<release>"
    nvme_mount = NVME_MOUNT
    parallel_pull_min_node = (FAST_IMAGE_PULL_MIN_VCPUS, FAST_IMAGE_PULL_MIN_MEMORY_GIB)

    def parallel_pull_refusal(self, preload: Preload) -> Problem | None:
        if self.release >= FAST_IMAGE_PULL_SINCE:
            return None
        return Problem(
            "image_preload.parallel_pull",
            f"{self.alias} predates v{dotted(FAST_IMAGE_PULL_SINCE)}, from which the AL2023 AMI keeps "
            "SOCI's store on the NVMe array (earlier releases lack FastImagePull or unpack every image onto the "
            "root EBS volume)",
            f"pin compute.ami_alias to al2023@v{dotted(FAST_IMAGE_PULL_SINCE)} or later, or remove parallel_pull",
            (setting("compute.ami_alias", DEFAULT_AMI_ALIAS), removing("image_preload.parallel_pull")),
        )

    @property
    def version(self) -> str:
        assert self.alias is not None
        return self.alias.split("@", 1)[1]

    def image_refusal(self, kubernetes_version: str, preload: Preload) -> Problem | None:
        version = self.version
        fallback = DEFAULT_AMI_ALIAS if ships(DEFAULT_AMI_ALIAS.split("@")[1], kubernetes_version) else None
        fallback = fallback or (f"al2023@{newest}" if (newest := newest_shipping(kubernetes_version)) else None)
        instead = (setting("compute.ami_alias", fallback),) if fallback else ()
        if not RELEASE_FORM.match(version):
            written = f"al2023@v{version}" if re.fullmatch(r"\d{8}", version) else fallback
            return Problem(
                "compute.ami_alias",
                f"{self.alias} is not an AL2023 release: EKS names them v<YYYYMMDD>, and Karpenter looks the AMI up "
                f"by the version as written (.../amazon-eks-node-al2023-x86_64-nvidia-{kubernetes_version}-"
                f"{version}/image_id), so it finds none and launches no GPU node",
                f"pin {written}" if written else "pin an AL2023 release such as al2023@v<YYYYMMDD>",
                (setting("compute.ami_alias", written),) if written else (),
            )
        releases = release_table()["releases"]
        newest_known = max(releases)
        if version not in releases and version < newest_known:
            near = [
                *[r for r in sorted(releases) if r < version][-1:],
                *[r for r in sorted(releases) if r > version][:1],
            ]
            return Problem(
                "compute.ami_alias",
                f"there is no AL2023 release {version} (the releases around it are {' and '.join(near)}; "
                f"{release_table()['source']}): Karpenter would find no AMI and launch no GPU node",
                f"pin a release that exists, such as {fallback}" if fallback else "pin a release that exists",
                instead,
            )
        if ships(version, kubernetes_version) is False:
            first = first_shipping(kubernetes_version)
            return Problem(
                "compute.ami_alias",
                f"AL2023 release {version} has no GPU AMI for Kubernetes {kubernetes_version}"
                + (f" (the first release with one is {first})" if first else "")
                + ": Karpenter would find no AMI and launch no GPU node",
                f"pin {fallback} or another release from {first} on" if fallback and first else "pin another release",
                instead,
            )
        return None

    def release_note(self, kubernetes_version: str) -> str | None:
        version = self.version
        releases = release_table()["releases"]
        if not RELEASE_FORM.match(version):
            return None  # refused
        if version > max(releases):
            table = release_table()
            return newer_than_known(
                self.alias or "", "AL2023", max(releases), f"{table['source']}, {table['recorded']}"
            )
        if releases.get(version) is None:  # a tag whose changelog section was not there when the table was recorded
            inferred = ships(version, kubernetes_version)
            said: dict[bool | None, str] = {
                True: "taken as shipping it, as its neighbours do",
                False: "taken as lacking it, as its neighbours do",
            }
            return (
                f"whether AL2023 release {version} has a GPU AMI for Kubernetes {kubernetes_version} is not recorded "
                f"(no changelog section; {said.get(inferred, 'its neighbours disagree')}; the first release known to "
                f"have one is {first_shipping(kubernetes_version)}): make deploy's preflight checks that Karpenter "
                "finds it"
            )
        return None

    def gpu_ami_parameter(self, kubernetes_version: str, architecture: str) -> str:
        name = f"amazon-eks-node-al2023-{architecture}-nvidia-{kubernetes_version}-{self.version}"
        folder = f"/aws/service/eks/optimized-ami/{kubernetes_version}/amazon-linux-2023/{architecture}/nvidia"
        return f"{folder}/{name}/image_id"

    def snapshot_obstacle(self) -> SnapshotObstacle | None:
        return SnapshotObstacle(
            "on AL2023",
            "containerd's store is on the root volume or the NVMe array, which a snapshot cannot fill",
            "a Bottlerocket ami_alias allows image_preload.mode: snapshot",
        )

    def karpenter_storage(self, compute: PoolDisk, preload: Preload, snapshot_id: str | None) -> dict[str, Any]:
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
