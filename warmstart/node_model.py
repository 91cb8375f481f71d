"""What a GPU node of the pool offers the models' pods: the one node model the GPU budget, the per-pod request rule
and `warmstart plan` share.

A node offers its allocatable, not its instance's CPU and memory, and every DaemonSet on it takes its requests
before a model's pod is placed. Allocatable is what Karpenter's scheduler takes a new node to have (it launches a
node only for pods that fit that), from its own formulas (aws/karpenter-provider-aws v1.14.1,
pkg/providers/instancetype/types.go: `memory`, `kubeReservedResources`, `evictionThreshold`, `pods`):

- memory: the instance's MiB less the VM overhead, ceil(MiB x 0.075) (`--vm-memory-overhead-percent`'s default,
  which Karpenter uses until it has seen a node of the type and then takes that node's own capacity);
- kube-reserved: memory 11 MiB x maxPods + 255 MiB; CPU 6% of the first core, 1% of the second, 0.5% of the
  third and fourth, 0.25% of the rest;
- the hard eviction threshold: 100 MiB of memory;
- maxPods: the ENI-limited count of the type (its default network card's interfaces x (IPv4 addresses - 1) + 2),
  the catalog's max_pods, from Karpenter's generated reference; karpenter_instance_types.json records the
  allocatable that reference lists, which tests/unit/test_node_model.py holds these formulas to.

AL2023 and Bottlerocket differ only in whether kube-reserved memory counts the ENI-limited or the configured
maxPods; warmstart sets no maxPods, so both read the same figure. EKS Auto Mode runs Karpenter inside EKS and does
not publish its reserves (only that it caps maxPods at 110 after the ENI-limited count, EKS user guide): warmstart
takes the same formulas with kube-reserved memory for the larger of the two counts, the conservative side.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from contracts.agent_settings import AGENT_MEMORY_GIB
from warmstart.catalog import GpuInstance
from warmstart.config.environment import EnvironmentConfig
from warmstart.node_caches import runs_node_agent, serving_images
from warmstart.node_os.base import NodeOs

INSTANCE_TYPES_FILE = Path(__file__).with_name("karpenter_instance_types.json")
MIB_PER_GIB = 1024
VM_MEMORY_OVERHEAD = 0.075
EVICTION_HARD_MEMORY_MIB = 100
# (from, to, share) in millicores: kube-reserved CPU by tier.
CPU_RESERVE_TIERS = ((0, 1000, 0.06), (1000, 2000, 0.01), (2000, 4000, 0.005), (4000, 1 << 31, 0.0025))


@dataclass(frozen=True, order=True)
class Resources:
    """CPU in millicores and memory in MiB: whole units, as Kubernetes compares them."""

    cpu_millis: int
    memory_mib: int

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_millis + other.cpu_millis, self.memory_mib + other.memory_mib)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_millis - other.cpu_millis, self.memory_mib - other.memory_mib)

    def holds(self, other: Resources) -> bool:
        return other.cpu_millis <= self.cpu_millis and other.memory_mib <= self.memory_mib

    @property
    def whole_cpus(self) -> int:
        return self.cpu_millis // 1000

    @property
    def whole_gib(self) -> int:
        return self.memory_mib // MIB_PER_GIB

    def describe(self) -> str:
        """'191.2 CPU, 1891.9 GiB'"""
        return f"{_trimmed(self.cpu_millis / 1000, 3)} CPU, {_trimmed(self.memory_mib / MIB_PER_GIB, 1)} GiB"

    @classmethod
    def of_pod(cls, cpu: float, memory_gib: float) -> Resources:
        return cls(round(cpu * 1000), round(memory_gib * MIB_PER_GIB))


def _trimmed(value: float, digits: int) -> str:
    text = f"{math.floor(value * 10**digits) / 10**digits:.{digits}f}"
    return text.rstrip("0").rstrip(".")


@dataclass(frozen=True)
class DaemonSetPod:
    """The pod a DaemonSet runs on every GPU node, with its requests (the larger of its init containers' and
    the sum of its containers')."""

    name: str
    requests: Resources
    source: str


# warmstart's own: the rendered charts request these (tests/infra/test_node_model_manifests.py holds every
# rendered DaemonSet that runs on a GPU node to this list).
AGENT_POD = DaemonSetPod(
    "warmstart-system/warmstart-agent", Resources(100, AGENT_MEMORY_GIB * MIB_PER_GIB), "node_agent/chart.py"
)
PREPULL_REQUESTS = Resources(1, 16)


@dataclass(frozen=True)
class InstanceFigures:
    """Karpenter's figures for one instance type (karpenter_instance_types.json)."""

    vcpus: int
    memory_mib: int
    gpus: int
    max_pods: int
    allocatable_cpu_millis: int
    allocatable_memory_mib: int
    labels: dict[str, str]  # its karpenter.k8s.aws/ labels, as Karpenter puts them on the node


@lru_cache(maxsize=1)
def karpenter_figures() -> dict[str, InstanceFigures]:
    table = json.loads(INSTANCE_TYPES_FILE.read_text())
    return {name: InstanceFigures(**figures) for name, figures in table["instance_types"].items()}


def kube_reserved_cpu_millis(vcpus: int) -> int:
    cpu = vcpus * 1000
    reserved = 0
    for start, end, share in CPU_RESERVE_TIERS:
        if cpu >= start:
            reserved += int((min(cpu, end) - start) * share)
    return reserved


def kube_reserved_memory_mib(max_pods: int) -> int:
    return 11 * max_pods + 255


def vm_memory_mib(memory_mib: int) -> int:
    """The memory Karpenter takes a node of the type to boot with (capacity)."""
    return memory_mib - math.ceil(memory_mib * VM_MEMORY_OVERHEAD)


def karpenter_allocatable(vcpus: int, memory_mib: int, max_pods: int) -> Resources:
    return Resources(
        vcpus * 1000 - kube_reserved_cpu_millis(vcpus),
        vm_memory_mib(memory_mib) - kube_reserved_memory_mib(max_pods) - EVICTION_HARD_MEMORY_MIB,
    )


def max_pods(instance: GpuInstance, node_os: NodeOs) -> int:
    return node_os.kube_reserved_pods(instance.max_pods)


def capacity(instance: GpuInstance) -> Resources:
    """What the node reports as capacity, as Karpenter predicts it."""
    return Resources(instance.vcpus * 1000, vm_memory_mib(instance.memory_gib * MIB_PER_GIB))


def allocatable(instance: GpuInstance, node_os: NodeOs) -> Resources:
    return karpenter_allocatable(instance.vcpus, instance.memory_gib * MIB_PER_GIB, max_pods(instance, node_os))


# The add-ons on a Karpenter-mode GPU node, from their published manifests (read 2026-12-06; docs/upstream-facts.md,
# Karpenter). Each tolerates every taint but the device plugin, which warmstart installs with the pool's
# tolerations (kube/gpu_nodes.py device_plugin_placement). Auto Mode runs none of them as pods: their manifests
# exclude `eks.amazonaws.com/compute-type: auto` nodes, and the GPU plugin is part of its node.
ADD_ON_PODS = (
    DaemonSetPod(
        "kube-system/aws-node",
        Resources(50, 0),
        "aws/amazon-vpc-cni-k8s v1.23.0 config/master/aws-k8s-cni.yaml: aws-node and aws-eks-nodeagent 25m each",
    ),
    DaemonSetPod(
        "kube-system/kube-proxy",
        Resources(100, 0),
        "EKS add-on as eksctl-io/eksctl pkg/addons/default/testdata/sample-1.25.json captured it (AWS publishes no "
        "manifest): 100m",
    ),
    DaemonSetPod(
        "kube-system/eks-pod-identity-agent",
        Resources(0, 0),
        "aws/eks-pod-identity-agent v0.1.37 charts/eks-pod-identity-agent (chart 1.2.0): resources {}",
    ),
    DaemonSetPod(
        "kube-system/nvidia-device-plugin",
        Resources(0, 0),
        "NVIDIA/k8s-device-plugin v0.19.0 deployments/helm/nvidia-device-plugin values.yaml: resources {}",
    ),
)


def add_on_pods(node_os: NodeOs) -> tuple[DaemonSetPod, ...]:
    """The add-ons' DaemonSet pods on a GPU node: with Karpenter the cluster's VPC CNI, kube-proxy and Pod Identity
    agent and the NVIDIA device plugin run as pods; Auto Mode runs them inside the node, as no pod."""
    return ADD_ON_PODS if node_os.add_ons_as_pods else ()


def warmstart_pods(config: EnvironmentConfig) -> tuple[DaemonSetPod, ...]:
    """warmstart's DaemonSets on every GPU node: the node agent (where a model uses a node cache) and one image
    cache per serving image (where images are prepulled)."""
    pods = [AGENT_POD] if runs_node_agent(config) else []
    if config.image_preload.strategy.prepulls:
        pods += [
            DaemonSetPod(f"warmstart-system/image-cache ({image})", PREPULL_REQUESTS, "image_preload/prepull_chart.py")
            for image in serving_images(config)
        ]
    return tuple(pods)


@dataclass(frozen=True)
class NodeShape:
    """One GPU node of an instance type: what it offers the models' pods once its DaemonSets run."""

    instance: GpuInstance
    allocatable: Resources
    daemonsets: tuple[DaemonSetPod, ...]

    @property
    def daemonset_requests(self) -> Resources:
        return sum((d.requests for d in self.daemonsets), Resources(0, 0))

    @property
    def for_models(self) -> Resources:
        return self.allocatable - self.daemonset_requests

    def offers(self) -> str:
        """'191.199 CPU, 1891.9 GiB for models (allocatable 191.45 CPU, 1892.9 GiB, less 6 DaemonSet pods' 0.251
        CPU, 1 GiB)'"""
        return (
            f"{self.for_models.describe()} for models (allocatable {self.allocatable.describe()}, less "
            f"{len(self.daemonsets)} DaemonSet pods' {self.daemonset_requests.describe()})"
        )

    def describe(self) -> str:
        return f"{self.instance.instance_type}: {self.offers()}"


def node_shape(instance: GpuInstance, config: EnvironmentConfig, others: tuple[DaemonSetPod, ...] = ()) -> NodeShape:
    """`others`: DaemonSet pods found beyond the model's (an existing cluster's own, which make preflight reads)."""
    node_os = config.compute.node_os
    return NodeShape(
        instance=instance,
        allocatable=allocatable(instance, node_os),
        daemonsets=add_on_pods(node_os) + warmstart_pods(config) + others,
    )
