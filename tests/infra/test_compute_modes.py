"""Each compute mode's construct on its own, from a minimal config built here: the same contract for every mode
(what the cluster is created with, the GPU nodes' role, what workloads wait for), and the resources keep the
logical IDs they had before the modes were wrapped in a construct."""

from __future__ import annotations

import re
from pathlib import Path

import cdk8s
import pytest
from aws_cdk import App, Environment, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk.assertions import Template

from image_preload.snapshot import ImageSnapshotBuild
from stacks.cluster_stack import COMPUTE_MODE_ID
from stacks.components.compute import gpu_compute
from stacks.components.control_plane import ControlPlane
from stacks.components.network import WarmstartVpc
from tests.synth import ROOT, cdk_context
from warmstart.config import COMPUTE_MODES, EnvironmentConfig

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
    mode = gpu_compute(stack, COMPUTE_MODE_ID, config=config, network=network)
    capacity = mode.cluster_capacity()
    control_plane = ControlPlane(
        stack,
        "ControlPlane",
        cluster=config.cluster,
        vpc=network.vpc,
        private_subnets=network.private_subnets,
        capacity=capacity.type,
        compute=capacity.compute,
    )
    mode.attach(cluster=control_plane.cluster, charts=cdk8s.App())
    return stack, mode, control_plane.cluster


def test_every_mode_of_the_config_has_a_construct_with_the_same_contract():
    assert set(COMPUTE_MODES) == {"auto", "karpenter"}
    built = {name: build(minimal_config(raw)) for name, raw in (("auto", AUTO), ("karpenter", KARPENTER))}
    for name, (stack, mode, _cluster) in built.items():
        # The GPU NodeClass names the mode's node role, and a workload waits for the pool's manifest.
        node_class = mode.gpu_pool.chart.node_class.to_json()
        assert stack.resolve(node_class["spec"]["role"]) == stack.resolve(mode.node_role.role_name), name
        assert mode.workloads_wait_for == [mode.gpu_pool.manifest], name
    auto_capacity = built["auto"][1].cluster_capacity()
    assert auto_capacity.type == eks.DefaultCapacityType.AUTOMODE and auto_capacity.compute is not None
    assert built["karpenter"][1].cluster_capacity().type == eks.DefaultCapacityType.NODEGROUP


def test_auto_mode_creates_the_node_role_before_the_cluster_and_hands_it_to_the_cluster():
    stack, mode, _ = build(minimal_config(AUTO))
    template = Template.from_stack(stack)
    (cluster,) = template.find_resources("AWS::EKS::Cluster").values()
    role_id = stack.get_logical_id(mode.node_role.node.default_child)
    assert cluster["Properties"]["ComputeConfig"]["NodeRoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}
    # Without `tags` there is nothing for Auto Mode to apply, so no custom-tags policy.
    assert not [p for p in template.find_resources("AWS::IAM::Policy") if p.startswith("AutoModeCustomTags")]


def test_karpenter_builds_the_image_snapshot_only_in_snapshot_mode():
    plain = build(minimal_config(KARPENTER))[1]
    assert plain.image_snapshot is None
    snapshot_mode = {**KARPENTER, "ami_alias": "bottlerocket@v1.46.0"}
    stack, mode, _ = build(minimal_config(snapshot_mode, image_preload={"mode": "snapshot"}))
    assert isinstance(mode.image_snapshot, ImageSnapshotBuild)
    storage = mode.gpu_pool.chart.node_class.to_json()["spec"]["blockDeviceMappings"]
    assert any("snapshotID" in device.get("ebs", {}) for device in storage)


def test_a_modes_parts_asked_for_before_attach_name_the_mistake():
    stack = Stack(App(context=cdk_context()), "Bare")
    config = minimal_config(KARPENTER)
    mode = gpu_compute(stack, COMPUTE_MODE_ID, config=config, network=WarmstartVpc(stack, "N", network=config.network))
    with pytest.raises(RuntimeError, match=r"call attach\(cluster=\.\.\.\) before"):
        _ = mode.gpu_pool


@pytest.mark.parametrize("raw", [AUTO, KARPENTER], ids=["auto", "karpenter"])
def test_the_mode_construct_adds_nothing_to_its_resources_logical_ids(raw):
    """The resources were deployed directly under the cluster stack before the modes had a construct: named
    'Default', it is left out of their logical IDs, so nothing is replaced."""
    stack, mode, _ = build(minimal_config(raw))
    ids = list(Template.from_stack(stack).to_json()["Resources"])
    for child in mode.node.find_all():
        if child is not mode and hasattr(child, "cfn_resource_type"):
            logical_id = stack.get_logical_id(child)
            assert logical_id in ids
            assert logical_id.startswith(child.node.path.split("/")[2]), logical_id  # the first name below the mode


def test_only_the_compute_package_decides_the_mode_below_app():
    """The cluster stack and the composition compose whatever mode they get; the constructs do not branch."""
    for path in [ROOT / "stacks" / "cluster_stack.py", ROOT / "stacks" / "compose.py", *construct_files()]:
        assert not re.search(r"AutoModeCompute|KarpenterCompute|compute\.mode\b", path.read_text()), path


def construct_files() -> list[Path]:
    decided_in = ROOT / "stacks" / "components" / "compute"
    return [p for p in (ROOT / "stacks" / "components").glob("*.py")] + [
        p for p in decided_in.glob("*.py") if p.name not in ("__init__.py", "auto_mode.py", "karpenter.py")
    ]
