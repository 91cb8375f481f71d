"""Each compute mode's construct on its own, from a minimal config built here: one step creates the cluster with
the mode's capacity and hands back the same contract for every mode (the cluster, the GPU nodes' role, the pool,
what workloads wait for)."""

from __future__ import annotations

import re
from pathlib import Path

import cdk8s
import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Template

from construct_kit.network import WarmstartVpc
from gpu_compute import gpu_compute
from image_preload.snapshot import ImageSnapshotBuild
from tests.synth import ROOT, cdk_context
from warmstart.config.compute import COMPUTE_MODES
from warmstart.config.environment import EnvironmentConfig

MODEL = {
    "name": "m",
    "s3_uri": "s3://unit-models/m/",
    "size_gb": 10,
    "weights_revision": "r1",
    "tensor_parallel_size": 1,
    "max_model_len": 4096,
    "image": "vllm/vllm-openai:v0.21.0",
    "torch_version": "2.11.0",
    "replicas": 2,
}
AUTO = {"mode": "auto", "gpu_pool": {"instance_types": ["g6e.xlarge"], "gpu_limit": 4}}
KARPENTER = {"mode": "karpenter", "gpu_pool": {"instance_types": ["g6e.xlarge"], "gpu_limit": 4}}


def minimal_config(compute: dict, **extra) -> EnvironmentConfig:
    return EnvironmentConfig.model_validate(
        {
            "name": "unit",
            "account": "210987654321",
            "region": "us-east-1",
            "network": {"vpc_cidr": "10.40.0.0/16", "availability_zones": ["us-east-1a", "us-east-1b"]},
            "cluster": {"name": "unit-cluster", "kubernetes_version": "1.35"},
            "compute": compute,
            "buckets": {"compile_cache": "unit-compile-cache", "models": {"name": "unit-models"}},
            "models": [MODEL],
            **extra,
        }
    )


def build(config: EnvironmentConfig):
    stack = Stack(App(context=cdk_context()), "Bare", env=Environment(account=config.account, region=config.region))
    network = WarmstartVpc(stack, "Network", network=config.network)
    info = gpu_compute(stack, "GpuCompute", config=config, network=network, charts=cdk8s.App())
    return stack, info, stack.node.find_child("GpuCompute")


def test_every_mode_of_the_config_has_a_construct_with_the_same_contract():
    assert set(COMPUTE_MODES) == {"auto", "karpenter"}
    built = {name: build(minimal_config(raw)) for name, raw in (("auto", AUTO), ("karpenter", KARPENTER))}
    for name, (stack, info, _mode) in built.items():
        # The GPU NodeClass names the mode's node role, and a workload waits for the pool's manifest.
        node_class = info.gpu_pool.chart.node_class.to_json()
        assert stack.resolve(node_class["spec"]["role"]) == stack.resolve(info.node_role.role_name), name
        assert info.workloads_wait_for == (info.gpu_pool.manifest,), name
        assert info.cluster is stack.node.find_child("ControlPlane").node.find_child("Cluster"), name
    clusters = {
        name: next(iter(Template.from_stack(stack).find_resources("AWS::EKS::Cluster").values()))["Properties"]
        for name, (stack, _, _) in built.items()
    }
    assert clusters["auto"]["ComputeConfig"]["Enabled"] is True
    assert clusters["karpenter"]["ComputeConfig"] == {"Enabled": False}  # node groups and Karpenter's nodes


def test_auto_mode_creates_the_node_role_before_the_cluster_and_hands_it_to_the_cluster():
    stack, info, _ = build(minimal_config(AUTO))
    template = Template.from_stack(stack)
    (cluster,) = template.find_resources("AWS::EKS::Cluster").values()
    role_id = stack.get_logical_id(info.node_role.node.default_child)
    assert cluster["Properties"]["ComputeConfig"]["NodeRoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    # Without `tags` there is nothing for Auto Mode to apply, so no custom-tags policy.
    assert not [p for p in template.find_resources("AWS::IAM::Policy") if "AutoModeCustomTags" in p]


def test_karpenter_builds_the_image_snapshot_only_in_snapshot_mode():
    assert build(minimal_config(KARPENTER))[2].image_snapshot is None
    snapshot_mode = {**KARPENTER, "ami_alias": "bottlerocket@v1.46.0"}
    stack, info, mode = build(minimal_config(snapshot_mode, image_preload={"mode": "snapshot"}))
    assert isinstance(mode.image_snapshot, ImageSnapshotBuild)
    storage = info.gpu_pool.chart.node_class.to_json()["spec"]["blockDeviceMappings"]
    assert any("snapshotID" in device.get("ebs", {}) for device in storage)


@pytest.mark.parametrize("raw", [AUTO, KARPENTER], ids=["auto", "karpenter"])
def test_the_modes_resources_live_under_its_construct_and_the_cluster_beside_it(raw):
    """The mode's own resources are named under its construct; the control plane keeps one place in the stack
    whichever mode created it."""
    stack, info, mode = build(minimal_config(raw))
    ids = list(Template.from_stack(stack).to_json()["Resources"])
    for child in mode.node.find_all():
        if child is not mode and hasattr(child, "cfn_resource_type"):
            logical_id = stack.get_logical_id(child)
            assert logical_id in ids and logical_id.startswith("GpuCompute"), logical_id
    assert stack.get_logical_id(info.cluster.node.default_child).startswith("ControlPlaneCluster")


def test_only_the_compute_package_decides_the_mode_below_app():
    """The cluster stack and the composition compose whatever mode they get; the constructs do not branch."""
    for path in [ROOT / "stacks" / "cluster_stack.py", ROOT / "stacks" / "compose.py", *construct_files()]:
        assert not re.search(r"AutoModeCompute|KarpenterCompute|compute\.mode\b", path.read_text()), path


def construct_files() -> list[Path]:
    decided_in = ROOT / "gpu_compute"
    found = [p for p in (ROOT / "construct_kit").glob("*.py")] + [
        p for p in decided_in.glob("*.py") if p.name not in ("__init__.py", "auto_mode.py", "karpenter.py")
    ]
    assert len(found) > 10  # the folders are where the layout says (an empty glob would pass anything)
    return found
