"""An existing cluster and VPC in the config: what warmstart must be told, and each refusal with its field and fix."""

from __future__ import annotations

import copy

import pytest
import yaml

from tests.builders import only_problem, problems
from tests.builders import raw as config_document
from tests.synth import ROOT, config_of
from warmstart.loader import parse_config


def raw(name: str = "existing") -> dict:
    return config_document(name)


def test_the_example_and_its_variants_load():
    config = parse_config(raw())
    assert not config.cluster.owned and not config.network.owned
    assert config.network.cidr == "10.60.0.0/16"
    assert config.network.zones == ["eu-west-1a", "eu-west-1b"]
    assert config.network.existing.route_table_ids == ["rtb-0a1b2c3d4e5f60001", "rtb-0a1b2c3d4e5f60002"]
    assert config.cluster.applies_kubernetes_objects
    assert config_of("existing-auto-mode").compute.mode == "auto"
    assert not config_of("existing-gitops").cluster.applies_kubernetes_objects


def test_no_gateway_endpoint_is_refused_with_the_command_that_adds_one():
    document = raw()
    document["network"]["existing"]["s3_gateway_endpoint"] = "none"
    problem = only_problem(document)
    assert problem.field == "network.existing.s3_gateway_endpoint"
    assert "NAT" in problem.message
    assert "s3_gateway_endpoint: add" in problem.fix
    assert "--vpc-endpoint-type Gateway" in problem.fix
    assert "--route-table-ids rtb-0a1b2c3d4e5f60001 rtb-0a1b2c3d4e5f60002" in problem.fix
    assert "com.amazonaws.eu-west-1.s3" in problem.fix


def test_an_unsaid_gateway_endpoint_is_a_missing_setting():
    document = raw()
    del document["network"]["existing"]["s3_gateway_endpoint"]
    assert only_problem(document).field == "network.existing.s3_gateway_endpoint"


@pytest.mark.parametrize("setting", ["vpc_cidr", "availability_zones", "nat_gateways", "flow_log_retention_days"])
def test_owned_vpc_settings_beside_an_existing_vpc_are_refused(setting):
    document = raw()
    document["network"][setting] = {
        "vpc_cidr": "10.1.0.0/16",
        "availability_zones": ["eu-west-1a", "eu-west-1b"],
        "nat_gateways": 2,
        "flow_log_retention_days": 30,
    }[setting]
    problem = only_problem(document)
    assert problem.field == "network"
    assert setting in problem.message and problem.fix.startswith("remove them")


def test_an_owned_vpc_still_needs_two_zones():
    document = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    document["network"]["availability_zones"] = ["us-west-2a"]
    problem = only_problem(document)
    assert problem.field == "network.availability_zones" and "at least 2 zones" in problem.message
    assert problem.fix.startswith("list 2 or more zones of the region, e.g. us-west-2a and us-west-2b")


@pytest.mark.parametrize(
    "path, value, field",
    [
        (("network", "existing", "vpc_id"), "vpc-XYZ", "network.existing.vpc_id"),
        (("network", "existing", "private_subnets", 0, "id"), "subnet-1", "network.existing.private_subnets[0].id"),
        (
            ("network", "existing", "private_subnets", 1, "route_table_id"),
            "rtb-../x",
            "network.existing.private_subnets[1].route_table_id",
        ),
        (("cluster", "existing", "security_group_id"), "sg-nothex!", "cluster.existing.security_group_id"),
        (("compute", "existing_controller", "node_role_name"), "a/b", "compute.existing_controller.node_role_name"),
    ],
)
def test_malformed_aws_ids_are_refused_in_words(path, value, field):
    document = raw()
    node = document
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    problem = only_problem(document)
    assert problem.field == field
    assert "of the form" not in problem.message  # said in words (warmstart/config_messages.py PATTERN_WORDS)


def test_a_subnet_listed_twice_or_in_another_region_is_refused():
    document = raw()
    subnets = document["network"]["existing"]["private_subnets"]
    subnets.append(copy.deepcopy(subnets[0]))
    assert "listed twice" in only_problem(document).message
    document = raw()
    document["network"]["existing"]["private_subnets"][1]["availability_zone"] = "us-east-1a"
    problem = only_problem(document)
    assert problem.field == "network.existing.private_subnets[1].availability_zone"
    assert "describe-subnets --subnet-ids subnet-0a1b2c3d4e5f60002" in problem.fix


def test_an_existing_cluster_needs_its_vpc_described():
    document = raw()
    document["network"] = {"vpc_cidr": "10.60.0.0/16", "availability_zones": ["eu-west-1a", "eu-west-1b"]}
    problem = only_problem(document)
    assert problem.field == "network.existing"
    assert "describe-cluster --name ml-platform --query cluster.resourcesVpcConfig" in problem.fix


def test_a_created_cluster_in_an_existing_vpc_is_refused_with_both_ways_out():
    document = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    document["network"] = raw()["network"]
    (problem,) = [p for p in problems(document) if p.field == "network.existing"]
    assert "cluster.existing" in problem.fix and "remove network.existing" in problem.fix


def test_settings_of_a_created_cluster_are_refused_beside_existing():
    document = raw()
    document["cluster"]["admin_role_arns"] = ["arn:aws:iam::345678901234:role/admins"]
    problem = only_problem(document)
    assert problem.field == "cluster" and "admin_role_arns" in problem.message


@pytest.mark.parametrize("add_on", ["pod_identity_agent", "nvidia_device_plugin"])
def test_karpenter_clusters_must_say_each_add_on_and_none_is_refused(add_on):
    document = raw()
    del document["cluster"]["existing"][add_on]
    problem = only_problem(document)
    assert problem.field == f"cluster.existing.{add_on}"
    assert "present" in problem.fix and "add" in problem.fix
    document["cluster"]["existing"][add_on] = "none"
    problem = only_problem(document)
    assert problem.message.startswith("the cluster does not run")
    assert "set add" in problem.fix
    assert ("eks-pod-identity-agent" if add_on == "pod_identity_agent" else "nvidia-device-plugin") in problem.fix


def _auto_mode(**compute) -> dict:
    document = raw()
    document["cluster"]["existing"] = {"security_group_id": "sg-0a1b2c3d4e5f60718"}
    document["compute"] = {"mode": "auto", "gpu_pool": document["compute"]["gpu_pool"], **compute}
    return document


def test_an_existing_auto_mode_cluster_needs_its_node_role_and_with_tags_its_cluster_role():
    found = {p.field: p for p in problems(_auto_mode())}
    assert set(found) == {"compute.node_role_name", "compute.cluster_role_name"}
    assert "computeConfig.nodeRoleArn" in found["compute.node_role_name"].fix
    assert "remove tags" in found["compute.cluster_role_name"].fix
    untagged = _auto_mode(node_role_name="AutoNodes")
    untagged["tags"] = {}
    assert parse_config(untagged).compute.node_role_name == "AutoNodes"


def test_auto_mode_runs_its_own_agent_and_device_plugin():
    document = _auto_mode(node_role_name="AutoNodes", cluster_role_name="AutoCluster")
    document["cluster"]["existing"]["pod_identity_agent"] = "add"
    problem = only_problem(document)
    assert problem.field == "cluster.existing.pod_identity_agent" and "Auto Mode runs it" in problem.message


def test_role_names_of_an_existing_cluster_are_refused_on_a_created_one():
    document = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    document["compute"]["node_role_name"] = "AutoNodes"
    assert only_problem(document).fix == "remove compute.node_role_name"


def test_an_existing_karpenter_older_than_the_crds_we_follow_is_refused():
    document = raw()
    document["compute"]["existing_controller"]["version"] = "1.6.3"
    problem = only_problem(document)
    assert problem.field == "compute.existing_controller.version"
    assert "v1.14.1" in problem.message and "upgrade" in problem.fix
    document["compute"]["existing_controller"]["version"] = "2.0.0"
    assert only_problem(document).field == "compute.existing_controller.version"
    document["compute"]["existing_controller"]["version"] = "1.15.0"
    parse_config(document)


def test_own_karpenter_settings_beside_an_existing_controller_are_refused():
    document = raw()
    document["compute"]["karpenter_version"] = "1.14.1"
    problem = only_problem(document)
    assert problem.field == "compute" and "karpenter_version beside existing_controller" in problem.message


def test_an_existing_controller_on_a_created_cluster_is_refused():
    document = yaml.safe_load((ROOT / "config" / "prod.yaml").read_text())
    document["compute"]["existing_controller"] = {"version": "1.14.1", "node_role_name": "Nodes"}
    document["compute"].pop("karpenter_version")
    document["compute"].pop("system_node_group")
    assert only_problem(document).fix == "remove compute.existing_controller"


def _gitops(document: dict) -> dict:
    document["cluster"]["existing"]["kubernetes_objects"] = "gitops"
    document["deploy"] = {"agent_image": f"345678901234.dkr.ecr.eu-west-1.amazonaws.com/a@sha256:{'0' * 64}"}
    return document


def test_gitops_refuses_what_only_a_kubectl_handler_could_install():
    document = _gitops(raw())
    del document["compute"]["existing_controller"]
    document["models"][0]["autoscaling"] = {"min_replicas": 2, "max_replicas": 2}
    del document["models"][0]["replicas"]
    found = {p.field: p for p in problems(document)}
    assert set(found) == {
        "compute.existing_controller",
        "cluster.existing.nvidia_device_plugin",
        "models[0].autoscaling",
    }
    assert all("kubernetes_objects: cdk" in p.fix for p in found.values())


def test_gitops_needs_a_prebuilt_agent_image_when_there_is_an_agent():
    document = _gitops(raw())
    document["cluster"]["existing"]["nvidia_device_plugin"] = "present"
    del document["deploy"]
    problem = only_problem(document)
    assert problem.field == "deploy.agent_image" and "make agent-image" in problem.fix
    document["caches"] = {"compile": False, "weights": False}
    document["image_preload"] = {"mode": "off"}
    assert parse_config(document).deploy.agent_image is None  # no agent, no image cache: nothing to name
