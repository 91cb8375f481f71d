"""GPU node provisioning objects: a NodePool plus its node class, for EKS Auto Mode or Karpenter.

Both modes run Karpenter's `karpenter.sh/v1` NodePool; they differ in the node class (Auto Mode's
`eks.amazonaws.com/v1 NodeClass` or Karpenter's `karpenter.k8s.aws/v1 EC2NodeClass`) and in how the
instance-store NVMe becomes a RAID0 array (Auto Mode: when ephemeralStorage.size is below the NVMe; Karpenter:
instanceStorePolicy RAID0, or warmstart's own bootstrap command on Bottlerocket in image-snapshot mode).
"""

from __future__ import annotations

from typing import Any

import cdk8s
from constructs import Construct

from warmstart.config import AutoModeCompute, GpuPool, ImagePreload, KarpenterCompute
from warmstart.sizing import ami_family
from warmstart.workload import gpu_pool_selector

GPU_NODE_CLASS = "gpu"  # Auto Mode forbids a custom node class named "default"
GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}


def gpu_node_pool_name(mode: str) -> str:
    """One NodePool name per compute mode. Karpenter's NodePool CRD makes `nodeClassRef.group` and `kind`
    immutable (v1.14.1, CEL `self.group == oldSelf.group`), and the two modes' node classes differ in both: under one
    name, switching an environment's mode is an update the API server refuses. Under two names the switch creates
    the new pool and deletes the old one (its nodes drain as Karpenter deletes them), and pods, which select the
    pool's template label (warmstart.workload.GPU_POOL_LABEL), land on either pool's nodes meanwhile."""
    return f"gpu-{mode}"


def gpu_node_pool_spec(pool: GpuPool, node_class_ref: dict[str, str]) -> dict[str, Any]:
    return {
        "template": {
            "metadata": {"labels": gpu_pool_selector()},
            "spec": {
                "nodeClassRef": node_class_ref,
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(pool.instance_types)},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(pool.capacity_types)},
                ],
                "taints": [dict(GPU_TAINT)],
                # Expiry is forceful (no replacement is started first; budgets do not hold it back, PDBs do):
                # replicas run on separate nodes so one expiring node takes one replica. The grace period
                # bounds how long PDBs may hold a node back (Karpenter v1.14 docs, concepts/disruption).
                "expireAfter": pool.expire_after,
                "terminationGracePeriod": pool.termination_grace_period,
            },
        },
        # Only empty nodes go: consolidating busy GPU nodes would evict serving pods and throw away
        # warm node-local caches. Voluntary replacements (drift to a new AMI, emptiness) one node at a time;
        # drift starts the replacement node first.
        "disruption": {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": pool.consolidate_after,
            "budgets": [{"nodes": "1"}],
        },
        "limits": {"nvidia.com/gpu": pool.gpu_limit},
    }


class AutoModeGpuNodes(cdk8s.Chart):
    """Auto Mode NodeClass whose ephemeralStorage stays below the NVMe, so /mnt/.ephemeral is RAID0 NVMe."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        compute: AutoModeCompute,
        node_role_name: str,
        subnet_ids: list[str],
        security_group_ids: list[str],
        tags: dict[str, str],
    ) -> None:
        super().__init__(scope, id)
        self.node_class = _node_class(
            self,
            "eks.amazonaws.com/v1",
            "NodeClass",
            {
                **_placement(node_role_name, subnet_ids, security_group_ids),
                "ephemeralStorage": {
                    "size": f"{compute.ephemeral_storage_gib}Gi",
                    "iops": compute.ephemeral_storage_iops,
                    "throughput": compute.ephemeral_storage_throughput_mibps,
                },
                # Pods no NetworkPolicy selects stay open; the vLLM pods' policies admit their clients only.
                "networkPolicy": "DefaultAllow",
                "networkPolicyEventLogs": "Disabled",
                "tags": dict(tags),
            },
        )
        self.node_pool = _node_pool(self, compute.gpu_pool, self.node_class, mode=compute.mode)


class KarpenterGpuNodes(cdk8s.Chart):
    """EC2NodeClass whose instance-store NVMe is one RAID0 array, mounted where `sizing.nvme_mount` says."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        compute: KarpenterCompute,
        image_preload: ImagePreload,
        node_role_name: str,
        subnet_ids: list[str],
        security_group_ids: list[str],
        tags: dict[str, str],
        data_volume_snapshot_id: str | None = None,
    ) -> None:
        super().__init__(scope, id)
        self.node_class = _node_class(
            self,
            "karpenter.k8s.aws/v1",
            "EC2NodeClass",
            {
                **_placement(node_role_name, subnet_ids, security_group_ids),
                "amiSelectorTerms": [{"alias": compute.ami_alias}],
                **karpenter_storage(compute, image_preload, data_volume_snapshot_id),
                # IMDSv2 only, one hop: pods get AWS credentials from Pod Identity, never the node role.
                "metadataOptions": {
                    "httpEndpoint": "enabled",
                    "httpProtocolIPv6": "disabled",
                    "httpPutResponseHopLimit": 1,
                    "httpTokens": "required",
                },
                "tags": dict(tags),
                **_reservations(compute.gpu_pool),
            },
        )
        self.node_pool = _node_pool(self, compute.gpu_pool, self.node_class, mode=compute.mode)


# Bottlerocket's OS volume, as Karpenter's Bottlerocket defaults size it (v1.14.1 amifamily/bottlerocket.go);
# listing any mapping replaces all of Karpenter's defaults, so both volumes are listed.
BOTTLEROCKET_OS_VOLUME = {
    "deviceName": "/dev/xvda",
    "ebs": {"volumeSize": "4Gi", "volumeType": "gp3", "encrypted": True, "deleteOnTermination": True},
}
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
# AL2023: SOCI parallel pull and unpack (nodeadm NodeConfig feature gate; Karpenter merges this NodeConfig with
# its own, amazon-eks-ami v20250821+).
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


def karpenter_storage(compute: KarpenterCompute, preload: ImagePreload, snapshot_id: str | None) -> dict[str, Any]:
    """Volumes, instance-store policy and user data of the GPU EC2NodeClass, per node OS and image_preload."""
    gp3 = {"volumeType": "gp3", "encrypted": True, "deleteOnTermination": True}
    if ami_family(compute) == "al2023":
        return {
            # Without it Karpenter ignores the instance store and /mnt/k8s-disks/0 would not exist.
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
    if preload.mode != "snapshot":
        return {
            "instanceStorePolicy": "RAID0",
            "blockDeviceMappings": [
                BOTTLEROCKET_OS_VOLUME,
                {"deviceName": "/dev/xvdb", "ebs": {"volumeSize": f"{compute.root_volume_gib}Gi", **gp3}},
            ],
        }
    if snapshot_id is None:
        raise ValueError("image_preload.mode snapshot needs the data volume's snapshot ID")
    volume = preload.snapshot
    data = {
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
    return {
        "blockDeviceMappings": [BOTTLEROCKET_OS_VOLUME, {"deviceName": "/dev/xvdb", "ebs": data}],
        "userData": SNAPSHOT_MODE_BOOTSTRAP,
    }


def _reservations(pool: GpuPool) -> dict[str, Any]:
    """Karpenter launches `reserved` capacity only from the reservations these terms select."""
    if not pool.capacity_reservations:
        return {}
    terms: list[dict[str, Any]] = []
    for term in pool.capacity_reservations:
        if term.id:
            terms.append({"id": term.id})
        else:
            terms.append({"tags": dict(term.tags or {}), **({"ownerID": term.owner_id} if term.owner_id else {})})
    return {"capacityReservationSelectorTerms": terms}


def _placement(node_role_name: str, subnet_ids: list[str], security_group_ids: list[str]) -> dict[str, Any]:
    """Node role and network placement, by ID: both node class kinds take the same three fields."""
    return {
        "role": node_role_name,
        "subnetSelectorTerms": [{"id": subnet} for subnet in subnet_ids],
        "securityGroupSelectorTerms": [{"id": group} for group in security_group_ids],
    }


def _node_class(chart: cdk8s.Chart, api_version: str, kind: str, spec: dict[str, Any]) -> cdk8s.ApiObject:
    node_class = cdk8s.ApiObject(
        chart, kind, api_version=api_version, kind=kind, metadata=cdk8s.ApiObjectMetadata(name=GPU_NODE_CLASS)
    )
    node_class.add_json_patch(cdk8s.JsonPatch.add("/spec", spec))
    return node_class


def _node_pool(chart: cdk8s.Chart, pool: GpuPool, node_class: cdk8s.ApiObject, *, mode: str) -> cdk8s.ApiObject:
    node_pool = cdk8s.ApiObject(
        chart,
        "NodePool",
        api_version="karpenter.sh/v1",
        kind="NodePool",
        metadata=cdk8s.ApiObjectMetadata(name=gpu_node_pool_name(mode)),
    )
    node_class_ref = {"group": node_class.api_group, "kind": node_class.kind, "name": node_class.name}
    node_pool.add_json_patch(cdk8s.JsonPatch.add("/spec", gpu_node_pool_spec(pool, node_class_ref)))
    return node_pool
