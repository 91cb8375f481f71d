"""Where every model's pods could run in the GPU pool, and so how many node GPUs the pool must allow.

Karpenter's gpu_limit counts the GPUs of whole nodes. Replicas of different models may share a node (a TP 2 and a
TP 4 pod on one 8-GPU node); replicas of one model may not, where its spread constraint keeps them on separate
nodes (required pod anti-affinity on `kubernetes.io/hostname`: from two replicas up). The pods are placed the way
Karpenter's scheduler packs them: largest first, each on the first node with room of a type the model may use, else
on a new node of the smallest such type that holds it. Room is what the node model says a node offers the models'
pods (warmstart/node_model.py: Karpenter's allocatable less every DaemonSet's requests), never the instance's full
CPU and memory. The placement is a bound the scheduler can meet, not an optimum: a config is refused only when this
placement does not fit the limit.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import ModelSpec
from warmstart.node_model import DaemonSetPod, NodeShape, Resources, node_shape
from warmstart.sizing import SizingError, candidate_instances, default_requests, derived_tensor_parallel_size


@dataclass(frozen=True)
class Pod:
    model: str
    gpus: int
    requests: Resources
    types: tuple[str, ...]
    spread: bool  # replicas of the model on separate nodes


@dataclass
class Node:
    shape: NodeShape
    pods: list[Pod] = field(default_factory=list)
    # Running totals, so that a placement of thousands of pods stays linear in the nodes it scans.
    gpus: int = 0
    requests: Resources = Resources(0, 0)
    models: set[str] = field(default_factory=set)

    @property
    def instance_type(self) -> str:
        return self.shape.instance.instance_type

    def holds(self, pod: Pod) -> bool:
        return (
            self.gpus + pod.gpus <= self.shape.instance.gpu_count
            and self.shape.for_models.holds(self.requests + pod.requests)
            and self.instance_type in pod.types
            and not (pod.spread and pod.model in self.models)
        )

    def add(self, pod: Pod) -> None:
        self.pods.append(pod)
        self.gpus += pod.gpus
        self.requests += pod.requests
        self.models.add(pod.model)


@dataclass(frozen=True)
class Placement:
    nodes: tuple[Node, ...]

    @property
    def gpus(self) -> int:
        """Node GPUs the placement holds (what gpu_limit counts)."""
        return sum(node.shape.instance.gpu_count for node in self.nodes)

    @property
    def overfull(self) -> bool:
        """A node holds a pod no node of its types has room for (the per-pod rule refuses such a config)."""
        return any(not n.shape.for_models.holds(n.requests) or n.gpus > n.shape.instance.gpu_count for n in self.nodes)

    def describe(self) -> str:
        """'2 x p5.48xlarge (qwen x1 + llama x1), 1 x p5.48xlarge (llama x1)': nodes grouped by what they run."""
        shapes = Counter(
            (
                node.instance_type,
                " + ".join(f"{m} x{n}" for m, n in sorted(Counter(p.model for p in node.pods).items())),
            )
            for node in self.nodes
        )
        return ", ".join(f"{count} x {kind} ({pods})" for (kind, pods), count in shapes.items())

    def describe_nodes(self) -> str:
        """What each node type of the placement offers the models' pods, and why: '...; p5.48xlarge: 191.2 CPU,
        ...'"""
        return "; ".join(shape.describe() for shape in {n.instance_type: n.shape for n in self.nodes}.values())


def model_pods(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog, count: int) -> list[Pod]:
    instances = candidate_instances(model, config, catalog)
    try:
        tensor_parallel_size = derived_tensor_parallel_size(model, config, catalog)
    except SizingError:  # refused by its own rule; here it takes a whole node of the largest type
        tensor_parallel_size = max(i.gpu_count for i in instances)
    default_cpu, default_memory = default_requests(instances, tensor_parallel_size)
    pod = Pod(
        model=model.name,
        gpus=tensor_parallel_size,
        requests=Resources.of_pod(model.cpu or default_cpu, model.memory_gib or default_memory),
        types=tuple(i.instance_type for i in instances),
        spread=model.least_replicas >= 2,
    )
    return [pod] * count


def place(
    pods: list[Pod], config: EnvironmentConfig, catalog: Catalog, others: tuple[DaemonSetPod, ...] = ()
) -> Placement:
    nodes: list[Node] = []
    for pod in sorted(pods, key=lambda p: (-p.gpus, -p.requests.memory_mib, -p.requests.cpu_millis, p.model)):
        node = next((n for n in nodes if n.holds(pod)), None)
        if node is None:
            fitting = sorted(
                (node_shape(catalog.instance(t), config, others) for t in pod.types),
                key=lambda s: (s.instance.gpu_count, s.instance.memory_gib, s.instance.instance_type),
            )
            # A pod no type holds is refused by the per-pod rule; here it takes a node of the largest type.
            node = next((Node(s) for s in fitting if Node(s).holds(pod)), Node(fitting[-1]))
            nodes.append(node)
        node.add(pod)
    return Placement(tuple(nodes))


def steady_placement(config: EnvironmentConfig, catalog: Catalog, others: tuple[DaemonSetPod, ...] = ()) -> Placement:
    """Every model at its most replicas (an autoscaled one at max_replicas)."""
    pods = [pod for m in config.models for pod in model_pods(m, config, catalog, m.most_replicas)]
    return place(pods, config, catalog, others)


# The last placements computed, with the configs they were computed for (held, so that an id is never reused
# while it is a key): every model's plan asks for the same environment's placement.
_RECENT: OrderedDict[tuple[int, int], tuple[EnvironmentConfig, Catalog, Placement]] = OrderedDict()
_RECENT_SIZE = 8


def rollout_placement(config: EnvironmentConfig, catalog: Catalog) -> Placement:
    key = (id(config), id(catalog))
    if key in _RECENT:
        _RECENT.move_to_end(key)
        return _RECENT[key][2]
    placement = _rollout_placement(config, catalog)
    _RECENT[key] = (config, catalog, placement)
    if len(_RECENT) > _RECENT_SIZE:
        _RECENT.popitem(last=False)
    return placement


def models_inside_pool(config: EnvironmentConfig) -> bool:
    """Every model's instance types are the pool's: only then is there one placement to compute."""
    pool = config.compute.gpu_pool.instance_types
    return all(t in pool for m in config.models for t in (m.instance_types or []))


def needed_placement(config: EnvironmentConfig, catalog: Catalog, others: tuple[DaemonSetPod, ...]) -> Placement:
    """What gpu_limit must hold with `others` on every node too: the rollout placement with surge, else steady."""
    if config.compute.gpu_pool.surge:
        return _rollout_placement(config, catalog, others)
    return steady_placement(config, catalog, others)


def _rollout_placement(config: EnvironmentConfig, catalog: Catalog, others: tuple[DaemonSetPod, ...] = ()) -> Placement:
    """The steady placement with the extra pod each model's rollout starts first (surge), all at once: a deploy
    applies one model stack after another without waiting for their rollouts, so a new image rolls every model
    while the ones before it still surge."""
    pods = [pod for m in config.models for pod in model_pods(m, config, catalog, m.most_replicas + 1)]
    return place(pods, config, catalog, others)
