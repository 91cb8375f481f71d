"""Upgrades the API server could refuse: an environment applied, then the same environment with one setting changed,
applied over it (server-side dry run against what is stored, so CRD transition rules such as Karpenter's immutable
`nodeClassRef.group`/`kind` run, then the apply itself).

The first real-server run found the compute-mode switch refused: one NodePool name for both modes, whose node
classes differ in group and kind. Each mode now has its own NodePool (kube/gpu_nodes.gpu_node_pool_name), and the
last test shows the refusal the old name would still meet. Both pools then coexist (CDK's kubectl prune leaves
custom resources alone), which is what a side-by-side migration needs and why `make deploy` refuses an in-place
mode switch (warmstart_cli.preflight.compute_mode_problem, tests/infra/test_deploy_preflight.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import yaml

from kube.gpu_nodes import gpu_node_pool_name
from tests.cluster.api import Api, in_order
from tests.cluster.crds import auto_mode_node_class_crd, karpenter_crds
from tests.cluster.environment import apply_all, object_name, rendered_objects
from tests.cluster.keda import keda_crds
from tests.synth import ROOT, synthesize
from warmstart.loader import parse_config

pytestmark = pytest.mark.control_plane


def _to_auto(raw: dict) -> None:
    pool = {k: v for k, v in raw["compute"]["gpu_pool"].items() if k not in ("capacity_reservations",)}
    pool["capacity_types"] = [t for t in pool.get("capacity_types", ["on-demand"]) if t != "reserved"] or ["on-demand"]
    raw["compute"] = {"mode": "auto", "gpu_pool": pool, "ephemeral_storage_gib": 80}
    raw["image_preload"] = {"mode": "prepull"}


def _to_karpenter(raw: dict) -> None:
    raw["compute"] = {"mode": "karpenter", "gpu_pool": raw["compute"]["gpu_pool"]}


def _first_model(change: Callable[[dict], None]) -> Callable[[dict], None]:
    return lambda raw: change(raw["models"][0])


# Each change a user makes to a deployed environment that touches what the server stores.
CHANGES: dict[str, dict[str, Callable[[dict], object]]] = {
    "prod": {
        "compute mode karpenter -> auto": _to_auto,
        "tensor parallel size": _first_model(lambda m: m.update(tensor_parallel_size=4)),
        "serving image": _first_model(lambda m: m.update(image="vllm/vllm-openai:v0.21.0")),
        "weights cache off": lambda raw: raw["caches"].update(weights=False),
        "Bottlerocket with image snapshots": lambda raw: (
            raw["compute"].update(ami_alias="bottlerocket@v1.57.0"),
            raw.update(image_preload={"mode": "snapshot"}),
        ),
        "autoscaling off": lambda raw: raw["models"][1].pop("autoscaling") and raw["models"][1].update(replicas=2),
        "pool instance types": lambda raw: raw["compute"]["gpu_pool"].update(
            instance_types=["p5.48xlarge", "p5e.48xlarge"]
        ),
    },
    "dev": {
        "compute mode auto -> karpenter": _to_karpenter,
        "model context length": _first_model(lambda m: m.update(max_model_len=16384)),
        "weights cache on": lambda raw: raw["caches"].update(weights=True),
    },
    # An existing cluster keeps its own compute mode (warmstart never switches it): the changes a team makes there.
    "existing": {
        "tensor parallel size": _first_model(lambda m: m.update(tensor_parallel_size=4)),
        "serving image": _first_model(lambda m: m.update(image="vllm/vllm-openai:v0.21.0")),
        "weights cache off": lambda raw: raw["caches"].update(weights=False),
        "node security groups": lambda raw: raw["cluster"]["existing"].update(node_security_group_ids=[]),
    },
}
# The environments whose first change switches the compute mode (a cluster warmstart created); an existing
# cluster's mode is the cluster's own, which warmstart never switches.
MODE_SWITCHES = ("prod", "dev")


def _changed(env: str, change: Callable[[dict], None]):
    raw = yaml.safe_load((ROOT / "config" / f"{env}.yaml").read_text())
    change(raw)
    return parse_config(raw, source=f"{env}, changed")


def _crds_for_both_modes(config) -> list[dict]:
    """What a cluster serves once either mode ran on it (Auto Mode's NodeClass beside Karpenter's CRDs), and KEDA's
    where a model autoscales (its chart keeps them)."""
    version = getattr(config.compute, "karpenter_version", None) or "1.14.1"
    keda = keda_crds() if any(model.autoscaling for model in config.models) else []
    return [*karpenter_crds(version), auto_mode_node_class_crd(), *keda]


@pytest.fixture(scope="module")
def deployed(shipped, start_module_plane, tmp_path_factory):
    api = Api(start_module_plane())
    objects = rendered_objects(shipped, tmp_path_factory.mktemp("dist"))
    assert not apply_all(api, objects, _crds_for_both_modes(shipped.config))
    return shipped, api


def test_every_change_applies_over_the_deployed_environment(deployed, tmp_path_factory):
    shipped, api = deployed
    refused = {}
    for name, change in CHANGES[shipped.name].items():
        config = _changed(shipped.name, change)
        synthesized = synthesize(config, tmp_path_factory.mktemp("cdk"), f"{shipped.name}-changed")
        objects = rendered_objects(synthesized, tmp_path_factory.mktemp("dist"))
        for obj in in_order(objects):
            answer = api.apply(obj, dry_run=True)
            if not answer.ok:
                refused.setdefault(name, []).append(f"{object_name(obj)}: {answer.message}")
    assert not refused, refused


@pytest.mark.parametrize("shipped", MODE_SWITCHES, indirect=True, scope="module")
def test_the_other_modes_pool_applies_beside_the_deployed_one_and_both_stay(deployed, tmp_path_factory):
    shipped, api = deployed
    (name, change), *_ = CHANGES[shipped.name].items()
    config = _changed(shipped.name, change)
    objects = rendered_objects(
        synthesize(config, tmp_path_factory.mktemp("cdk"), "switched"), tmp_path_factory.mktemp("d")
    )
    assert not apply_all(api, objects, []), name
    pools = {p["metadata"]["name"] for p in api.get("/apis/karpenter.sh/v1/nodepools")["items"]}
    assert pools == {gpu_node_pool_name(shipped.config.compute.mode), gpu_node_pool_name(config.compute.mode)}


@pytest.mark.parametrize("shipped", MODE_SWITCHES, indirect=True, scope="module")
def test_under_one_name_the_server_refuses_the_switch(deployed, tmp_path_factory):
    """Why the pools have a name per mode: Karpenter's CEL rule on nodeClassRef, run by the real server."""
    shipped, api = deployed
    (_, change), *_ = CHANGES[shipped.name].items()
    config = _changed(shipped.name, change)
    objects = rendered_objects(
        synthesize(config, tmp_path_factory.mktemp("cdk"), "one-name"), tmp_path_factory.mktemp("d")
    )
    (pool,) = [copy.deepcopy(o) for o in objects if o["kind"] == "NodePool"]
    pool["metadata"]["name"] = gpu_node_pool_name(shipped.config.compute.mode)
    answer = api.apply(pool, dry_run=True)
    assert not answer.ok
    assert "nodeClassRef.group is immutable" in answer.message or "immutable" in answer.message, answer.message
