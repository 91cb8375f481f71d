"""An existing cluster's own DaemonSets on warmstart's GPU nodes, against the node model.

The node model counts the add-ons a Karpenter cluster runs as published (warmstart/node_model.py ADD_ON_PODS). A
team's cluster may run more that tolerate every taint and so land on warmstart's nodes too (a log shipper, a
monitoring agent, the EBS CSI node plugin), in Auto Mode too. make preflight reads them: what they request beyond the
model's add-ons is taken from every node, and the GPU budget placed again; where the models no longer fit gpu_limit
(or a pod no node), the deploy stops with the limit that does. The DaemonSets are read as untrusted: a request that
is no Kubernetes quantity stops the deploy, never a guess.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from contracts.agent_settings import AGENT_NAMESPACE
from contracts.pod_labels import GPU_POOL_LABEL
from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.node_model import MIB_PER_GIB, VM_MEMORY_OVERHEAD, DaemonSetPod, Resources, add_on_pods
from warmstart.placement import needed_placement
from warmstart.problem import Problem
from warmstart.quantity import parse_quantity
from warmstart_cli.existing_cluster_objects import (
    field,
    gpu_node_label_sets,
    items_of,
    runs_on,
    tolerates_pool_taints,
)

RESOURCES = ("cpu", "memory")


def _resources(values: Any) -> dict[str, Decimal] | None:
    """cpu and memory of a requests or limits mapping; None when either is there but no quantity."""
    if values is None:
        return {}
    if not isinstance(values, dict):
        return None
    found = {}
    for name in RESOURCES:
        if name in values:
            amount = parse_quantity(values[name])
            if amount is None or amount < 0:
                return None
            found[name] = amount
    return found


def _container_requests(container: Any) -> dict[str, Decimal] | None:
    """Requests, each missing one taken from the limit (what the API server does for a pod, and Karpenter for the
    pod it makes from a DaemonSet's template)."""
    requests, limits = (
        _resources(field(container, "resources", "requests")),
        _resources(field(container, "resources", "limits")),
    )
    if requests is None or limits is None:
        return None
    return {name: requests.get(name, limits.get(name, Decimal(0))) for name in RESOURCES}


def pod_requests(pod_spec: Any) -> Resources | None:
    """The scheduler's (k8s.io/component-helpers resource.PodRequests, v1.35): the containers' sum; each init container
    beside the sidecars started before it, sidecars (restartPolicy Always) adding to the sum; the larger of the two;
    pod-level requests where set; plus the pod's overhead. None when a field is no quantity."""
    containers, inits = field(pod_spec, "containers"), field(pod_spec, "initContainers") or []
    if not isinstance(containers, list) or not isinstance(inits, list):
        return None
    total = dict.fromkeys(RESOURCES, Decimal(0))
    for container in containers:
        asked = _container_requests(container)
        if asked is None:
            return None
        total = {n: total[n] + asked[n] for n in RESOURCES}
    sidecars, largest_init = dict.fromkeys(RESOURCES, Decimal(0)), dict.fromkeys(RESOURCES, Decimal(0))
    for container in inits:
        asked = _container_requests(container)
        if asked is None:
            return None
        if field(container, "restartPolicy") == "Always":
            total = {n: total[n] + asked[n] for n in RESOURCES}
            sidecars = {n: sidecars[n] + asked[n] for n in RESOURCES}
            running = sidecars
        else:
            running = {n: asked[n] + sidecars[n] for n in RESOURCES}
        largest_init = {n: max(largest_init[n], running[n]) for n in RESOURCES}
    pod = {n: max(total[n], largest_init[n]) for n in RESOURCES}
    pod_level, overhead = _resources(field(pod_spec, "resources", "requests")), _resources(field(pod_spec, "overhead"))
    if pod_level is None or overhead is None:
        return None
    pod = {n: pod_level.get(n, pod[n]) + overhead.get(n, Decimal(0)) for n in RESOURCES}
    return Resources(math.ceil(pod["cpu"] * 1000), math.ceil(pod["memory"] / 2**20))


def daemonset_findings(
    config: EnvironmentConfig, catalog: Catalog, daemonsets: Any, vm_memory_overhead: float | None = None
) -> tuple[list[Problem], list[str]]:
    """`vm_memory_overhead`: the existing Karpenter's, where it sets one: above the 0.075 the node model takes, the
    difference is memory a node does not offer either (on the pool's largest type, for all)."""
    if daemonsets is None:
        return [], []  # the DaemonSets' reading failure is noted once, by the caller
    label_sets = gpu_node_label_sets(config)
    found, unreadable = [], []
    for item in items_of(daemonsets):
        spec = field(item, "spec", "template", "spec")
        namespace, name = field(item, "metadata", "namespace"), field(item, "metadata", "name")
        if namespace == AGENT_NAMESPACE or not tolerates_pool_taints(spec):
            continue
        if not any(runs_on(spec, labels) for labels in label_sets):  # on some of the pool's nodes: counted on all
            continue
        requests = pod_requests(spec)
        if requests is None:
            unreadable.append(f"{namespace}/{name}")
        else:
            found.append(DaemonSetPod(f"{namespace}/{name}", requests, "the cluster"))
    if unreadable:
        # The API server stores only quantities it parsed: one that is none here cannot be counted, nor left out.
        return [
            Problem(
                "",
                f"the requests of {', '.join(unreadable)}, which would run on warmstart's GPU nodes, are no Kubernetes "
                "quantity warmstart can read: whether the models still fit cannot be told",
                f"check them (kubectl get daemonset -o yaml), or keep them off nodes labelled {GPU_POOL_LABEL[0]} "
                "(node affinity DoesNotExist)",
            )
        ], []
    if vm_memory_overhead is not None and vm_memory_overhead > VM_MEMORY_OVERHEAD:
        memory = max(
            math.ceil(i.memory_gib * MIB_PER_GIB * vm_memory_overhead)
            - math.ceil(i.memory_gib * MIB_PER_GIB * VM_MEMORY_OVERHEAD)
            for i in map(catalog.instance, config.compute.gpu_pool.instance_types)
        )
        found.append(
            DaemonSetPod(f"Karpenter's VM_MEMORY_OVERHEAD_PERCENT={vm_memory_overhead:g}", Resources(0, memory), "")
        )
    counted = sum((p.requests for p in add_on_pods(config.compute.node_os)), Resources(0, 0))
    actual = sum((p.requests for p in found), Resources(0, 0))
    extra = Resources(max(0, actual.cpu_millis - counted.cpu_millis), max(0, actual.memory_mib - counted.memory_mib))
    if extra == Resources(0, 0):
        return [], []
    names = ", ".join(p.name for p in found)
    beyond = DaemonSetPod("the cluster's DaemonSets beyond the add-ons counted", extra, "the cluster")
    placement = needed_placement(config, catalog, (beyond,))
    pool = config.compute.gpu_pool
    what = (
        f"the cluster takes {actual.describe()} of each of warmstart's GPU nodes ({names}), "
        f"{extra.describe()} more than warmstart counts for the add-ons"
    )
    if placement.overfull:
        tightest = min(
            (n.shape for n in placement.nodes), key=lambda s: (s.for_models.cpu_millis, s.for_models.memory_mib)
        )
        return [
            Problem(
                "",
                f"{what}: a model's pod no longer fits a node ({tightest.describe()})",
                f"lower the models' cpu or memory_gib to what a node offers, or keep those DaemonSets off nodes "
                f"labelled {GPU_POOL_LABEL[0]} (node affinity DoesNotExist)",
            )
        ], []
    if placement.gpus > pool.gpu_limit:
        return [
            Problem(
                "",
                f"{what}: the models need {placement.gpus} GPUs of nodes ({placement.describe()}), above "
                f"gpu_limit {pool.gpu_limit}, and pods would stay Pending",
                f"set compute.gpu_pool.gpu_limit to at least {placement.gpus}, or keep those DaemonSets off nodes "
                f"labelled {GPU_POOL_LABEL[0]} (node affinity DoesNotExist)",
            )
        ], []
    return [], [f"{what}; the models still fit gpu_limit {pool.gpu_limit} ({placement.gpus} GPUs of nodes)"]
