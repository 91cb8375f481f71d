"""The node model: Karpenter's allocatable from its own formulas, held to the figures Karpenter itself publishes for
every catalog type (warmstart/karpenter_instance_types.json, recorded by tests/upstream/record_karpenter_instance_types
.py), and what a node offers the models' pods once its DaemonSets run."""

from __future__ import annotations

import pytest

from tests.synth import ROOT, config_of
from tests.upstream.record_karpenter_instance_types import parse_reference
from warmstart.catalog import default_catalog
from warmstart.loader import load_config
from warmstart.node_model import (
    ADD_ON_PODS,
    AGENT_POD,
    Resources,
    allocatable,
    karpenter_allocatable,
    karpenter_figures,
    kube_reserved_cpu_millis,
    max_pods,
    node_shape,
    warmstart_pods,
)
from warmstart.node_os import AUTO_MODE_OS, karpenter_node_os
from warmstart.sizing import default_requests

CATALOG = default_catalog()
AL2023 = karpenter_node_os("al2023@v20260714")


@pytest.mark.parametrize("instance_type", sorted(CATALOG.instances))
def test_the_formulas_give_karpenters_published_allocatable_for_every_catalog_type(instance_type):
    figures = karpenter_figures()[instance_type]
    instance = CATALOG.instance(instance_type)
    assert (instance.vcpus, instance.memory_gib * 1024, instance.gpu_count, instance.max_pods) == (
        figures.vcpus,
        figures.memory_mib,
        figures.gpus,
        figures.max_pods,
    )
    expected = Resources(figures.allocatable_cpu_millis, figures.allocatable_memory_mib)
    assert karpenter_allocatable(figures.vcpus, figures.memory_mib, figures.max_pods) == expected
    assert allocatable(instance, AL2023) == expected


def test_the_table_covers_the_catalog_and_nothing_else():
    assert sorted(karpenter_figures()) == sorted(CATALOG.instances)


@pytest.mark.parametrize(("vcpus", "reserved"), [(1, 60), (2, 70), (4, 80), (48, 190), (192, 550)])
def test_kube_reserved_cpu_by_tier(vcpus, reserved):
    assert kube_reserved_cpu_millis(vcpus) == reserved


def test_the_issues_figures():
    """p5.48xlarge: about 191.45 CPU and 1893 GiB against the catalog's 192 and 2048; g6e.12xlarge 47.81 and 351.7
    against 48 and 384."""
    p5 = allocatable(CATALOG.instance("p5.48xlarge"), AL2023)
    assert (p5.cpu_millis, round(p5.memory_mib / 1024)) == (191450, 1893)
    g6e = allocatable(CATALOG.instance("g6e.12xlarge"), AL2023)
    assert (g6e.cpu_millis, round(g6e.memory_mib / 1024, 1)) == (47810, 351.7)


def test_auto_mode_reserves_for_at_least_kubelets_110_pods():
    """Auto Mode publishes no figures: the conservative side is the larger kube-reserved memory."""
    small, large = CATALOG.instance("g6e.xlarge"), CATALOG.instance("g5.12xlarge")
    assert max_pods(small, AL2023) == 58 and max_pods(small, AUTO_MODE_OS) == 110
    assert max_pods(large, AUTO_MODE_OS) == max_pods(large, AL2023) == 737
    assert allocatable(small, AL2023).memory_mib - allocatable(small, AUTO_MODE_OS).memory_mib == 11 * (110 - 58)
    bottlerocket = karpenter_node_os("bottlerocket@v1.57.0")  # the ENI-limited count too, while no maxPods is set
    assert all(max_pods(CATALOG.instance(t), bottlerocket) == CATALOG.instance(t).max_pods for t in CATALOG.instances)


def test_a_node_offers_allocatable_less_every_daemonset_pod():
    prod = load_config(ROOT / "config" / "prod.yaml")
    shape = node_shape(CATALOG.instance("p5.48xlarge"), prod)
    assert shape.daemonsets == ADD_ON_PODS + warmstart_pods(prod)
    assert shape.for_models == shape.allocatable - sum((d.requests for d in shape.daemonsets), Resources(0, 0))
    assert "p5.48xlarge: " in shape.describe() and "for models (allocatable 191.45 CPU" in shape.describe()
    dev = config_of("dev")
    assert node_shape(CATALOG.instance("g6e.xlarge"), dev).daemonsets == warmstart_pods(
        dev
    )  # Auto Mode: no add-on pods


def test_warmstarts_own_daemonsets_follow_the_caches_and_the_preload_mode():
    prod = load_config(ROOT / "config" / "prod.yaml")
    assert [d.name for d in warmstart_pods(prod)] == [
        AGENT_POD.name,
        "warmstart-system/image-cache (vllm/vllm-openai:v0.34.0)",
    ]
    bare = prod.model_copy(
        update={
            "caches": prod.caches.model_copy(update={"compile": False, "weights": False}),
            "image_preload": prod.image_preload.model_copy(update={"mode": "off", "parallel_pull": False}),
        }
    )
    assert warmstart_pods(bare) == ()


def test_the_recorder_reads_a_types_labels_and_resources():
    text = """## p5 Family
### `p5.48xlarge`
#### Labels
 | Label | Value |
 |--|--|
 |karpenter.k8s.aws/instance-cpu|192|
 |karpenter.k8s.aws/instance-memory|2097152|
#### Resources
 | Resource | Quantity |
 |--|--|
 |cpu|191450m|
 |memory|1938410Mi|
 |nvidia.com/gpu|8|
 |pods|100|
### `m5.large`
#### Labels
 |karpenter.k8s.aws/instance-cpu|2|
 |karpenter.k8s.aws/instance-memory|8192|
#### Resources
 |cpu|1930m|
 |memory|6903Mi|
 |pods|29|
"""
    parsed = parse_reference(text)
    assert parsed["p5.48xlarge"] == {
        "vcpus": 192,
        "memory_mib": 2097152,
        "gpus": 8,
        "max_pods": 100,
        "allocatable_cpu_millis": 191450,
        "allocatable_memory_mib": 1938410,
        "labels": {"karpenter.k8s.aws/instance-cpu": "192", "karpenter.k8s.aws/instance-memory": "2097152"},
    }
    assert parsed["m5.large"]["gpus"] == 0
    assert karpenter_allocatable(2, 8192, 29) == Resources(1930, 6903)


@pytest.mark.parametrize("mode", ["karpenter", "auto"])
def test_every_catalog_types_default_requests_fit_what_its_node_offers(mode):
    """A pod that asks for no cpu or memory_gib gets its GPUs' share of the instance at POD_SHARE_OF_NODE; the pods
    that fill a node by GPUs must fit what it offers after kube-reserved and the DaemonSets."""
    prod = load_config(ROOT / "config" / "prod.yaml")
    config = prod if mode == "karpenter" else config_of("dev")
    for name in CATALOG.instances:
        instance = CATALOG.instance(name)
        for tensor_parallel_size in (1, instance.gpu_count):
            cpu, memory = default_requests([instance], tensor_parallel_size)
            pods = instance.gpu_count // tensor_parallel_size
            needed = Resources.of_pod(cpu * pods, memory * pods)
            assert node_shape(instance, config).for_models.holds(needed), (name, tensor_parallel_size, mode)
