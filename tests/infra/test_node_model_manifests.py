"""The node model's DaemonSets are the rendered ones: every DaemonSet warmstart puts in the cluster that would run on
a GPU node of the pool (it tolerates the pool's taints and its node selection admits the pool's labels) is in
`warmstart_pods`, with the same requests, and nothing the model counts is missing from the manifests."""

from __future__ import annotations

from collections import Counter

from warmstart.node_model import MIB_PER_GIB, Resources, warmstart_pods
from warmstart_cli.existing_cluster_objects import gpu_node_label_sets, runs_on, tolerates_pool_taints
from warmstart_cli.existing_daemonsets import pod_requests


def test_every_daemonset_on_a_gpu_node_is_in_the_node_model(every_env):
    label_sets = gpu_node_label_sets(every_env.config)
    on_gpu_nodes = [
        obj
        for obj in every_env.manifests()
        if obj["kind"] == "DaemonSet"
        and tolerates_pool_taints(obj["spec"]["template"]["spec"])
        and any(runs_on(obj["spec"]["template"]["spec"], labels) for labels in label_sets)
    ]
    rendered = Counter(pod_requests(d["spec"]["template"]["spec"]) for d in on_gpu_nodes)
    modelled = Counter(d.requests for d in warmstart_pods(every_env.config))
    assert rendered == modelled, [d["metadata"]["name"] for d in on_gpu_nodes]


def test_the_agent_requests_what_the_model_counts(prod):
    (agent,) = [o for o in prod.manifests() if o["kind"] == "DaemonSet" and o["metadata"]["name"] == "warmstart-agent"]
    assert pod_requests(agent["spec"]["template"]["spec"]) == Resources(100, MIB_PER_GIB)
