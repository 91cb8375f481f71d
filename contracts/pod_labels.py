"""The labels and container names of warmstart's pods: the charts set them, the node agent selects and reads pods
by them."""

from __future__ import annotations

# Container names in every model's pod: the chart names them, the agent's start timeline reads their statuses.
VLLM_CONTAINER = "vllm"
RESTORE_WAIT_CONTAINER = "wait-for-compile-cache"
# The label that names a vLLM pod's model (the one label that differs between models).
MODEL_LABEL = "app.kubernetes.io/instance"


# Every GPU node warmstart's NodePool launches carries this label (the pool's template sets it), whichever compute
# mode made the pool: pods select the label, never the NodePool's name, which differs by mode (kube/gpu_nodes.py).
GPU_POOL_LABEL = ("warmstart.io/gpu-pool", "gpu")


# The taints of warmstart's GPU nodes. nvidia.com/gpu: the one every GPU pod in a cluster tolerates, so that nothing
# else lands on a GPU node. warmstart's own: only warmstart's pods (and add-ons that tolerate every taint) land on its
# nodes, so another team's GPU pods neither take the GPUs a model needs nor make Karpenter launch a node of
# warmstart's pool for them (Karpenter launches a pool's node only for pods that tolerate the pool's taints).
GPU_TAINT = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
POOL_TAINT = {"key": GPU_POOL_LABEL[0], "value": GPU_POOL_LABEL[1], "effect": "NoSchedule"}
POOL_TAINTS = (GPU_TAINT, POOL_TAINT)


def pool_tolerations() -> list[dict[str, str]]:
    """What every pod that runs on warmstart's GPU nodes tolerates: the pool's taints, and nothing more."""
    return [{"key": taint["key"], "operator": "Exists", "effect": taint["effect"]} for taint in POOL_TAINTS]


def gpu_pool_selector() -> dict[str, str]:
    """The node selector of every pod that runs on warmstart's GPU nodes."""
    return {GPU_POOL_LABEL[0]: GPU_POOL_LABEL[1]}


def model_labels(model_name: str) -> dict[str, str]:
    """The labels of a model's vLLM pods: the chart sets them, the node agent selects pods by them."""
    return {
        "app.kubernetes.io/name": "vllm",
        MODEL_LABEL: model_name,
        "app.kubernetes.io/part-of": "warmstart",
    }


def vllm_pod_selector() -> str:
    """Every model's vLLM pods (the labels all models share), as a Kubernetes label selector."""
    shared = {k: v for k, v in model_labels("").items() if k != MODEL_LABEL}
    return ",".join(f"{key}={value}" for key, value in shared.items())
