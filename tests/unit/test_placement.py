"""The GPU pool's placement: replicas of different models share nodes, replicas of one model spread, and the node
GPUs it holds are what gpu_limit must allow."""

from __future__ import annotations

from tests.synth import ROOT
from warmstart.loader import load_config
from warmstart.placement import Pod, place, rollout_placement, steady_placement


def _pod(model: str, gpus: int, *, types=("p5.48xlarge",), spread=True, cpu=1.0, memory=1.0) -> Pod:
    return Pod(model=model, gpus=gpus, cpu=cpu, memory_gib=memory, types=tuple(types), spread=spread)


def test_different_models_share_a_node_and_one_models_replicas_spread(catalog):
    pods = [_pod("a", 4)] * 2 + [_pod("b", 2)] * 2 + [_pod("c", 2)] * 2
    placement = place(pods, catalog)
    assert placement.gpus == 16  # two 8-GPU nodes: a + b + c on each
    assert placement.describe() == "2 x p5.48xlarge (a x1 + b x1 + c x1)"


def test_without_spread_replicas_share_a_node(catalog):
    placement = place([_pod("a", 2, spread=False)] * 4, catalog)
    assert placement.gpus == 8 and placement.describe() == "1 x p5.48xlarge (a x4)"


def test_memory_and_cpu_keep_pods_apart_where_gpus_would_not(catalog):
    p5 = catalog.instance("p5.48xlarge")
    heavy = [_pod("a", 2, memory=p5.memory_gib * 0.6), _pod("b", 2, memory=p5.memory_gib * 0.6)]
    assert place(heavy, catalog).gpus == 16
    busy = [_pod("a", 2, cpu=p5.vcpus * 0.6), _pod("b", 2, cpu=p5.vcpus * 0.6)]
    assert place(busy, catalog).gpus == 16


def test_a_new_node_is_the_smallest_type_that_holds_the_pod_and_the_model_may_use(catalog):
    types = ("g6e.xlarge", "g6e.12xlarge", "g6e.48xlarge")
    full = place([_pod("a", 1, types=types), _pod("b", 4, types=types)], catalog)
    assert full.describe() == "1 x g6e.12xlarge (b x1), 1 x g6e.xlarge (a x1)"  # largest first; b fills its node
    shared = place([_pod("a", 1, types=types), _pod("b", 2, types=types)], catalog)
    assert shared.describe() == "1 x g6e.12xlarge (a x1 + b x1)"
    only_large = place([_pod("a", 1, types=("g6e.48xlarge",)), _pod("b", 1, types=("g6e.xlarge",))], catalog)
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
