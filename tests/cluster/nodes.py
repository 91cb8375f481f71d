"""Nodes for the control-plane tier: Node objects as a GPU node launched by warmstart's NodePool (or any other node)
registers, with the labels and taints of the pool and the capacity and allocatable the node model computes for the
instance type (warmstart/node_model.py: Karpenter's formulas). No kubelet runs: `mark_running` plays kubelet's part
for the pods that must serve (phase Running, Ready)."""

from __future__ import annotations

import time

from contracts.pod_labels import GPU_POOL_LABEL, POOL_TAINTS
from kube.gpu_nodes import gpu_node_pool_name
from tests.cluster.api import Api
from warmstart.catalog import default_catalog
from warmstart.node_model import allocatable, capacity, max_pods
from warmstart.node_os import AUTO_MODE_OS, karpenter_node_os

# Karpenter labels a GPU node with its GPU's maker (karpenter-provider-aws v1.14.1 pkg/apis/v1/labels.go); Auto Mode
# with its own domain, and every Auto Mode node with its compute type (the add-ons' manifests keep off those).
# Karpenter's own pools in these tests run AL2023 (AL2023 and Bottlerocket reserve alike: warmstart/node_model.py).
KARPENTER_NODE_OS = karpenter_node_os("al2023@v20260714")
GPU_MANUFACTURER_LABELS = {
    "karpenter": {"karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia"},
    "auto": {"eks.amazonaws.com/instance-gpu-manufacturer": "nvidia", "eks.amazonaws.com/compute-type": "auto"},
}


def gpu_node(
    name: str, instance_type: str, *, zone: str, mode: str, capacity_type: str = "on-demand"
) -> tuple[dict, dict]:
    """A GPU node of warmstart's pool: (the Node, its status). Labels as Karpenter sets them (the pool's template
    labels, its well-known labels), the pool's taints, the instance type's GPUs, and the capacity and allocatable
    Karpenter predicts for it (a mode outside warmstart's, e.g. another team's pool, is taken as Karpenter's)."""
    instance = default_catalog().instance(instance_type)
    karpenter_or_auto = "auto" if mode == "auto" else "karpenter"
    node_os = AUTO_MODE_OS if mode == "auto" else KARPENTER_NODE_OS
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/zone": zone,
        "karpenter.sh/nodepool": gpu_node_pool_name(mode),
        "karpenter.sh/capacity-type": capacity_type,
        GPU_POOL_LABEL[0]: GPU_POOL_LABEL[1],
        **GPU_MANUFACTURER_LABELS[karpenter_or_auto],
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [dict(t) for t in POOL_TAINTS]},
    }
    total, offered = capacity(instance), allocatable(instance, node_os)
    shared = {
        "nvidia.com/gpu": str(instance.gpu_count),
        "pods": str(max_pods(instance, node_os)),
        "ephemeral-storage": f"{instance.nvme_gb}G",
    }
    return node, _status(
        {"cpu": f"{total.cpu_millis}m", "memory": f"{total.memory_mib}Mi", **shared},
        {"cpu": f"{offered.cpu_millis}m", "memory": f"{offered.memory_mib}Mi", **shared},
    )


def plain_node(
    name: str, *, zone: str, cpu: int = 4, memory_gib: int = 16, labels: dict | None = None
) -> tuple[dict, dict]:
    """A node outside the GPU pool (the system node group's, or another team's)."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": zone,
                **(labels or {}),
            },
        },
    }
    resources = {"cpu": str(cpu), "memory": f"{memory_gib}Gi", "pods": "110", "ephemeral-storage": "100G"}
    return node, _status(resources, resources)


def _status(capacity: dict, allocatable: dict) -> dict:
    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "stand-in"}],
    }


def register(api: Api, node: dict, status: dict) -> None:
    created = api.request("POST", "/api/v1/nodes", node)
    assert created.ok, created.message
    patched = api.request(
        "PATCH",
        f"/api/v1/nodes/{node['metadata']['name']}/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )
    assert patched.ok, patched.message
    # The API server taints a new node not-ready (admission: TaintNodesByCondition) until the node lifecycle
    # controller sees it Ready; this plane runs no such controller (no kubelet heartbeats), so the taint goes here.
    untainted = api.request(
        "PATCH",
        f"/api/v1/nodes/{node['metadata']['name']}",
        {"spec": {"taints": node.get("spec", {}).get("taints")}},
        content_type="application/merge-patch+json",
    )
    assert untainted.ok, untainted.message


def pods(api: Api, namespace: str, selector: str = "") -> list[dict]:
    query = f"?labelSelector={selector}" if selector else ""
    return api.get(f"/api/v1/namespaces/{namespace}/pods{query}")["items"]


def wait_bound(api: Api, namespace: str, name: str, timeout: float = 60) -> str:
    """The node the scheduler bound the pod to."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if pod["spec"].get("nodeName"):
            return pod["spec"]["nodeName"]
        time.sleep(0.2)
    raise TimeoutError(f"{namespace}/{name} was not scheduled: {pod.get('status')}")


def mark_running(api: Api, pod: dict, *, ready: bool = True, pod_ip: str | None = None) -> None:
    """What kubelet reports once the pod's containers run (and pass their readiness probe), with the pod's IP."""
    meta = pod["metadata"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
        **({"podIP": pod_ip, "podIPs": [{"ip": pod_ip}]} if pod_ip else {}),
        "phase": "Running",
        "startTime": now,
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": str(ready), "lastTransitionTime": now},
            {"type": "Ready", "status": str(ready), "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        ],
    }
    answer = api.request(
        "PATCH",
        f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )
    assert answer.ok, answer.message
