"""make preflight against an existing cluster and VPC: the AWS CLI's and the cluster's answers (in the shapes the
AWS CLI v2 prints for DescribeCluster, DescribeSubnets, DescribeRouteTables, DescribeVpcEndpoints, DescribeAddon and
kubectl's Deployment list), what each finding says, and hostile or malformed answers."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from kube.gpu_nodes import device_plugin_placement
from tests.synth import config_of
from warmstart.loader import load_config
from warmstart_cli.existing_cluster_objects import image_tag, runs_on
from warmstart_cli.existing_preflight import read_existing, route_table_of_each_subnet
from warmstart_cli.preflight import check

ROOT = Path(__file__).resolve().parents[2]
CONFIG = load_config(ROOT / "config" / "existing.yaml")
SUBNETS = [
    ("subnet-0a1b2c3d4e5f60001", "eu-west-1a", "rtb-0a1b2c3d4e5f60001"),
    ("subnet-0a1b2c3d4e5f60002", "eu-west-1b", "rtb-0a1b2c3d4e5f60002"),
]
CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()


def cluster(**changes) -> dict:
    described = {
        "name": "ml-platform",
        "version": "1.35",
        "endpoint": "https://ABCDEF.gr7.eu-west-1.eks.amazonaws.com",
        "certificateAuthority": {"data": CA},
        "resourcesVpcConfig": {
            "vpcId": "vpc-0a1b2c3d4e5f60718",
            "clusterSecurityGroupId": "sg-0a1b2c3d4e5f60718",
            "endpointPublicAccess": False,
            "endpointPrivateAccess": True,
            "publicAccessCidrs": [],
        },
        "accessConfig": {"authenticationMode": "API_AND_CONFIG_MAP"},
        "computeConfig": {"enabled": False},
    }
    for path, value in changes.items():
        node: Any = described
        keys = path.split("__")
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return described


def karpenter(version: str = "1.14.1", gates: str = "ReservedCapacity=true", namespace: str = "kube-system") -> dict:
    return {
        "items": [
            {
                "metadata": {
                    "name": "karpenter",
                    "namespace": namespace,
                    "labels": {"app.kubernetes.io/name": "karpenter"},
                },
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "controller",
                                    "image": f"public.ecr.aws/karpenter/controller:{version}@sha256:{'1' * 64}",
                                    "env": [
                                        {"name": "CLUSTER_NAME", "value": "ml-platform"},
                                        {"name": "FEATURE_GATES", "value": gates},
                                    ],
                                }
                            ]
                        }
                    }
                },
            }
        ]
    }


def daemonset(name: str, namespace: str = "kube-system", image: str = "busybox", **pod_spec) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"template": {"spec": {"containers": [{"name": name, "image": image}], **pod_spec}}},
    }


def _requiring(*expressions: dict) -> dict:
    """A pod spec whose required node affinity is one term of these expressions."""
    term = {"matchExpressions": list(expressions)}
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    }


# NVIDIA's chart v0.19.0 defaults: tolerates nvidia.com/gpu, runs only where NFD or GFD labelled the node.
NVIDIA_CHART_DEFAULTS = {
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]}
                        ]
                    },
                    {"matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]},
                ]
            }
        }
    },
}
# A device plugin installed as warmstart installs it (the placement its own Helm release gets).
OUR_KIND_OF_PLUGIN = daemonset(
    "nvdp-nvidia-device-plugin", image="nvcr.io/nvidia/k8s-device-plugin:v0.19.0", **device_plugin_placement()
)
VPC = "vpc-0a1b2c3d4e5f60718"
# Auto Mode nodes join with the cluster security group only.
AUTO_NODES = {"Reservations": [{"Instances": [{"SecurityGroups": [{"GroupId": "sg-0a1b2c3d4e5f60718"}]}]}]}
NODE_GROUPS = [{"GroupId": "sg-0a1b2c3d4e5f60718"}, {"GroupId": "sg-0a1b2c3d4e5f60719"}]


class Account:
    """The AWS CLI and kubectl, answering from recorded shapes; `answers` overrides one command's answer. It checks
    the filters each command carries, as the service would apply them."""

    def __init__(self, **answers) -> None:
        self.answers = {
            "describe-cluster": {"cluster": cluster()},
            # The GPU AMI Karpenter resolves the pinned alias to (make deploy's preflight reads it too).
            "get-parameter": {"Parameter": {"Value": "ami-0123456789abcdef0"}},
            "describe-subnets": {
                "Subnets": [{"SubnetId": s, "VpcId": VPC, "AvailabilityZone": z} for s, z, _ in SUBNETS]
            },
            "describe-route-tables": {
                "RouteTables": [
                    {
                        "RouteTableId": t,
                        "VpcId": VPC,
                        "Associations": [{"Main": False, "SubnetId": s}],
                        "Routes": [
                            {"DestinationCidrBlock": "10.60.0.0/16", "GatewayId": "local", "State": "active"},
                            {"DestinationCidrBlock": "0.0.0.0/0", "NatGatewayId": "nat-0123", "State": "active"},
                        ],
                    }
                    for s, _, t in SUBNETS
                ]
            },
            "describe-vpc-endpoints": {"VpcEndpoints": []},
            "describe-instances": {
                "Reservations": [
                    {"Instances": [{"SecurityGroups": NODE_GROUPS}]},
                    {"Instances": [{"SecurityGroups": NODE_GROUPS[::-1]}]},
                ]
            },
            "eks-pod-identity-agent": {"addon": {"addonName": "eks-pod-identity-agent", "status": "ACTIVE"}},
            "vpc-cni": {"addon": {"addonName": "vpc-cni", "configurationValues": '{"enableNetworkPolicy": "true"}'}},
            "list-access-entries": {
                "accessEntries": [
                    "arn:aws:iam::345678901234:role/aws-reserved/sso.amazonaws.com/Admins",
                    "arn:aws:iam::345678901234:role/KarpenterNodeRole-ml-platform",
                ]
            },
            "describe-access-entry": {"accessEntry": {"type": "EC2_LINUX"}},
            "get-token": {"kind": "ExecCredential", "status": {"token": "k8s-aws-v1.secret"}},
            "kubectl daemonsets": {"items": [daemonset("kube-proxy")]},
            "kubectl deployments": karpenter(),
            "kubectl deployments,statefulsets": {"items": []},
            "kubectl configmap": {"data": {}},
        }
        self.answers.update(
            {key.replace("kubectl_", "kubectl ").replace("vpc_cni", "vpc-cni"): v for key, v in answers.items()}
        )
        self.commands: list[list[str]] = []
        self.kubeconfigs: list[dict] = []

    def _filters_hold(self, command: list[str]) -> None:
        if command[2] in ("describe-route-tables", "describe-vpc-endpoints"):
            assert f"Name=vpc-id,Values={VPC}" in command
        if command[2] == "describe-vpc-endpoints":
            assert "Name=service-name,Values=com.amazonaws.eu-west-1.s3" in command
        if command[2] == "describe-instances":
            assert "Name=instance-state-name,Values=running" in command
            assert "Name=tag-key,Values=kubernetes.io/cluster/ml-platform" in command or (
                "Name=tag:eks:eks-cluster-name,Values=ml-platform" in command
            )
        if command[2] == "describe-access-entry":
            assert command[command.index("--principal-arn") + 1].endswith(":role/KarpenterNodeRole-ml-platform")
        if command[1] != "sts":
            assert command[command.index("--region") + 1] == "eu-west-1"

    def __call__(self, command: list[str]) -> tuple[int, str, str]:
        self.commands.append(command)
        if command[0] == "kubectl":
            path = Path(command[command.index("--kubeconfig") + 1])
            assert path.stat().st_mode & 0o077 == 0  # the token is readable by the caller only
            self.kubeconfigs.append(json.loads(path.read_text()))
            key = f"kubectl {command[command.index('get') + 1]}"
        elif command[:3] == ["aws", "eks", "describe-addon"]:
            key = command[command.index("--addon-name") + 1]
            self._filters_hold(command)
        else:
            key = command[2]
            self._filters_hold(command)
        answer = self.answers[key]
        if isinstance(answer, tuple):
            return answer
        return 0, json.dumps(answer), ""


NOT_FOUND = (
    254,
    "",
    "An error occurred (ResourceNotFoundException) when calling the DescribeAddon operation: No addon",
)


def findings(config=CONFIG, **answers) -> tuple[list[str], list[str]]:
    found, notes = read_existing(config, Account(**answers))
    return [f"{f.message} | {f.fix}" for f in found], notes


def test_a_cluster_and_vpc_as_the_config_says_pass():
    account = Account()
    assert read_existing(CONFIG, account) == ([], [])
    # The token reached kubectl in a file, never in its arguments.
    assert not any("k8s-aws-v1.secret" in " ".join(c) for c in account.commands)
    assert account.kubeconfigs[0]["users"][0]["user"]["token"] == "k8s-aws-v1.secret"


def test_a_missing_cluster_is_one_finding_with_the_way_out():
    found, _ = findings(**{"describe-cluster": (254, "", "An error occurred (ResourceNotFoundException) ...")})
    assert found == [
        "cluster ml-platform does not exist in eu-west-1 | check cluster.name and region, or remove "
        "cluster.existing to let warmstart create the cluster"
    ]


@pytest.mark.parametrize(
    "change, said",
    [
        ({"version": "1.34"}, "set cluster.kubernetes_version: '1.34'"),
        ({"resourcesVpcConfig__vpcId": "vpc-0ffffffffffffffff"}, "set network.existing.vpc_id: vpc-0ffffffffffffffff"),
        (
            {"resourcesVpcConfig__clusterSecurityGroupId": "sg-0eeeeeeeeeeeeeeee"},
            "set cluster.existing.security_group_id: sg-0eeeeeeeeeeeeeeee",
        ),
        ({"accessConfig__authenticationMode": "CONFIG_MAP"}, "authenticationMode=API_AND_CONFIG_MAP"),
        ({"computeConfig__enabled": True}, "set compute.mode: auto"),
        ({"version": ["not", "a", "version"]}, "set cluster.kubernetes_version"),
    ],
)
def test_each_difference_of_the_cluster_is_a_finding_with_its_fix(change, said):
    found, _ = findings(**{"describe-cluster": {"cluster": cluster(**change)}})
    assert len(found) == 1 and said in found[0]


def test_a_public_only_endpoint_limited_to_some_cidrs_cannot_take_the_handler_from_outside():
    config = config_of("existing-auto-mode")  # endpoint_access: public_and_private
    auto = {
        "computeConfig__enabled": True,
        "computeConfig__nodeRoleArn": "arn:aws:iam::1:role/AmazonEKSAutoNodeRole",
        "roleArn": "arn:aws:iam::1:role/AmazonEKSAutoClusterRole",
    }
    ok = cluster(
        resourcesVpcConfig__endpointPublicAccess=True, resourcesVpcConfig__publicAccessCidrs=["0.0.0.0/0"], **auto
    )
    answers = {
        "describe-cluster": {"cluster": ok},
        "describe-vpc-endpoints": {
            "VpcEndpoints": [{"VpcEndpointType": "Gateway", "RouteTableIds": [t for _, _, t in SUBNETS]}]
        },
        "describe-instances": AUTO_NODES,
    }
    assert findings(config, **answers) == ([], [])
    limited = copy.deepcopy(ok)
    limited["resourcesVpcConfig"]["publicAccessCidrs"] = ["203.0.113.0/24"]
    found, _ = findings(config, **{**answers, "describe-cluster": {"cluster": limited}})
    assert len(found) == 1 and "set cluster.endpoint_access: private" in found[0]
    wrong_role = copy.deepcopy(ok)
    wrong_role["computeConfig"]["nodeRoleArn"] = "arn:aws:iam::1:role/other/AutoNodes"
    found, _ = findings(config, **{**answers, "describe-cluster": {"cluster": wrong_role}})
    assert len(found) == 1 and "compute.node_role_name" in found[0]
    # Auto Mode runs its add-ons in the node, but a team's DaemonSet that tolerates every taint lands on its nodes.
    hungry = _everywhere("scanner", "security", _asking("160", "0"))
    found, _ = findings(config, **{**answers, "kubectl_daemonsets": {"items": [hungry]}})
    assert len(found) == 1 and "takes 160 CPU, 0 GiB of each of warmstart's GPU nodes (security/scanner)" in found[0]
    off_auto = copy.deepcopy(hungry)
    off_auto["spec"]["template"]["spec"].update(
        _requiring({"key": "eks.amazonaws.com/compute-type", "operator": "NotIn", "values": ["auto"]})
    )
    assert findings(config, **{**answers, "kubectl_daemonsets": {"items": [off_auto]}}) == ([], [])


def test_the_gateway_endpoint_must_cover_every_listed_route_table_when_present():
    config = config_of("existing-auto-mode")
    auto = cluster(
        computeConfig__enabled=True,
        roleArn="arn:aws:iam::1:role/AmazonEKSAutoClusterRole",
        computeConfig__nodeRoleArn="arn:aws:iam::1:role/AmazonEKSAutoNodeRole",
        resourcesVpcConfig__endpointPublicAccess=True,
        resourcesVpcConfig__publicAccessCidrs=["0.0.0.0/0"],
    )
    one_table = {
        "VpcEndpoints": [
            {"VpcEndpointType": "Gateway", "RouteTableIds": ["rtb-0a1b2c3d4e5f60001"]},
            {"VpcEndpointType": "Interface", "RouteTableIds": ["rtb-0a1b2c3d4e5f60002"]},
        ]
    }
    found, _ = findings(
        config,
        **{
            "describe-cluster": {"cluster": auto},
            "describe-vpc-endpoints": one_table,
            "describe-instances": AUTO_NODES,
        },
    )
    assert len(found) == 1
    assert "no S3 gateway endpoint on route table(s) rtb-0a1b2c3d4e5f60002" in found[0]
    assert "--add-route-table-ids rtb-0a1b2c3d4e5f60002" in found[0]


def test_adding_an_endpoint_where_one_is_already_is_refused_before_ec2_refuses_it():
    existing = {"VpcEndpoints": [{"VpcEndpointType": "Gateway", "RouteTableIds": ["rtb-0a1b2c3d4e5f60002"]}]}
    found, _ = findings(**{"describe-vpc-endpoints": existing})
    assert len(found) == 1 and "s3_gateway_endpoint: present" in found[0]


def test_subnets_in_another_vpc_zone_or_route_table_are_findings():
    subnets = {
        "Subnets": [
            {"SubnetId": SUBNETS[0][0], "VpcId": "vpc-0a1b2c3d4e5f60718", "AvailabilityZone": "eu-west-1c"},
            {"SubnetId": SUBNETS[1][0], "VpcId": "vpc-0ffffffffffffffff", "AvailabilityZone": "eu-west-1b"},
        ]
    }
    main_only = {"RouteTables": [{"RouteTableId": "rtb-0cccccccccccccccc", "Associations": [{"Main": True}]}]}
    found, _ = findings(**{"describe-subnets": subnets, "describe-route-tables": main_only})
    assert any("is in eu-west-1c" in f for f in found)
    assert any(f"subnet {SUBNETS[1][0]} is not in VPC" in f for f in found)
    # No explicit association: the subnet routes through the VPC's main table.
    assert any(
        "routes through rtb-0cccccccccccccccc" in f and "set its route_table_id: rtb-0cccccccccccccccc" in f
        for f in found
    )


@pytest.mark.parametrize(
    "image, tag",
    [
        (f"public.ecr.aws/karpenter/controller:1.14.1@sha256:{'1' * 64}", "1.14.1"),
        ("registry.local:5000/karpenter/controller", ""),
        ("registry.local:5000/karpenter/controller:v1.14.1", "v1.14.1"),
        (f"public.ecr.aws/karpenter/controller@sha256:{'1' * 64}", ""),
        (None, ""),
    ],
)
def test_the_controller_version_is_read_from_the_image_tag_never_from_a_digest_or_port(image, tag):
    assert image_tag(image) == tag


def test_route_tables_of_another_vpc_and_malformed_entries_are_ignored():
    tables = [
        {"RouteTableId": "rtb-1", "VpcId": "vpc-other", "Associations": [{"Main": True}]},
        {"RouteTableId": 7, "Associations": [{"SubnetId": "subnet-a"}]},
        {"RouteTableId": "rtb-2", "Associations": "not a list"},
        {"RouteTableId": "rtb-3", "Associations": [{"SubnetId": ["x"]}, {"SubnetId": "subnet-b"}]},
        "garbage",
    ]
    assert route_table_of_each_subnet(tables, "vpc-mine") == {"subnet-b": "rtb-3"}
    assert route_table_of_each_subnet({"RouteTables": []}, "vpc-mine") == {}


@pytest.mark.parametrize(
    "answers, said",
    [
        ({"eks-pod-identity-agent": NOT_FOUND}, "set cluster.existing.pod_identity_agent: add"),
        (
            {"vpc-cni": {"addon": {"configurationValues": "{}"}}},
            '--configuration-values \'{"enableNetworkPolicy": "true"}\'',
        ),
        (
            {"vpc-cni": NOT_FOUND, "kubectl_daemonsets": {"items": [daemonset("aws-node")]}},
            "--enable-network-policy=true",
        ),
        ({"vpc-cni": {"addon": {"configurationValues": "{not json"}}}, "does not enforce NetworkPolicy"),
        ({"vpc-cni": {"addon": {"configurationValues": {"enableNetworkPolicy": "true"}}}}, "does not enforce"),
        ({"kubectl_deployments": karpenter(version="1.13.2")}, "set compute.existing_controller.version: 1.13.2"),
        ({"kubectl_deployments": karpenter(namespace="karpenter")}, "no Karpenter controller in namespace kube-system"),
        ({"kubectl_deployments": {"items": "garbage"}}, "no Karpenter controller"),
    ],
)
def test_add_ons_and_the_running_karpenter_against_the_config(answers, said):
    found, _ = findings(**answers)
    assert len(found) == 1 and said in found[0], found


def test_reserved_capacity_with_the_feature_gate_off_is_a_finding():
    config = CONFIG.model_copy(deep=True)
    pool = config.compute.gpu_pool.model_copy(update={"capacity_types": ["on-demand", "reserved"]})
    config = config.model_copy(update={"compute": config.compute.model_copy(update={"gpu_pool": pool})})
    found, _ = findings(config, kubectl_deployments=karpenter(gates="NodeRepair=false,ReservedCapacity=false"))
    assert len(found) == 1 and "reservedCapacity: true" in found[0]


def test_an_agent_the_config_would_add_twice_is_a_finding():
    config = config_of("existing-gitops")  # pod_identity_agent: add, nvidia_device_plugin: present
    found, _ = findings(config, kubectl_daemonsets={"items": [OUR_KIND_OF_PLUGIN]})
    assert len(found) == 1 and "set cluster.existing.pod_identity_agent: present" in found[0]


def test_what_cannot_be_read_is_a_note_not_a_pass():
    timeout = (1, "", "Unable to connect to the server: dial tcp 10.60.1.5:443: i/o timeout")
    found, notes = findings(kubectl_deployments=timeout, kubectl_daemonsets=timeout)
    assert found == []
    assert "i/o timeout" in notes[0] and "inside the VPC" in notes[0]
    assert any("device plugin was not checked" in n for n in notes)
    found, notes = findings(**{"describe-cluster": (254, "", "An error occurred (AccessDeniedException)")})
    assert found == [] and "AccessDeniedException" in notes[0]
    found, notes = findings(**{"describe-subnets": (254, "", "An error occurred (UnauthorizedOperation)")})
    assert "UnauthorizedOperation" in notes[0]


def test_deploy_stops_on_a_finding_and_diff_only_says_it():
    account = Account(**{"identity": None})
    account.answers["get-caller-identity"] = {"Account": CONFIG.account, "Arn": "arn:aws:sts::1:assumed-role/x/y"}
    account.answers["describe-cluster"] = {"cluster": cluster(version="1.34")}
    problems, notes = check("diff", CONFIG, run=account)
    assert problems == [] and any("make deploy would stop here" in n and "1.34" in n for n in notes)


def _present_plugin_config():
    config = CONFIG.model_copy(deep=True)
    existing = config.cluster.existing.model_copy(update={"nvidia_device_plugin": "present"})
    return config.model_copy(update={"cluster": config.cluster.model_copy(update={"existing": existing})})


def test_a_device_plugin_that_would_not_run_on_the_gpu_nodes_is_a_finding():
    present = _present_plugin_config()
    assert findings(present, kubectl_daemonsets={"items": [OUR_KIND_OF_PLUGIN]}) == ([], [])
    chart_defaults = daemonset("nvdp", image="nvcr.io/nvidia/k8s-device-plugin:v0.19.0", **NVIDIA_CHART_DEFAULTS)
    found, _ = findings(present, kubectl_daemonsets={"items": [chart_defaults]})
    assert len(found) == 1 and "would not run on warmstart's GPU nodes" in found[0] and "Pending" in found[0]
    untolerated = daemonset("nvdp", image="nvcr.io/nvidia/k8s-device-plugin:v0.19.0")
    found, _ = findings(present, kubectl_daemonsets={"items": [untolerated]})
    assert len(found) == 1 and "nvidia.com/gpu:NoSchedule" in found[0]
    # The GPU taint alone is not enough: warmstart's nodes carry its own too.
    gpu_taint_only = daemonset(
        "nvdp",
        image="nvcr.io/nvidia/k8s-device-plugin:v0.19.0",
        **{**device_plugin_placement(), "tolerations": NVIDIA_CHART_DEFAULTS["tolerations"]},
    )
    found, _ = findings(present, kubectl_daemonsets={"items": [gpu_taint_only]})
    assert len(found) == 1 and "warmstart.io/gpu-pool:NoSchedule (operator: Exists)" in found[0]
    equal = [
        *NVIDIA_CHART_DEFAULTS["tolerations"],
        {"key": "warmstart.io/gpu-pool", "value": "gpu", "effect": "NoSchedule"},
    ]
    tolerated = daemonset(
        "nvdp", image="nvcr.io/nvidia/k8s-device-plugin:v0.19.0", **{**device_plugin_placement(), "tolerations": equal}
    )
    assert findings(present, kubectl_daemonsets={"items": [tolerated]}) == ([], [])
    found, _ = findings(present)
    assert len(found) == 1 and "no NVIDIA device plugin runs" in found[0]
    # add, where one runs already: a second would advertise the GPUs twice.
    found, _ = findings(kubectl_daemonsets={"items": [OUR_KIND_OF_PLUGIN]})
    assert len(found) == 1 and "set cluster.existing.nvidia_device_plugin: present" in found[0]


@pytest.mark.parametrize(
    "labels, spec, runs",
    [
        ({"a": "1"}, {}, True),
        ({"a": "1"}, {"nodeSelector": {"a": "2"}}, False),
        ({"a": "1"}, {"nodeSelector": "garbage"}, False),
        (
            {"a": "1"},
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "b", "operator": "Exists"}]},
                                {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["2"]}]},
                            ]
                        }
                    }
                }
            },
            True,
        ),
        ({"a": "1"}, _requiring({"key": "a", "operator": "Gt", "values": ["0"]}), True),
        ({"a": "1"}, _requiring({"key": "a", "operator": "Gt", "values": ["1"]}), False),
        ({"a": "1"}, _requiring({"key": "a", "operator": "Lt", "values": ["2"]}), True),
        ({"a": "x"}, _requiring({"key": "a", "operator": "Gt", "values": ["0"]}), False),
        ({"a": "1"}, _requiring({"key": "a", "operator": "Gt", "values": ["0", "1"]}), False),
        ({}, _requiring({"key": "a", "operator": "Lt", "values": ["5"]}), False),
        (
            {"a": "1"},
            {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}]
                        }
                    }
                }
            },
            False,
        ),
    ],
)
def test_node_affinity_is_read_as_the_scheduler_reads_it(labels, spec, runs):
    assert runs_on(spec, labels) is runs


def test_a_route_table_without_egress_or_with_an_internet_gateway_is_a_finding():
    account = Account()
    tables = copy.deepcopy(account.answers["describe-route-tables"])
    tables["RouteTables"][0]["Routes"] = [{"DestinationCidrBlock": "10.60.0.0/16", "GatewayId": "local"}]
    tables["RouteTables"][1]["Routes"][1] = {"DestinationCidrBlock": "0.0.0.0/0", "GatewayId": "igw-0123"}
    found, _ = findings(**{"describe-route-tables": tables})
    assert len(found) == 2
    assert "rtb-0a1b2c3d4e5f60001 has no default route" in found[0] and "interface endpoints" in found[0]
    assert "rtb-0a1b2c3d4e5f60002 sends 0.0.0.0/0 to an internet gateway" in found[1]
    blackholed = copy.deepcopy(account.answers["describe-route-tables"])
    blackholed["RouteTables"][0]["Routes"][1]["State"] = "blackhole"
    found, _ = findings(**{"describe-route-tables": blackholed})
    assert len(found) == 1 and "no default route" in found[0]


def test_a_security_group_every_node_has_and_the_gpu_nodes_would_not_is_a_finding():
    nodes = {
        "Reservations": [
            {"Instances": [{"SecurityGroups": [*NODE_GROUPS, {"GroupId": "sg-0cccccccccccccccc"}]}]},
            {
                "Instances": [
                    {"SecurityGroups": [*NODE_GROUPS, {"GroupId": "sg-0cccccccccccccccc"}, {"GroupId": "sg-0d"}]}
                ]
            },
        ]
    }
    found, _ = findings(**{"describe-instances": nodes})
    assert found == [
        "every running node of cluster ml-platform has security group(s) sg-0cccccccccccccccc, which warmstart's GPU "
        "nodes would not: they could not reach what those groups admit (CoreDNS, webhooks) | add them to "
        "cluster.existing.node_security_group_ids: [sg-0cccccccccccccccc]"
    ]
    assert findings(**{"describe-instances": {"Reservations": []}}) == ([], [])  # no node yet: nothing to compare


@pytest.mark.parametrize(
    "answers, said",
    [
        ({"list-access-entries": {"accessEntries": []}}, "--type EC2_LINUX"),
        ({"describe-access-entry": {"accessEntry": {"type": "STANDARD"}}}, "is of type STANDARD"),
    ],
)
def test_the_existing_karpenters_node_role_must_let_its_nodes_join(answers, said):
    found, _ = findings(**answers)
    assert len(found) == 1 and said in found[0]


def test_an_aws_auth_mapping_lets_the_node_role_in_where_the_mode_reads_the_config_map():
    mapping = {
        "data": {
            "mapRoles": "- rolearn: arn:aws:iam::345678901234:role/KarpenterNodeRole-ml-platform\n"
            "  username: system:node:{{EC2PrivateDNSName}}\n"
        }
    }
    answers = {"list-access-entries": {"accessEntries": []}, "kubectl_configmap": mapping}
    assert findings(**answers) == ([], [])
    api_only = {"describe-cluster": {"cluster": cluster(accessConfig__authenticationMode="API")}}
    found, _ = findings(**{**answers, **api_only})
    assert len(found) == 1 and "--type EC2_LINUX" in found[0]


def test_network_policy_settings_in_yaml_count_and_another_cni_is_a_note():
    assert findings(vpc_cni={"addon": {"configurationValues": "enableNetworkPolicy: 'true'\nenv: {}\n"}}) == ([], [])
    found, notes = findings(vpc_cni=NOT_FOUND, kubectl_daemonsets={"items": [daemonset("cilium")]})
    assert found == [] and "not the VPC CNI" in notes[0]


def test_an_add_on_that_cannot_be_read_is_a_note_never_an_absence():
    denied = (254, "", "An error occurred (AccessDeniedException) when calling the DescribeAddon operation")
    found, notes = findings(**{"eks-pod-identity-agent": denied})
    assert found == [] and "could not read the eks-pod-identity-agent add-on" in notes[0]


def test_a_pod_identity_agent_installed_with_helm_counts_as_present():
    helm_agent = {"items": [daemonset("eks-pod-identity-agent")]}
    assert findings(**{"eks-pod-identity-agent": NOT_FOUND, "kubectl_daemonsets": helm_agent}) == ([], [])


def test_a_karpenter_where_warmstart_would_install_its_own_is_a_finding():
    config = CONFIG.model_copy(deep=True)
    compute = config.compute.model_copy(update={"existing_controller": None})
    found, _ = findings(config.model_copy(update={"compute": compute}))
    assert len(found) == 1 and "a Karpenter runs already" in found[0]


def test_deploy_stops_on_each_finding(tmp_path):
    account = Account()
    account.answers["get-caller-identity"] = {"Account": CONFIG.account, "Arn": "arn:aws:sts::1:assumed-role/x/y"}
    account.answers["describe-cluster"] = {"cluster": cluster(version="1.34")}
    assembly = tmp_path / "assembly"
    assembly.mkdir()
    (assembly / "manifest.json").write_text(json.dumps({"artifacts": {}}))
    problems, _ = check("deploy", CONFIG, run=account, assembly=assembly)
    assert [p.fix for p in problems] == ["set cluster.kubernetes_version: '1.34'"]


def test_a_cluster_version_warmstart_does_not_support_asks_for_an_upgrade():
    found, _ = findings(**{"describe-cluster": {"cluster": cluster(version="1.31")}})
    assert len(found) == 1 and "upgrade the cluster to one of 1.34, 1.35, 1.36" in found[0]


def test_a_private_endpoint_the_cluster_has_turned_off_is_a_finding():
    found, _ = findings(**{"describe-cluster": {"cluster": cluster(resourcesVpcConfig__endpointPrivateAccess=False)}})
    assert len(found) == 1 and "endpointPrivateAccess=true" in found[0]


def _everywhere(name: str, namespace: str, *containers: dict, inits: tuple[dict, ...] = ()) -> dict:
    """A DaemonSet that tolerates every taint (as log shippers and node agents do): it lands on warmstart's nodes."""
    spec = {"containers": list(containers), "tolerations": [{"operator": "Exists"}]}
    if inits:
        spec["initContainers"] = list(inits)
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"template": {"spec": spec}}}


def _asking(cpu: str, memory: str) -> dict:
    return {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": memory}}}


def test_the_clusters_own_daemonsets_on_warmstarts_nodes_are_counted_against_the_budget():
    """existing's qwen: TP 2, 2 replicas and their rollout pod on p5.48xlarge (24 GPUs of nodes at gpu_limit 24).
    A DaemonSet within what the model counts for the add-ons changes nothing; one that leaves a node too little for
    two pods is a note while the placement still fits, and a finding once it does not."""
    from warmstart.catalog import default_catalog
    from warmstart_cli.existing_daemonsets import daemonset_findings

    catalog = default_catalog()
    small = _everywhere("fluent-bit", "logging", _asking("100m", "0"))
    assert daemonset_findings(CONFIG, catalog, {"items": [small]}) == ([], [])
    shipper = _everywhere("fluent-bit", "logging", _asking("500m", "512Mi"), inits=(_asking("2", "64Mi"),))
    found, notes = daemonset_findings(CONFIG, catalog, {"items": [shipper]})
    assert (
        found == []
        and "takes 2 CPU, 0.5 GiB of each of warmstart's GPU nodes" in notes[0]
        and "still fit gpu_limit 24" in notes[0]
    )
    # Its own (warmstart-system), or one that keeps off the pool's nodes, is not the cluster's extra.
    ours = _everywhere("warmstart-agent", "warmstart-system", _asking("180", "1Ti"))
    kept_off = _everywhere("fluent-bit", "logging", _asking("180", "1Ti"))
    kept_off["spec"]["template"]["spec"]["nodeSelector"] = {"team": "research"}
    assert daemonset_findings(CONFIG, catalog, {"items": [ours, kept_off]}) == ([], [])
    # A node left with too little for a pod: refused, with the way out.
    hungry = _everywhere("scanner", "security", _asking("160", "0"))  # leaves 31.35 CPUs; qwen asks 36
    (finding,), _ = daemonset_findings(CONFIG, catalog, {"items": [hungry]})
    assert "no longer fits a node" in finding.message
    assert "warmstart.io/gpu-pool (node affinity DoesNotExist)" in finding.fix
    # make diff and make deploy read them through the cluster's API.
    found, _ = findings(kubectl_daemonsets={"items": [hungry]})
    assert len(found) == 1 and "takes 160 CPU, 0 GiB of each of warmstart's GPU nodes (security/scanner)" in found[0]


def test_the_clusters_daemonsets_can_push_the_models_past_gpu_limit():
    from warmstart.catalog import default_catalog
    from warmstart_cli.existing_daemonsets import daemonset_findings

    prod = load_config(ROOT / "config" / "prod.yaml")
    at_the_limit = prod.model_copy(
        update={
            "compute": prod.compute.model_copy(
                update={"gpu_pool": prod.compute.gpu_pool.model_copy(update={"gpu_limit": 40})}
            )
        }
    )
    # prod's llama and qwen share nodes at 72 + 36 CPUs; 90 more CPUs a node leave room for one of them: 64 GPUs.
    heavy = _everywhere("agent", "monitoring", _asking("90", "0"))
    (finding,), _ = daemonset_findings(at_the_limit, default_catalog(), {"items": [heavy]})
    assert "need 64 GPUs of nodes" in finding.message and "above gpu_limit 40" in finding.message
    assert "set compute.gpu_pool.gpu_limit to at least 64" in finding.fix


@pytest.mark.parametrize(
    "requests",
    [{"cpu": "-1"}, {"memory": "1Pi0"}, {"cpu": ["1"]}, {"memory": "9" * 70}, {"cpu": "1e99"}, "not a mapping"],
)
def test_hostile_daemonset_requests_stop_the_deploy_never_a_guess(requests):
    """The API server stores only quantities it parsed: one warmstart cannot read is neither counted nor left out."""
    from warmstart.catalog import default_catalog
    from warmstart_cli.existing_daemonsets import daemonset_findings

    odd = _everywhere("odd", "kube-system", {"name": "c", "resources": {"requests": requests}})
    (finding,), notes = daemonset_findings(CONFIG, default_catalog(), {"items": [odd]})
    assert "kube-system/odd" in finding.message and "no Kubernetes quantity" in finding.message and notes == []


@pytest.mark.parametrize(
    ("pod", "requests"),
    [
        # Limits stand in for missing requests (the API server's defaulting of a pod, Karpenter's of a template).
        ({"containers": [{"resources": {"limits": {"cpu": "200m", "memory": "1Gi"}}}]}, (200, 1024)),
        (
            {"containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "64Mi"}}}]},
            (1000, 64),
        ),
        # Quantities as the API server may write them.
        ({"containers": [{"resources": {"requests": {"cpu": "1500e-3", "memory": "129e6"}}}]}, (1500, 124)),
        ({"containers": [{"resources": {"requests": {"cpu": "250000u", "memory": "1G"}}}]}, (250, 954)),
        # An init container runs alone (beside the sidecars before it); sidecars add to the containers' sum.
        (
            {
                "containers": [{"resources": {"requests": {"cpu": "100m"}}}],
                "initContainers": [
                    {"restartPolicy": "Always", "resources": {"requests": {"cpu": "50m", "memory": "10Mi"}}},
                    {"resources": {"requests": {"cpu": "500m", "memory": "5Mi"}}},
                ],
            },
            (550, 15),
        ),
        # Pod-level requests replace the containers' sum; overhead is added.
        (
            {
                "containers": [{"resources": {"requests": {"cpu": "100m"}}}],
                "resources": {"requests": {"cpu": "2"}},
                "overhead": {"cpu": "250m", "memory": "120Mi"},
            },
            (2250, 120),
        ),
    ],
)
def test_a_daemonsets_pod_requests_are_the_schedulers(pod, requests):
    from warmstart.node_model import Resources
    from warmstart_cli.existing_daemonsets import pod_requests

    assert pod_requests(pod) == Resources(*requests)


def test_the_pools_nodes_carry_karpenters_labels_for_each_type_capacity_and_zone():
    from warmstart_cli.existing_cluster_objects import gpu_node_label_sets

    prod = load_config(ROOT / "config" / "prod.yaml")
    sets = gpu_node_label_sets(prod)
    assert len(sets) == 1 * 2 * 3  # p5.48xlarge; on-demand and reserved; three zones
    assert {s["karpenter.sh/capacity-type"] for s in sets} == {"on-demand", "reserved"}
    assert all(
        s["karpenter.k8s.aws/instance-gpu-name"] == "h100" and s["karpenter.sh/nodepool"] == "gpu-karpenter"
        for s in sets
    )
    assert {s["karpenter.sh/nodepool"] for s in gpu_node_label_sets(CONFIG)} == {"warmstart-gpu-karpenter"}
    auto = gpu_node_label_sets(config_of("existing-auto-mode"))
    assert all(
        s["eks.amazonaws.com/compute-type"] == "auto" and "eks.amazonaws.com/instance-gpu-name" in s for s in auto
    )
    # A GPU monitoring DaemonSet that selects nodes with more than 4 GPUs (Gt) is counted on p5's 8.
    monitor = _everywhere("dcgm", "monitoring", _asking("160", "0"))
    monitor["spec"]["template"]["spec"].update(
        _requiring({"key": "karpenter.k8s.aws/instance-gpu-count", "operator": "Gt", "values": ["4"]})
    )
    from warmstart.catalog import default_catalog
    from warmstart_cli.existing_daemonsets import daemonset_findings

    assert len(daemonset_findings(CONFIG, default_catalog(), {"items": [monitor]})[0]) == 1


def test_the_device_plugin_warmstart_installs_keeps_off_other_teams_gpu_nodes():
    from warmstart_cli.existing_cluster_objects import gpu_node_label_sets, runs_on

    placement = device_plugin_placement()
    assert all(runs_on(placement, labels) for labels in gpu_node_label_sets(CONFIG))
    team_node = {**gpu_node_label_sets(CONFIG)[0], "karpenter.sh/nodepool": "team-gpu"}
    del team_node["warmstart.io/gpu-pool"]
    assert not runs_on(placement, team_node)


@pytest.mark.parametrize(("value", "read"), [("0.2", 0.2), ("0.075", 0.075), ("lots", None), ("2", None), ("", None)])
def test_the_existing_karpenters_vm_memory_overhead_is_read_and_counted(value, read):
    """Karpenter takes a node to have its memory less VM_MEMORY_OVERHEAD_PERCENT until it has seen one: a team's
    larger setting leaves warmstart's pods less room than the node model's 0.075."""
    from warmstart.catalog import default_catalog
    from warmstart_cli.existing_cluster_objects import karpenter_vm_memory_overhead
    from warmstart_cli.existing_daemonsets import daemonset_findings

    namespace = CONFIG.compute.existing_controller.namespace
    deployment = {
        "metadata": {"name": "karpenter", "namespace": namespace, "labels": {"app.kubernetes.io/name": "karpenter"}},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "controller", "env": [{"name": "VM_MEMORY_OVERHEAD_PERCENT", "value": value}]}
                    ]
                }
            }
        },
    }
    assert karpenter_vm_memory_overhead(CONFIG, {"items": [deployment]}) == read
    catalog = default_catalog()
    # p5.48xlarge: 0.2 takes 256 GiB more; qwen's 384 GiB pods still fit, one a node. 0.9 leaves 212 GiB: no pod fits.
    found, notes = daemonset_findings(CONFIG, catalog, {"items": []}, 0.2)
    assert found == [] and "VM_MEMORY_OVERHEAD_PERCENT=0.2" in notes[0] and "0 CPU, 256 GiB more" in notes[0]
    (finding,), _ = daemonset_findings(CONFIG, catalog, {"items": []}, 0.9)
    assert "no longer fits a node" in finding.message


def test_workloads_that_read_a_parent_of_the_roots_writably_below_are_findings():
    """Issue 45: a read-only `/` leaves the NVMe array's mount writable to root. node-exporter's chart (4.56.1) runs
    as 65534 and may escalate; its new pods would be refused once warmstart's policy is in force."""
    exporter_pod = {
        "securityContext": {"runAsUser": 65534, "runAsNonRoot": True},
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
    }
    mount = {"name": "root", "mountPath": "/host/root", "readOnly": True, "mountPropagation": "HostToContainer"}
    exporter = daemonset("node-exporter", "monitoring", **exporter_pod)
    exporter["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [mount]
    found, _ = findings(CONFIG, kubectl_daemonsets={"items": [exporter]})
    (finding,) = [f for f in found if "node-exporter" in f]
    assert "monitoring/node-exporter" in finding and "allowPrivilegeEscalation: false" in finding
    exporter["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"allowPrivilegeEscalation": False}
    assert not [f for f in findings(CONFIG, kubectl_daemonsets={"items": [exporter]})[0] if "node-exporter" in f]
    root_reader = daemonset("debug", "team-a", volumes=[{"name": "h", "hostPath": {"path": "/mnt"}}])
    root_reader["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "h", "mountPath": "/h", "readOnly": True}
    ]
    found, _ = findings(CONFIG, **{"kubectl deployments,statefulsets": {"items": [root_reader]}})
    assert [f for f in found if "team-a/debug" in f and "mounts /mnt and may run as root" in f]
