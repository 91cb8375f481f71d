"""warmstart's GPU budget against the real scheduler. For each shipped environment and each edge config
(tests/placement_cases.py) the nodes Karpenter would launch register with the capacity, allocatable, labels and
taints the node model gives them; the DaemonSets' pods (warmstart's, as rendered, and the add-ons') land on them
first; then the rendered workloads run at their most replicas, with each model's rollout pod where surge is on.

- Accepted: the nodes are those `plan` predicts (its rollout placement); every pod is scheduled, and each node holds
  the models plan put on a node of its type.
- Refused (gpu_limit below the placement): only the nodes the limit lets Karpenter launch register, and pods stay
  Pending (Unschedulable): the scheduler finds no packing warmstart missed.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass

import pytest
import yaml

from contracts.agent_settings import AGENT_NAMESPACE
from contracts.pod_labels import MODEL_LABEL, vllm_pod_selector
from render import render_workloads
from tests.cluster.add_ons import add_on_daemonsets
from tests.cluster.api import Api
from tests.cluster.crds import crds_for
from tests.cluster.environment import apply_all, rendered_objects, wait_until
from tests.cluster.nodes import gpu_node, pods, register
from tests.fixes import refusals
from tests.placement_cases import CASES
from tests.synth import SHIPPED_ENVIRONMENTS, settings_of
from warmstart.catalog import default_catalog
from warmstart.checks.fix import apply_fix
from warmstart.config.environment import EnvironmentConfig
from warmstart.loader import parse_config
from warmstart.node_model import node_shape, warmstart_pods
from warmstart.placement import Placement, needed_placement

pytestmark = pytest.mark.control_plane

BUDGET = "compute.gpu_pool.gpu_limit"
MODEL_WORKLOAD_KINDS = {"Deployment", "HorizontalPodAutoscaler"}


@dataclass(frozen=True)
class Verdict:
    """What warmstart says of a config, and what the scheduler is given: a config to render (a refused one with
    the limit its refusal asks for: the workloads do not depend on it), the placement plan predicts, and the nodes
    Karpenter may launch (a refused config's stop at its own limit)."""

    accepted: bool
    config: EnvironmentConfig
    placement: Placement
    nodes: list[str]  # instance types, in placement order


def verdict(settings: dict) -> Verdict:
    catalog = default_catalog()
    problems = refusals(settings, catalog)
    limit = settings["compute"]["gpu_pool"]["gpu_limit"]
    if problems:
        (budget,) = problems
        assert budget.field == BUDGET, budget
        settings = apply_fix(settings, budget.fixes[0])
    config = parse_config(copy.deepcopy(settings))
    placement = needed_placement(config, catalog, ())
    nodes, gpus = [], 0
    for node in placement.nodes:
        if gpus + node.shape.instance.gpu_count > limit:
            break
        nodes.append(node.instance_type)
        gpus += node.shape.instance.gpu_count
    return Verdict(not problems, config, placement, nodes)


@pytest.fixture(scope="module")
def plane(start_module_plane, synthesized_env, tmp_path_factory):
    """A plane per shipped environment, started when a case first needs it, with that environment's cluster objects
    (warmstart-system, its DaemonSets and admission policies, the pool) and the add-ons' DaemonSets applied; the
    models' workloads come with each case."""
    planes: dict[str, tuple[Api, EnvironmentConfig]] = {}

    def get(environment: str) -> tuple[Api, EnvironmentConfig]:
        if environment not in planes:
            synthesized = synthesized_env(environment)
            api = Api(start_module_plane(controllers=True))
            models = {m.name for m in synthesized.config.models}
            cluster_objects = [
                o
                for o in rendered_objects(synthesized, tmp_path_factory.mktemp("dist"))
                if not (o["kind"] in MODEL_WORKLOAD_KINDS and o["metadata"].get("namespace") in models)
            ]
            problems = apply_all(
                api, cluster_objects + add_on_daemonsets(), crds_for(synthesized.config), dry_run_first=False
            )
            assert not problems, problems
            planes[environment] = (api, synthesized.config)
        return planes[environment]

    return get, tmp_path_factory


# Each config, with the shipped environment whose cluster objects it runs beside (the edge configs are prod's).
CONFIGS = {f"shipped-{name}": (name, lambda name=name: settings_of(name)) for name in SHIPPED_ENVIRONMENTS} | {
    case.name: ("prod", case.settings) for case in CASES
}
EXPECTED = {case.name: case.accepted for case in CASES}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_the_scheduler_places_exactly_what_warmstart_accepts(plane, name):
    get, tmp_path_factory = plane
    environment, settings = CONFIGS[name]
    api, base = get(environment)
    judged = verdict(settings())
    assert judged.accepted == EXPECTED.get(name, True)
    config = judged.config
    # The DaemonSets applied are the environment's: the case's must take the same from each node.
    assert Counter(d.requests for d in warmstart_pods(config)) == Counter(d.requests for d in warmstart_pods(base))
    nodes = _launch(api, name, judged, config)
    try:
        replicas = {m.name: m.most_replicas + (1 if config.compute.gpu_pool.surge else 0) for m in config.models}
        _apply_workloads(api, config, replicas, tmp_path_factory.mktemp(name))
        outcome = _settle(api, replicas)
        placed = [p for ps in outcome.values() for p in ps if p["spec"].get("nodeName")]
        waiting = [p["metadata"]["name"] for ps in outcome.values() for p in ps if not p["spec"].get("nodeName")]
        if judged.accepted:
            assert not waiting, f"{name}: accepted, but {waiting} stayed Pending"
            on_nodes = Counter(
                (
                    nodes[n],
                    tuple(sorted(p["metadata"]["labels"][MODEL_LABEL] for p in placed if p["spec"]["nodeName"] == n)),
                )
                for n in nodes
            )
            predicted = Counter(
                (node.instance_type, tuple(sorted(p.model for p in node.pods))) for node in judged.placement.nodes
            )
            assert on_nodes == predicted, f"{name}: the scheduler placed {on_nodes}, plan predicted {predicted}"
        else:
            assert waiting, f"{name}: refused, but the scheduler placed every pod on {len(nodes)} nodes"
    finally:
        _clean_up(api, config, list(nodes))


def _launch(api: Api, name: str, judged: Verdict, config: EnvironmentConfig) -> dict[str, str]:
    """The nodes, each with its DaemonSets' pods bound before any model pod comes."""
    zones = config.network.zones
    nodes = {f"{name}-{i}": instance_type for i, instance_type in enumerate(judged.nodes)}
    for i, (node, instance_type) in enumerate(nodes.items()):
        register(api, *gpu_node(node, instance_type, zone=zones[i % len(zones)], mode=config.compute.mode))
    catalog = default_catalog()
    expected = {n: len(node_shape(catalog.instance(t), config).daemonsets) for n, t in nodes.items()}

    def daemonsets_bound() -> bool:
        bound = Counter(
            p["spec"].get("nodeName")
            for namespace in (AGENT_NAMESPACE, "kube-system")
            for p in pods(api, namespace)
            if p["spec"].get("nodeName") in nodes
        )
        return all(bound[n] == count for n, count in expected.items())

    wait_until(daemonsets_bound, timeout=60, what=f"{name}: every node's DaemonSet pods bound")
    return nodes


def _apply_workloads(api: Api, config: EnvironmentConfig, replicas: dict[str, int], outdir) -> None:
    objects = [
        o
        for path in render_workloads(config, outdir)
        for o in yaml.safe_load_all(path.read_text())
        if o and o["kind"] != "HorizontalPodAutoscaler" and o["kind"] != "Kustomization"
    ]
    for obj in objects:
        if obj["kind"] == "Deployment":
            obj["spec"]["replicas"] = replicas[obj["metadata"]["namespace"]]
    assert not apply_all(api, objects, [], dry_run_first=False)


def _settle(api: Api, replicas: dict[str, int]) -> dict[str, list[dict]]:
    """Every model pod created, and each either bound or found Unschedulable by the scheduler."""

    def decided(pod: dict) -> bool:
        if pod["spec"].get("nodeName"):
            return True
        conditions = pod.get("status", {}).get("conditions", [])
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)

    def outcome() -> dict[str, list[dict]]:
        return {model: pods(api, model, vllm_pod_selector()) for model in replicas}

    try:
        wait_until(
            lambda: all(len(ps) == replicas[m] and all(map(decided, ps)) for m, ps in outcome().items()),
            timeout=90,
            what="every model pod scheduled or found unschedulable",
        )
    except TimeoutError as error:
        sets = {m: api.get(f"/apis/apps/v1/namespaces/{m}/replicasets")["items"] for m in replicas}
        found = {m: [(p["metadata"]["name"], p.get("status")) for p in ps] for m, ps in outcome().items()}
        raise AssertionError(
            f"{error}: pods {found}; replica sets {[r.get('status') for rs in sets.values() for r in rs]}"
        ) from None
    return outcome()


def _clean_up(api: Api, config: EnvironmentConfig, nodes: list[str]) -> None:
    for model in config.models:
        api.request("DELETE", f"/apis/apps/v1/namespaces/{model.name}/deployments/vllm")
        for pod in pods(api, model.name):
            api.request(
                "DELETE", f"/api/v1/namespaces/{model.name}/pods/{pod['metadata']['name']}?gracePeriodSeconds=0"
            )
    for node in nodes:
        api.request("DELETE", f"/api/v1/nodes/{node}")
    for namespace in (AGENT_NAMESPACE, "kube-system"):
        for pod in pods(api, namespace):
            if pod["spec"].get("nodeName") in nodes:
                _delete_pod(api, pod)
    wait_until(lambda: not any(pods(api, m.name) for m in config.models), timeout=60, what="the models' pods gone")


def _delete_pod(api: Api, pod: dict) -> None:
    """At once, as kubelet would confirm it (no kubelet runs here)."""
    meta = pod["metadata"]
    api.request("DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}?gracePeriodSeconds=0")
