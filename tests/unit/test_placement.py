"""The GPU pool's placement: replicas of different models share nodes, replicas of one model spread, and the node
GPUs it holds are what gpu_limit must allow."""

from __future__ import annotations

import pytest

from tests.fixes import refused
from tests.placement_cases import CASES
from tests.synth import ROOT
from warmstart.loader import load_config, parse_config
from warmstart.node_model import Resources
from warmstart.placement import Pod, place, rollout_placement, steady_placement

PROD = load_config(ROOT / "config" / "prod.yaml")


def _pod(model: str, gpus: int, *, types=("p5.48xlarge",), spread=True, cpu=1.0, memory=1.0) -> Pod:
    return Pod(model=model, gpus=gpus, requests=Resources.of_pod(cpu, memory), types=tuple(types), spread=spread)


def _place(pods, catalog):
    return place(pods, PROD, catalog)


def test_different_models_share_a_node_and_one_models_replicas_spread(catalog):
    pods = [_pod("a", 4)] * 2 + [_pod("b", 2)] * 2 + [_pod("c", 2)] * 2
    placement = _place(pods, catalog)
    assert placement.gpus == 16  # two 8-GPU nodes: a + b + c on each
    assert placement.describe() == "2 x p5.48xlarge (a x1 + b x1 + c x1)"


def test_without_spread_replicas_share_a_node(catalog):
    placement = _place([_pod("a", 2, spread=False)] * 4, catalog)
    assert placement.gpus == 8 and placement.describe() == "1 x p5.48xlarge (a x4)"


def test_memory_and_cpu_keep_pods_apart_where_gpus_would_not(catalog):
    p5 = catalog.instance("p5.48xlarge")
    heavy = [_pod("a", 2, memory=p5.memory_gib * 0.6), _pod("b", 2, memory=p5.memory_gib * 0.6)]
    assert _place(heavy, catalog).gpus == 16
    busy = [_pod("a", 2, cpu=p5.vcpus * 0.6), _pod("b", 2, cpu=p5.vcpus * 0.6)]
    assert _place(busy, catalog).gpus == 16


def test_a_new_node_is_the_smallest_type_that_holds_the_pod_and_the_model_may_use(catalog):
    types = ("g6e.xlarge", "g6e.12xlarge", "g6e.48xlarge")
    full = _place([_pod("a", 1, types=types), _pod("b", 4, types=types)], catalog)
    assert full.describe() == "1 x g6e.12xlarge (b x1), 1 x g6e.xlarge (a x1)"  # largest first; b fills its node
    shared = _place([_pod("a", 1, types=types), _pod("b", 2, types=types)], catalog)
    assert shared.describe() == "1 x g6e.12xlarge (a x1 + b x1)"
    only_large = _place([_pod("a", 1, types=("g6e.48xlarge",)), _pod("b", 1, types=("g6e.xlarge",))], catalog)
    assert only_large.describe() == "1 x g6e.48xlarge (a x1), 1 x g6e.xlarge (b x1)"


def test_prod_holds_32_gpus_and_40_with_every_rollout_pod(catalog):
    """llama-3-3-70b: TP 4, up to 4 replicas; qwen3-6-35b-a3b: TP 2, 2 replicas; p5.48xlarge has 8 GPUs."""
    prod = load_config(ROOT / "config" / "prod.yaml")
    assert steady_placement(prod, catalog).describe() == (
        "2 x p5.48xlarge (llama-3-3-70b x1 + qwen3-6-35b-a3b x1), 2 x p5.48xlarge (llama-3-3-70b x1)"
    )
    assert (steady_placement(prod, catalog).gpus, rollout_placement(prod, catalog).gpus) == (32, 40)
    # The former bound, a whole node per replica and one spare node: 48 + 8.
    assert rollout_placement(prod, catalog).gpus < 56


def test_a_node_offers_its_allocatable_less_its_daemonsets_not_the_instance(catalog):
    """Two pods that together fit p5.48xlarge's 192 CPUs but not the 191.35 a node offers after kube-reserved and
    the DaemonSets take separate nodes; the same with memory (2048 GiB against 1891.9)."""
    assert _place([_pod("a", 4, cpu=96), _pod("b", 4, cpu=96)], catalog).gpus == 16
    assert _place([_pod("a", 4, cpu=95), _pod("b", 4, cpu=95)], catalog).gpus == 8
    assert _place([_pod("a", 4, memory=1000), _pod("b", 4, memory=1000)], catalog).gpus == 16
    assert _place([_pod("a", 4, memory=945), _pod("b", 4, memory=945)], catalog).gpus == 8


@pytest.mark.parametrize(("cpu", "gpus"), [(None, (16, 24)), (96, (32, 48))])
def test_prod_at_96_cpus_per_pod_needs_a_node_per_pod(catalog, cpu, gpus):
    """prod with both models at TP 4, 2 replicas each: two pods share a p5 at the default 72 CPUs; at cpu: 96 they
    would need 192 CPUs, and a node offers 191.35, so each pod takes a node (steady, and with every rollout pod)."""
    models = [
        m.model_copy(update={"cpu": cpu, "tensor_parallel_size": 4, "replicas": 2, "autoscaling": None})
        for m in PROD.models
    ]
    config = PROD.model_copy(update={"models": models})
    assert (steady_placement(config, catalog).gpus, rollout_placement(config, catalog).gpus) == gpus


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_edge_configs_verdicts(case, catalog):
    """Accepted exactly when the placement on the node model fits gpu_limit; a refusal names the limit the
    placement needs, with what a node offers, and its fix is checked to be accepted (tests/fixes.py)."""
    if case.accepted:
        parse_config(case.settings())
        return
    problems = refused(case.settings(), catalog)
    (budget,) = [p for p in problems if p.field == "compute.gpu_pool.gpu_limit"]
    assert "for models (allocatable" in budget.message, budget.message
    assert [p.field for p in problems] == ["compute.gpu_pool.gpu_limit"]
