"""Nodes for the control-plane tier: Node objects as a GPU node launched by warmstart's NodePool (or any other node)
registers, with the labels, taints and allocatable of the catalog's instance type. No kubelet runs: `mark_running`
plays kubelet's part for the pods that must serve (phase Running, Ready)."""

from __future__ import annotations

import time

from contracts.pod_labels import GPU_POOL_LABEL
from kube.gpu_nodes import GPU_TAINT, gpu_node_pool_name
from tests.cluster.api import Api
from warmstart.catalog import default_catalog


def gpu_node(
    name: str, instance_type: str, *, zone: str, mode: str, capacity_type: str = "on-demand"
) -> tuple[dict, dict]:
    """A GPU node of warmstart's pool: (the Node, its status). Labels as Karpenter sets them (the pool's template
    labels, its well-known labels), the pool's taint, the instance type's GPUs, vCPUs and memory."""
    instance = default_catalog().instance(instance_type)
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/zone": zone,
        "karpenter.sh/nodepool": gpu_node_pool_name(mode),
        "karpenter.sh/capacity-type": capacity_type,
        GPU_POOL_LABEL[0]: GPU_POOL_LABEL[1],
    }
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": [dict(GPU_TAINT)]},
    }
    resources = {
        "cpu": str(instance.vcpus),
        "memory": f"{instance.memory_gib}Gi",
        "nvidia.com/gpu": str(instance.gpu_count),
        "pods": "110",
        "ephemeral-storage": f"{instance.nvme_gb}G",
    }
    return node, _status(resources)


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
    return node, _status({"cpu": str(cpu), "memory": f"{memory_gib}Gi", "pods": "110", "ephemeral-storage": "100G"})


def _status(resources: dict) -> dict:
    return {
        "capacity": resources,
        "allocatable": resources,
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


def mark_running(api: Api, pod: dict, *, ready: bool = True) -> None:
    """What kubelet reports once the pod's containers run (and pass their readiness probe)."""
    meta = pod["metadata"]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    status = {
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
