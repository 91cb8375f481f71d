"""An existing cluster's own DaemonSets on warmstart's GPU nodes, against the node model.

The node model counts the add-ons a Karpenter cluster runs as published (warmstart/node_model.py ADD_ON_PODS). A
team's cluster may run more that tolerate every taint and so land on warmstart's nodes too (a log shipper, a
monitoring agent, the EBS CSI node plugin). make preflight reads them: what they request beyond the model's add-ons
is taken from every node, and the GPU budget placed again; where the models no longer fit gpu_limit (or a pod no
node), the deploy stops with the limit that does. The DaemonSets are read as untrusted: a request that is no
Kubernetes quantity is a note, never a guess.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

from contracts.agent_settings import AGENT_NAMESPACE
from contracts.pod_labels import GPU_POOL_LABEL
from warmstart.catalog import Catalog
from warmstart.config import EnvironmentConfig
from warmstart.existing_cluster_objects import Finding, field, gpu_node_labels, items_of, runs_on, tolerates_pool_taints
from warmstart.node_model import DaemonSetPod, Resources, add_on_pods
from warmstart.placement import needed_placement

QUANTITY = re.compile(r"^([0-9]{1,15}(?:\.[0-9]{1,9})?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
SCALE = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}


def quantity(text: Any) -> Decimal | None:
    """A Kubernetes quantity as a number (cores, bytes); None for anything else."""
    found = QUANTITY.match(text) if isinstance(text, str) else None
    if found is None:
        return None
    try:
        return Decimal(found.group(1)) * SCALE[found.group(2)]
    except InvalidOperation:
        return None


def _container_requests(container: Any) -> Resources | None:
    asked = field(container, "resources", "requests") or {}
    if not isinstance(asked, dict):
        return None
    cpu, memory = quantity(asked.get("cpu", "0")), quantity(asked.get("memory", "0"))
    if cpu is None or memory is None:
        return None
    return Resources(math.ceil(cpu * 1000), math.ceil(memory / 2**20))


def pod_requests(pod_spec: Any) -> Resources | None:
    """The scheduler's: per resource, the larger of the containers' sum and the largest init container."""
    containers, inits = field(pod_spec, "containers"), field(pod_spec, "initContainers") or []
    if not isinstance(containers, list) or not isinstance(inits, list):
        return None
    asked = [_container_requests(c) for c in containers]
    first = [_container_requests(c) for c in inits]
    if any(r is None for r in asked + first):
        return None
    total = sum((r for r in asked if r), Resources(0, 0))
    return Resources(
        max([total.cpu_millis, *(r.cpu_millis for r in first if r)]),
        max([total.memory_mib, *(r.memory_mib for r in first if r)]),
    )


def daemonset_findings(config: EnvironmentConfig, catalog: Catalog, daemonsets: Any) -> tuple[list[Finding], list[str]]:
    if daemonsets is None:
        return [], []  # the DaemonSets' reading failure is noted once, by the caller
    labels = gpu_node_labels(config)
    found, unreadable = [], []
    for item in items_of(daemonsets):
        spec = field(item, "spec", "template", "spec")
        namespace, name = field(item, "metadata", "namespace"), field(item, "metadata", "name")
        if namespace == AGENT_NAMESPACE or not (tolerates_pool_taints(spec) and runs_on(spec, labels)):
            continue
        requests = pod_requests(spec)
        if requests is None:
            unreadable.append(f"{namespace}/{name}")
        else:
            found.append(DaemonSetPod(f"{namespace}/{name}", requests, "the cluster"))
    notes = (
        [f"the requests of {', '.join(unreadable)} (on warmstart's GPU nodes) could not be read: not counted"]
        if unreadable
        else []
    )
    counted = sum((p.requests for p in add_on_pods(config.compute.mode)), Resources(0, 0))
    actual = sum((p.requests for p in found), Resources(0, 0))
    extra = Resources(max(0, actual.cpu_millis - counted.cpu_millis), max(0, actual.memory_mib - counted.memory_mib))
    if extra == Resources(0, 0):
        return [], notes
    names = ", ".join(p.name for p in found)
    beyond = DaemonSetPod("the cluster's DaemonSets beyond the add-ons counted", extra, "the cluster")
    placement = needed_placement(config, catalog, (beyond,))
    pool = config.compute.gpu_pool
    what = (
        f"the cluster's DaemonSets on warmstart's GPU nodes ({names}) request {actual.describe()} a node, "
        f"{extra.describe()} more than warmstart counts for the add-ons"
    )
    if placement.overfull:
        tightest = min(
            (n.shape for n in placement.nodes), key=lambda s: (s.for_models.cpu_millis, s.for_models.memory_mib)
        )
        return [
            Finding(
                f"{what}: a model's pod no longer fits a node ({tightest.describe()})",
                f"lower the models' cpu or memory_gib to what a node offers, or keep those DaemonSets off nodes "
                f"labelled {GPU_POOL_LABEL[0]} (node affinity DoesNotExist)",
            )
        ], notes
    if placement.gpus > pool.gpu_limit:
        return [
            Finding(
                f"{what}: the models need {placement.gpus} GPUs of nodes ({placement.describe()}), above "
                f"gpu_limit {pool.gpu_limit}, and pods would stay Pending",
                f"set compute.gpu_pool.gpu_limit to at least {placement.gpus}, or keep those DaemonSets off nodes "
                f"labelled {GPU_POOL_LABEL[0]} (node affinity DoesNotExist)",
            )
        ], notes
    return [], [*notes, f"{what}; the models still fit gpu_limit {pool.gpu_limit} ({placement.gpus} GPUs of nodes)"]
