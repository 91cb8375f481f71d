"""GPU node provisioning objects: a NodePool plus its node class, for EKS Auto Mode or Karpenter.

Both modes run Karpenter's `karpenter.sh/v1` NodePool; they differ in the node class (Auto Mode's
`eks.amazonaws.com/v1 NodeClass` or Karpenter's `karpenter.k8s.aws/v1 EC2NodeClass`) and in how the
instance-store NVMe becomes a RAID0 array (Auto Mode: when ephemeralStorage.size is below the NVMe; Karpenter:
instanceStorePolicy RAID0, or warmstart's own bootstrap command on Bottlerocket in image-snapshot mode).
"""

from __future__ import annotations

from typing import Any

import cdk8s
from cdk8s_plus_33 import k8s
from constructs import Construct

from contracts.gpu_pool import gpu_node_class_name, gpu_node_pool_name
from contracts.pod_labels import GPU_POOL_LABEL, POOL_TAINTS, gpu_pool_selector, pool_tolerations
from warmstart.config.caches import ImagePreload
from warmstart.config.compute import AutoModeCompute, GpuPool, KarpenterCompute


def pool_k8s_tolerations() -> list[k8s.Toleration]:
    """The pool's tolerations (contracts.pod_labels.pool_tolerations) for a chart's pod spec."""
    return [k8s.Toleration(key=t["key"], operator=t["operator"], effect=t["effect"]) for t in pool_tolerations()]


def device_plugin_placement() -> dict[str, Any]:
    """Where the NVIDIA device plugin warmstart installs runs: on every node of warmstart's pool (its label, and the
    GPU-manufacturer label Karpenter sets: the chart's default affinity needs Node Feature Discovery's labels),
    through the pool's taints; never on another team's GPU nodes, where their own plugin runs."""
    return {
        "tolerations": pool_tolerations(),
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "karpenter.k8s.aws/instance-gpu-manufacturer",
                                    "operator": "In",
                                    "values": ["nvidia"],
                                },
                                {"key": GPU_POOL_LABEL[0], "operator": "In", "values": [GPU_POOL_LABEL[1]]},
                            ]
                        }
                    ]
                }
            }
        },
    }


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
                "taints": [dict(t) for t in POOL_TAINTS],
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
        existing_cluster: bool = False,
    ) -> None:
        super().__init__(scope, id)
        self.node_class = _node_class(
            self,
            existing_cluster,
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
        self.node_pool = _node_pool(
            self,
            compute.gpu_pool,
            self.node_class,
            name=gpu_node_pool_name(compute.mode, existing_cluster=existing_cluster),
        )


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
        existing_cluster: bool = False,
    ) -> None:
        super().__init__(scope, id)
        self.node_class = _node_class(
            self,
            existing_cluster,
            "karpenter.k8s.aws/v1",
            "EC2NodeClass",
            {
                **_placement(node_role_name, subnet_ids, security_group_ids),
                "amiSelectorTerms": [{"alias": compute.ami_alias}],
                # Instance-store policy, block devices and user data: the node OS's (warmstart/node_os/).
                **compute.node_os.karpenter_storage(compute, image_preload, data_volume_snapshot_id),
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
        self.node_pool = _node_pool(
            self,
            compute.gpu_pool,
            self.node_class,
            name=gpu_node_pool_name(compute.mode, existing_cluster=existing_cluster),
        )


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


def _node_class(
    chart: cdk8s.Chart, existing_cluster: bool, api_version: str, kind: str, spec: dict[str, Any]
) -> cdk8s.ApiObject:
    name = gpu_node_class_name(existing_cluster=existing_cluster)
    node_class = cdk8s.ApiObject(
        chart, kind, api_version=api_version, kind=kind, metadata=cdk8s.ApiObjectMetadata(name=name)
    )
    node_class.add_json_patch(cdk8s.JsonPatch.add("/spec", spec))
    return node_class


def _node_pool(chart: cdk8s.Chart, pool: GpuPool, node_class: cdk8s.ApiObject, *, name: str) -> cdk8s.ApiObject:
    node_pool = cdk8s.ApiObject(
        chart, "NodePool", api_version="karpenter.sh/v1", kind="NodePool", metadata=cdk8s.ApiObjectMetadata(name=name)
    )
    node_class_ref = {"group": node_class.api_group, "kind": node_class.kind, "name": node_class.name}
    node_pool.add_json_patch(cdk8s.JsonPatch.add("/spec", gpu_node_pool_spec(pool, node_class_ref)))
    return node_pool
