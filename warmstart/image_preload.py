"""How serving images reach GPU nodes: pure facts and derived values for image_preload (no AWS or CDK imports).

What each compute mode and node OS allows (each OS's answers live in warmstart/node_os/; sources in
docs/upstream-facts.md, "Container images on new nodes"):
- EKS Auto Mode: the NodeClass has no AMI, user data or block device mapping field (EKS user guide, "Create a
  Node Class"), so nodes cannot start from an image snapshot: prepull only; Auto Mode itself pulls with SOCI
  parallel pull on G, P and Trn instances with local NVMe (release notes, 2025-11-19), with no setting.
- Karpenter + Bottlerocket: containerd keeps its store on the data volume (/dev/xvdb, mounted at /local;
  /var/lib/containerd is /local/var/lib/containerd), so a data volume made from a snapshot that holds pulled
  images boots with them (the aws-samples/bottlerocket-images-cache approach). Karpenter's
  instanceStorePolicy RAID0 would bind /var/lib/containerd onto the NVMe array without copying
  (karpenter-provider-aws v1.14.1 bootstrap/bottlerocket.go; apiclient ephemeral-storage bind), hiding
  them: snapshot mode therefore sets up the array itself and binds only the kubelet's folder and pod logs.
- Karpenter + AL2023: containerd's store is on the root volume (moved onto the NVMe array by nodeadm's
  RAID0), which a data-volume snapshot cannot fill; the AMI's SOCI snapshotter offers parallel pull and
  unpack (NodeConfig featureGates.FastImagePull; with the NVMe array from amazon-eks-ami v20251217).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex

from warmstart.config.base import GIB
from warmstart.config.compute import KarpenterCompute
from warmstart.config.environment import EnvironmentConfig
from warmstart.node_caches import serving_images
from warmstart.node_os import release
from warmstart.workload import images_gb

# kubelet image garbage collection (KubeletConfiguration defaults, Kubernetes 1.35): above 85% use of the
# image filesystem it deletes unused images until 80% is reached. A pre-loaded image no pod runs yet is unused,
# so the images must stay below the low threshold or the kubelet deletes what the snapshot brought.
KUBELET_IMAGE_GC_LOW_PERCENT = 80
# Beside the images the data volume holds the containers' writable layers, Bottlerocket's host containers
# and state (/local).
DATA_VOLUME_RESERVE_GB = 10
# Private ECR: the builder would need a registry token passed through SSM command parameters (kept in the
# command history); refused rather than done that way.
PRIVATE_ECR = re.compile(r"^\d{12}\.dkr\.ecr(-fips)?\.[a-z0-9-]+\.amazonaws\.com(\.cn)?/")
# Bumped whenever the builder's commands change, so the next deploy builds a fresh snapshot.
BUILDER_REVISION = "1"
BUILD_PLATFORM = "linux/amd64"  # every GPU instance type in the catalog is x86_64


def is_private_ecr(image: str) -> bool:
    return bool(PRIVATE_ECR.match(image))


def snapshot_images(config: EnvironmentConfig) -> list[str]:
    """What the snapshot holds: every serving image, and the prepull DaemonSets' holder image."""
    return sorted({*serving_images(config), config.caches.pause_image})


def data_volume_need_gb(config: EnvironmentConfig) -> float:
    """Data volume size (GB) that keeps the images below the kubelet's image GC low threshold."""
    used = images_gb(config) + DATA_VOLUME_RESERVE_GB
    return round(used * 100 / KUBELET_IMAGE_GC_LOW_PERCENT, 1)


def data_volume_gb(config: EnvironmentConfig) -> float:
    return round(config.image_preload.snapshot.data_volume_gib * GIB / 10**9, 1)


def image_set_key(config: EnvironmentConfig) -> str:
    """Identifies one snapshot build: a new key means a new snapshot (and, through node class drift, new nodes).
    Everything that changes the volume's content or size is in it; nothing else is."""
    compute = config.compute
    assert isinstance(compute, KarpenterCompute)
    factors = {
        "images": snapshot_images(config),
        compute.node_os.name: release(compute.ami_alias),  # the builder runs the nodes' release
        "kubernetes": config.cluster.kubernetes_version,
        "data_volume_gib": config.image_preload.snapshot.data_volume_gib,
        "platform": BUILD_PLATFORM,
        "builder": BUILDER_REVISION,
    }
    return hashlib.sha256(json.dumps(factors, sort_keys=True).encode()).hexdigest()[:20]


def snapshot_parameter_name(environment: str) -> str:
    """Where the current snapshot ID is recorded (for people and tools; the stack passes it by reference)."""
    return f"/warmstart/{environment}/image-snapshot-id"


def image_route(config: EnvironmentConfig) -> str:
    """How a model's image reaches a new GPU node, in words (warmstart plan)."""
    return config.image_preload.strategy.route(config)


def volume_initialization_seconds(config: EnvironmentConfig) -> int | None:
    """Time until a new node's data volume is fully local at the configured initialization rate."""
    rate = config.image_preload.snapshot.volume_initialization_rate_mibps
    if not config.image_preload.strategy.boots_with_images or not rate:
        return None
    return round(config.image_preload.snapshot.data_volume_gib * 1024 / rate)


def fully_qualified(image: str) -> str:
    """The reference as containerd stores it (and as `ctr` needs it): registry host and, on Docker Hub, the
    library/ namespace made explicit, exactly as the CRI plugin normalizes what the kubelet asks for
    (distribution/reference ParseNormalizedNamed): vllm/vllm-openai:v1 -> docker.io/vllm/vllm-openai:v1."""
    first, _, rest = image.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return image
    if not rest:
        return f"docker.io/library/{image}"
    return f"docker.io/{image}"


def builder_commands(images: list[str], script: str) -> list[str]:
    """The SSM AWS-RunShellScript `commands` of one build: the image list as the script's arguments, then the
    script (repository file image_preload/runtime/snapshot/pull-images.sh) line by line."""
    arguments = " ".join(shlex.quote(fully_qualified(image)) for image in images)
    return [f"set -- {arguments}", *script.splitlines()]
