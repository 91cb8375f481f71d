"""The names of warmstart's GPU pool objects: the charts create them, and make preflight reads an existing cluster's
nodes by them (Karpenter labels each node `karpenter.sh/nodepool` with its pool's name)."""

from __future__ import annotations

GPU_NODE_CLASS = "gpu"  # Auto Mode forbids a custom node class named "default"
# In a cluster warmstart did not create, its cluster-wide objects carry its name: a team's own NodePool or node
# class called `gpu` is never taken over (an apply would overwrite it, and a destroy delete it).
EXISTING_CLUSTER_PREFIX = "warmstart-"


def gpu_node_class_name(*, existing_cluster: bool = False) -> str:
    return f"{EXISTING_CLUSTER_PREFIX if existing_cluster else ''}{GPU_NODE_CLASS}"


def gpu_node_pool_name(mode: str, *, existing_cluster: bool = False) -> str:
    """One NodePool name per compute mode. Karpenter's NodePool CRD makes `nodeClassRef.group` and `kind`
    immutable (v1.14.1, CEL `self.group == oldSelf.group`), and the two modes' node classes differ in both: under one
    name, switching an environment's mode is an update the API server refuses. Under two names the switch creates
    the new pool and deletes the old one (its nodes drain as Karpenter deletes them), and pods, which select the
    pool's template label (contracts.pod_labels.GPU_POOL_LABEL), land on either pool's nodes meanwhile."""
    return f"{EXISTING_CLUSTER_PREFIX if existing_cluster else ''}gpu-{mode}"
