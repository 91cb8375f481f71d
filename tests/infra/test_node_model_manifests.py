"""The node model's DaemonSets are the rendered ones: every DaemonSet warmstart puts in the cluster that would run on
a GPU node of the pool (it tolerates the pool's taints and its node selection admits the pool's labels) is in
`warmstart_pods`, with the same requests, and nothing the model counts is missing from the manifests."""

from __future__ import annotations

from collections import Counter

from contracts.pod_labels import POOL_TAINTS
from warmstart.existing_cluster_objects import gpu_node_labels, runs_on
from warmstart.node_model import MIB_PER_GIB, Resources, warmstart_pods

UNITS = {"m": 1e-3, "": 1.0, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def _amount(text: str) -> float:
    for suffix in ("Ki", "Mi", "Gi", "m"):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * UNITS[suffix]
    return float(text)


def _requests(container: dict) -> Resources:
    asked = container.get("resources", {}).get("requests", {})
    return Resources(
        round(_amount(str(asked.get("cpu", "0"))) * 1000), round(_amount(str(asked.get("memory", "0"))) / 2**20)
    )


def pod_requests(pod: dict) -> Resources:
    """The scheduler's: per resource, the larger of the sum of the containers and the largest init container."""
    containers = [_requests(c) for c in pod["containers"]]
    inits = [_requests(c) for c in pod.get("initContainers", [])]
    total = sum(containers, Resources(0, 0))
    return Resources(
        max([total.cpu_millis, *(i.cpu_millis for i in inits)]),
        max([total.memory_mib, *(i.memory_mib for i in inits)]),
    )


def _tolerates_pool(pod: dict) -> bool:
    tolerated = {(t.get("key"), t.get("effect")) for t in pod.get("tolerations", []) if t.get("operator") == "Exists"}
    return all((taint["key"], taint["effect"]) in tolerated for taint in POOL_TAINTS)


def test_every_daemonset_on_a_gpu_node_is_in_the_node_model(every_env):
    labels = gpu_node_labels(every_env.config)
    on_gpu_nodes = [
        obj
        for obj in every_env.manifests()
        if obj["kind"] == "DaemonSet"
        and _tolerates_pool(obj["spec"]["template"]["spec"])
        and runs_on(obj["spec"]["template"]["spec"], labels)
    ]
    rendered = Counter(pod_requests(d["spec"]["template"]["spec"]) for d in on_gpu_nodes)
    modelled = Counter(d.requests for d in warmstart_pods(every_env.config))
    assert rendered == modelled, [d["metadata"]["name"] for d in on_gpu_nodes]


def test_the_agent_requests_what_the_model_counts(prod):
    (agent,) = [o for o in prod.manifests() if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "warmstart-agent"]
    assert pod_requests(agent["spec"]["template"]["spec"]) == Resources(100, MIB_PER_GIB)
