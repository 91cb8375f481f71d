"""warmstart's GPU pool in a cluster it shares with other teams, on the real scheduler: its nodes carry a taint only
warmstart's pods tolerate, and its pods select the pool's label. Another team's GPU pod, which tolerates the usual
`nvidia.com/gpu` taint, is refused by warmstart's nodes; warmstart's pods never land on the team's nodes. And a
model's replicas take separate nodes even where one node has room for two (required anti-affinity), which a
hostname spread does not guarantee."""

from __future__ import annotations

import pytest

from contracts.pod_labels import GPU_POOL_LABEL, GPU_TAINT, pool_tolerations, vllm_pod_selector
from tests.cluster.add_ons import add_on_daemonsets
from tests.cluster.api import Api
from tests.cluster.crds import crds_for
from tests.cluster.environment import apply_all, create_pod, rendered_objects, scale, wait_until
from tests.cluster.nodes import gpu_node, pods, register

pytestmark = pytest.mark.control_plane

MODEL = "qwen3-6-35b-a3b"


@pytest.fixture(scope="module")
def shared(start_module_plane, synthesized_env, tmp_path_factory):
    """prod's objects (its models at none: each test scales its own), one warmstart GPU node and one GPU node of
    another team's pool (its own NodePool's label, the GPU taint only)."""
    prod = synthesized_env("prod")
    api = Api(start_module_plane(controllers=True))
    objects = rendered_objects(prod, tmp_path_factory.mktemp("dist"))
    for obj in objects:
        if obj["kind"] == "Deployment":
            obj["spec"]["replicas"] = 0
    objects = [o for o in objects if o["kind"] != "HorizontalPodAutoscaler"]
    assert not apply_all(api, objects + add_on_daemonsets(), crds_for(prod.config), dry_run_first=False)
    register(api, *gpu_node("warmstart-1", "p5.48xlarge", zone="us-east-1a", mode=prod.config.compute.mode))
    team, status = gpu_node("team-1", "p5.48xlarge", zone="us-east-1a", mode="karpenter")
    del team["metadata"]["labels"][GPU_POOL_LABEL[0]]
    team["metadata"]["labels"]["karpenter.sh/nodepool"] = "team-gpu"
    team["spec"]["taints"] = [dict(GPU_TAINT)]
    register(api, team, status)
    return api


def _team_pod(name: str) -> dict:
    """A GPU pod as other teams write them: it tolerates the GPU taint and asks for a p5."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"team": "research"}},
        "spec": {
            "containers": [
                {
                    "name": "train",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            "nodeSelector": {"node.kubernetes.io/instance-type": "p5.48xlarge"},
            "tolerations": [{"key": GPU_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}],
        },
    }


def _outcome(api: Api, namespace: str, name: str) -> tuple[str | None, str]:
    pod = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    why = next(
        (c.get("message", "") for c in pod.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), ""
    )
    return pod["spec"].get("nodeName"), why


def _decided(api: Api, namespace: str, name: str) -> tuple[str | None, str]:
    wait_until(
        lambda: any(_outcome(api, namespace, name)),
        timeout=60,
        what=f"{namespace}/{name} scheduled or refused",
    )
    return _outcome(api, namespace, name)


def _cordon(api: Api, node: str, cordoned: bool) -> None:
    api.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": cordoned}})


def test_another_teams_gpu_pods_never_land_on_warmstarts_nodes(shared):
    api = shared
    created = create_pod(api, _team_pod("train-0"), dry_run=False)
    assert created.ok, created.message
    assert _decided(api, "default", "train-0")[0] == "team-1"
    # Their own node full (cordoned): warmstart's node, with 8 free GPUs, still refuses them.
    _cordon(api, "team-1", True)
    try:
        created = create_pod(api, _team_pod("train-1"), dry_run=False)
        assert created.ok, created.message
        node, why = _decided(api, "default", "train-1")
        # warmstart-1's taints are the GPU taint, which the pod tolerates, and warmstart's: the untolerated one.
        assert node is None and "1 node(s) had untolerated taint(s)" in why and "1 node(s) were unschedulable" in why
    finally:
        _cordon(api, "team-1", False)
        for name in ("train-0", "train-1"):
            api.request("DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")


def test_a_hostname_spread_alone_would_put_both_replicas_on_one_node(shared):
    """Why anti-affinity: with one node of the pool, a hostname spread's skew counts that node only (kube-scheduler
    PodTopologySpread), so two replicas land together, and one expiring node takes both. (Before the replicas'
    test below: the pool has one node.)"""
    api = shared
    try:
        for index in range(2):
            pod = _team_pod(f"spread-{index}")
            pod["metadata"]["labels"] = {"app": "spread"}
            pod["spec"].update(
                nodeSelector={GPU_POOL_LABEL[0]: GPU_POOL_LABEL[1]},
                tolerations=pool_tolerations(),
                topologySpreadConstraints=[
                    {
                        "maxSkew": 1,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "spread"}},
                    }
                ],
            )
            created = create_pod(api, pod, dry_run=False)
            assert created.ok, created.message
            assert _decided(api, "default", f"spread-{index}")[0] == "warmstart-1"
    finally:
        for index in range(2):
            api.request("DELETE", f"/api/v1/namespaces/default/pods/spread-{index}?gracePeriodSeconds=0")


def test_replicas_take_separate_nodes_and_never_a_teams_node(shared):
    """Two replicas, one warmstart node with room for both and a team's node with room: the second replica waits
    (for the node Karpenter launches for it) rather than share the first's node or take the team's."""
    api = shared
    scale(api, MODEL, 2)

    def placed() -> list[tuple[str, str | None, str]]:
        return [
            (p["metadata"]["name"], *_outcome(api, MODEL, p["metadata"]["name"]))
            for p in pods(api, MODEL, vllm_pod_selector())
        ]

    wait_until(
        lambda: len(placed()) == 2 and all(node or why for _, node, why in placed()), what="both replicas decided"
    )
    nodes = sorted(node or "" for _, node, _ in placed())
    assert nodes == ["", "warmstart-1"], placed()
    why = next(why for _, node, why in placed() if node is None)
    assert "anti-affinity" in why and "node affinity/selector" in why, why  # warmstart-1 taken; team-1 not the pool
    # The node Karpenter launches for the waiting replica: it goes there.
    register(api, *gpu_node("warmstart-2", "p5.48xlarge", zone="us-east-1b", mode="karpenter"))
    wait_until(
        lambda: sorted(node or "" for _, node, _ in placed()) == ["warmstart-1", "warmstart-2"],
        what="the second replica on the new node",
    )
