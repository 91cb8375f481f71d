"""The vLLM pods on the real scheduler and controller manager, prod's objects applied: fake nodes carry the pool's
labels and taints and the node model's allocatable (tests/cluster/nodes.py). The pods land only on the GPU pool's
nodes of the model's instance types, replicas on separate nodes (and zones, where they can), and a node that holds a
model's weights wins the placement of that model's next pod."""

from __future__ import annotations

import time

import pytest

from contracts.agent_settings import WEIGHTS_LABEL_DOMAIN
from contracts.pod_labels import GPU_POOL_LABEL, GPU_TAINT, vllm_pod_selector
from tests.cluster.api import Api
from tests.cluster.crds import crds_for
from tests.cluster.environment import apply_all, create_pod, pod_of, rendered_objects, scale, wait_until
from tests.cluster.nodes import gpu_node, plain_node, pods, register, wait_bound
from tests.synth import synthesize_shipped

pytestmark = pytest.mark.control_plane

GPU_NODES = {"gpu-a1": "us-east-1a", "gpu-b1": "us-east-1b", "gpu-c1": "us-east-1c", "gpu-a2": "us-east-1a"}
WARM_TRIALS = 6


@pytest.fixture(scope="module")
def cluster(start_module_plane, tmp_path_factory):
    prod = synthesize_shipped("prod", tmp_path_factory.mktemp("cdk"))
    api = Api(start_module_plane(controllers=True))
    for name, zone in GPU_NODES.items():
        register(api, *gpu_node(name, "p5.48xlarge", zone=zone, mode=prod.config.compute.mode))
    # Not the pool's: a GPU node of another pool (the GPU taint only, no pool label) and the system nodes.
    other, status = gpu_node("other-pool", "p5e.48xlarge", zone="us-east-1a", mode="other")
    del other["metadata"]["labels"][GPU_POOL_LABEL[0]]
    other["spec"]["taints"] = [dict(GPU_TAINT)]
    register(api, other, status)
    for index, zone in enumerate(("us-east-1a", "us-east-1b")):
        register(api, *plain_node(f"system-{index}", zone=zone))
    objects = rendered_objects(prod, tmp_path_factory.mktemp("dist"))
    assert not apply_all(api, objects, crds_for(prod.config), dry_run_first=False)
    models = {m.name: m for m in prod.config.models}
    for model in models.values():  # KEDA's HPA sets an autoscaled model's floor (tests/cluster/test_autoscaling.py)
        if model.autoscaling:
            scale(api, model.name, model.autoscaling.min_replicas)
    return prod, api, objects, models


def _vllm_pods(api: Api, model: str) -> list[dict]:
    return pods(api, model, vllm_pod_selector())


def _all_bound(api: Api, models) -> bool:
    expected = {"qwen3-6-35b-a3b": 2, "llama-3-3-70b": 2}  # replicas: 2; the autoscaler's min_replicas: 2
    return all(
        len(found := _vllm_pods(api, name)) == expected[name] and all(p["spec"].get("nodeName") for p in found)
        for name in models
    )


def test_vllm_pods_land_only_on_the_gpu_pools_nodes_of_their_instance_types(cluster):
    prod, api, _, models = cluster
    wait_until(lambda: _all_bound(api, models), timeout=120, what="every vLLM pod scheduled")
    for name, model in models.items():
        types = set(model.instance_types or prod.config.compute.gpu_pool.instance_types)
        for pod in _vllm_pods(api, name):
            node = api.get(f"/api/v1/nodes/{pod['spec']['nodeName']}")["metadata"]["labels"]
            assert node.get(GPU_POOL_LABEL[0]) == GPU_POOL_LABEL[1], (name, pod["spec"]["nodeName"])
            assert node["node.kubernetes.io/instance-type"] in types
    agents = pods(api, "warmstart-system", "app.kubernetes.io/name=warmstart-agent")
    assert sorted(p["spec"]["nodeName"] for p in agents) == sorted(GPU_NODES)  # one per pool node, none elsewhere


def test_replicas_spread_over_nodes_and_zones(cluster):
    _, api, _, models = cluster
    wait_until(lambda: _all_bound(api, models), timeout=120, what="every vLLM pod scheduled")
    for name in models:
        nodes = [p["spec"]["nodeName"] for p in _vllm_pods(api, name)]
        assert len(set(nodes)) == len(nodes), (name, nodes)  # required anti-affinity on hostname
        zones = {GPU_NODES[n] for n in nodes}
        assert len(zones) == len(nodes), (name, nodes)  # ScheduleAnyway on zone: three zones have room


def test_a_node_holding_the_models_weights_wins_its_next_pod(cluster):
    prod, api, objects, models = cluster
    model = "qwen3-6-35b-a3b"
    # The same Deployment is in the model stack's manifest and in dist/.
    deployment = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["namespace"] == model)
    # Only the trial pods of this model: its Deployment scaled to none (its spread counts the model's pods).
    scale(api, model, 0)
    # No kubelet confirms a pod's end: what the ReplicaSet deletes is removed at once, as kubelet would.
    wait_until(lambda: all(p["metadata"].get("deletionTimestamp") for p in _vllm_pods(api, model)), what="pods deleted")
    for pod in _vllm_pods(api, model):
        api.request("DELETE", f"/api/v1/namespaces/{model}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0")
    wait_until(lambda: not _vllm_pods(api, model), what=f"{model}'s pods gone")
    label = f"{WEIGHTS_LABEL_DOMAIN}/{model}"
    won = []
    for trial in range(WARM_TRIALS):
        warm = sorted(GPU_NODES)[trial % len(GPU_NODES)]
        _label(api, warm, {label: "ready"})
        pod = pod_of(deployment)
        pod["metadata"]["name"] = f"trial-{trial}"
        created = create_pod(api, pod, dry_run=False)
        assert created.ok, created.message
        won.append(wait_bound(api, model, pod["metadata"]["name"]) == warm)
        api.request("DELETE", f"/api/v1/namespaces/{model}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0")
        wait_until(
            lambda name=pod["metadata"]["name"]: api.request("GET", f"/api/v1/namespaces/{model}/pods/{name}").status
            == 404,
            what="the trial pod gone",
        )
        _label(api, warm, {label: None})
        time.sleep(0.2)
    assert all(won), f"the warm node won {sum(won)} of {WARM_TRIALS} placements"
    assert prod.config.caches.weights


def _label(api: Api, node: str, labels: dict) -> None:
    answer = api.request(
        "PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}}, content_type="application/merge-patch+json"
    )
    assert answer.ok, answer.message
