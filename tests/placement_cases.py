"""Configs at the edges of the GPU budget: warmstart's verdict on each (tests/unit/test_placement.py) and the real
scheduler's outcome on the nodes Karpenter would launch for it (tests/cluster/test_placement_verdicts.py) must agree.

Each case is prod's settings (Karpenter, p5.48xlarge: qwen TP 2 x 2 replicas beside llama TP 4 x 2-4 replicas, two
models sharing a node type), changed at one edge: exactly at the limit, one GPU over, fitting only without the
rollout's surge pods, CPU-bound (two pods that need more CPU than a node offers), memory-bound (two pods on
g6e.12xlarge that need more memory than a node offers, the issue's 190 GiB example among them)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from tests.synth import settings_of


@dataclass(frozen=True)
class PlacementCase:
    name: str
    settings: Callable[[], dict]
    accepted: bool


def _prod(gpu_limit: int | None = None, surge: bool = True) -> dict:
    raw = copy.deepcopy(settings_of("prod"))
    pool = raw["compute"]["gpu_pool"]
    if gpu_limit is not None:
        pool["gpu_limit"] = gpu_limit
    pool["surge"] = surge
    return raw


def _cpu_bound(cpu: float, gpu_limit: int) -> dict:
    """Both models at TP 4, 2 replicas each: two pods share a p5 only while their CPUs fit what it offers."""
    raw = _prod(gpu_limit)
    for model in raw["models"]:
        model.pop("autoscaling", None)
        model.update(tensor_parallel_size=4, replicas=2, cpu=cpu)
    return raw


def _memory_bound(memory_gib: int, gpu_limit: int) -> dict:
    """Two models at TP 2, one replica each, on g6e.12xlarge (4 x L40S): both fit one node's GPUs, and its memory
    only while the two requests fit the 350.7 GiB it offers."""
    raw = _prod(gpu_limit, surge=False)
    pool = raw["compute"]["gpu_pool"]
    pool.update(instance_types=["g6e.12xlarge"], capacity_types=["on-demand"])
    pool.pop("capacity_reservations", None)
    for model in raw["models"]:
        model.pop("autoscaling", None)
        model.update(
            size_gb=30, tensor_parallel_size=2, replicas=1, allow_single_replica_downtime=True, memory_gib=memory_gib
        )
    return raw


CASES = [
    # prod's rollout placement holds 40 GPUs: 3 x (llama + qwen), 2 x llama.
    PlacementCase("prod-as-shipped", lambda: _prod(), True),
    PlacementCase("at-the-limit", lambda: _prod(40), True),
    PlacementCase("one-gpu-over", lambda: _prod(39), False),
    PlacementCase("fits-only-without-surge", lambda: _prod(32, surge=False), True),
    PlacementCase("surge-over-the-limit", lambda: _prod(32), False),
    # Two TP 4 pods share a p5 at 95 CPUs each, not at 96 (191.199 offered).
    PlacementCase("cpu-two-per-node", lambda: _cpu_bound(95, 24), True),
    PlacementCase("cpu-one-per-node", lambda: _cpu_bound(96, 48), True),
    PlacementCase("cpu-bound-over-the-limit", lambda: _cpu_bound(96, 40), False),
    PlacementCase("memory-two-per-node", lambda: _memory_bound(175, 4), True),
    PlacementCase("memory-one-per-node", lambda: _memory_bound(176, 8), True),
    PlacementCase("memory-bound-over-the-limit", lambda: _memory_bound(190, 4), False),
]
