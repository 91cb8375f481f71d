"""What synth cannot know about an existing cluster and VPC without a lookup, checked against the account before
`make diff/deploy` changes anything: that they are what the config says, and that nothing there would lose the
speed-up (S3 through the NAT gateways, pods without their roles, a Karpenter that ignores warmstart's node class).

Every answer (of the AWS CLI, of the cluster's API) is read as untrusted: a field of the wrong type is "not what the
config says", never a crash. The commands run through `run` (tests pass their own answers).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from warmstart.catalog import default_catalog
from warmstart.config.base import SUPPORTED_KUBERNETES_VERSIONS
from warmstart.config.compute import AutoModeCompute, KarpenterCompute
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.network import ExistingVpc
from warmstart.problem import Problem
from warmstart_cli import existing_cluster_objects as objects
from warmstart_cli.existing_cluster_objects import field
from warmstart_cli.existing_daemonsets import daemonset_findings
from warmstart_cli.host_root_mounts import host_root_findings

Runner = Callable[[list[str]], tuple[int, str, str]]
# Authentication modes that accept access entries (EKS API, AccessConfigResponse.authenticationMode).
ACCESS_ENTRY_MODES = ("API", "API_AND_CONFIG_MAP")


def _json(run: Runner, command: list[str]) -> tuple[Any, str]:
    """(the parsed answer or None, the last line of the error when the command failed)."""
    code, out, err = run([*command, "--output", "json"] if command[0] == "aws" else command)
    if code != 0:
        lines = (err or out).strip().splitlines()
        return None, lines[-1] if lines else f"exit status {code}"
    try:
        return json.loads(out), ""
    except ValueError:
        return None, "an answer that is not JSON"


def cluster_findings(config: EnvironmentConfig, cluster: dict) -> list[Problem]:
    """The existing cluster (DescribeCluster's `cluster`) against the config."""
    existing = config.cluster.existing
    assert existing is not None
    name = config.cluster.name
    found: list[Problem] = []
    version = field(cluster, "version")
    if version != config.cluster.kubernetes_version:
        supported = version in SUPPORTED_KUBERNETES_VERSIONS
        found.append(
            Problem(
                "",
                f"cluster {name} runs Kubernetes {version}, and the config says {config.cluster.kubernetes_version} "
                "(the version warmstart's manifests are checked against, and its kubectl speaks)",
                f"set cluster.kubernetes_version: {version!r}"
                if supported
                else f"upgrade the cluster to one of {', '.join(SUPPORTED_KUBERNETES_VERSIONS)} (warmstart's kubectl "
                "and schemas cover those), then set cluster.kubernetes_version to it",
            )
        )
    vpc = field(cluster, "resourcesVpcConfig", "vpcId")
    if config.network.existing is not None and vpc != config.network.existing.vpc_id:
        found.append(
            Problem(
                "",
                f"cluster {name} is in VPC {vpc}, and network.existing.vpc_id says {config.network.existing.vpc_id}",
                f"set network.existing.vpc_id: {vpc} and list that VPC's private subnets",
            )
        )
    group = field(cluster, "resourcesVpcConfig", "clusterSecurityGroupId")
    if group != existing.security_group_id:
        found.append(
            Problem(
                "",
                f"cluster {name}'s cluster security group is {group}, and the config says {existing.security_group_id}"
                " (GPU nodes without it cannot reach the control plane or the other nodes)",
                f"set cluster.existing.security_group_id: {group}",
            )
        )
    found += _endpoint_findings(config, cluster)
    found += _compute_findings(config, cluster)
    mode = field(cluster, "accessConfig", "authenticationMode")
    needs_entries = existing.kubernetes_objects == "cdk" or (
        isinstance(config.compute, KarpenterCompute) and config.compute.existing_controller is None
    )
    if needs_entries and mode not in ACCESS_ENTRY_MODES:
        found.append(
            Problem(
                "",
                f"cluster {name} authenticates through the aws-auth ConfigMap only ({mode}): the access entries "
                "warmstart creates (its kubectl handler; the nodes of its Karpenter) would not let anyone in",
                f"aws eks update-cluster-config --name {name} --region {config.region} --access-config "
                "authenticationMode=API_AND_CONFIG_MAP (keeps the ConfigMap's mappings)",
            )
        )
    return found


def _endpoint_findings(config: EnvironmentConfig, cluster: dict) -> list[Problem]:
    """The kubectl handler runs in the private subnets with `private` (the private endpoint must be on), outside the
    VPC with public_and_private (the public endpoint must take it from anywhere)."""
    if not config.cluster.applies_kubernetes_objects:
        return []
    if config.cluster.endpoint_access == "private":
        if field(cluster, "resourcesVpcConfig", "endpointPrivateAccess") is True:
            return []
        return [
            Problem(
                "",
                f"cluster {config.cluster.name}'s private endpoint is off, and endpoint_access: private runs "
                "warmstart's kubectl handler in the private subnets, which would leave through the NAT",
                f"aws eks update-cluster-config --name {config.cluster.name} --region {config.region} "
                "--resources-vpc-config endpointPrivateAccess=true; or set endpoint_access: public_and_private if "
                "the public endpoint is open to any address",
            )
        ]
    public = field(cluster, "resourcesVpcConfig", "endpointPublicAccess")
    cidrs = field(cluster, "resourcesVpcConfig", "publicAccessCidrs")
    if public is True and cidrs in (None, ["0.0.0.0/0"]):
        return []
    return [
        Problem(
            "",
            f"cluster {config.cluster.name}'s endpoint is not open to the public internet (public access {public}, "
            f"from {cidrs}), and endpoint_access: public_and_private runs warmstart's kubectl handler outside the VPC",
            "set cluster.endpoint_access: private (the handler then runs in the private subnets, with the cluster "
            "security group)",
        )
    ]


def _compute_findings(config: EnvironmentConfig, cluster: dict) -> list[Problem]:
    enabled = field(cluster, "computeConfig", "enabled") is True
    compute = config.compute
    name = config.cluster.name
    if isinstance(compute, AutoModeCompute) and not enabled:
        return [
            Problem("", f"cluster {name} does not run EKS Auto Mode", "set compute.mode: karpenter (and describe it)")
        ]
    if isinstance(compute, KarpenterCompute) and enabled:
        return [
            Problem(
                "",
                f"cluster {name} runs EKS Auto Mode, and the config says karpenter",
                "set compute.mode: auto with the cluster's node_role_name",
            )
        ]
    if not isinstance(compute, AutoModeCompute):
        return []
    found = []
    said = {"nodeRoleArn": ("compute.node_role_name", compute.node_role_name)}
    if compute.cluster_role_name:
        said["roleArn"] = ("compute.cluster_role_name", compute.cluster_role_name)
    for key, (setting, wanted) in said.items():
        arn = field(cluster, "computeConfig", key) if key == "nodeRoleArn" else field(cluster, key)
        if not (isinstance(arn, str) and arn.rpartition("/")[2] == wanted):
            found.append(
                Problem(
                    "",
                    f"cluster {name}'s {key} is {arn}, and {setting} says {wanted}",
                    f"set {setting} to the role's name (the part after the last /)",
                )
            )
    return found


def route_table_of_each_subnet(tables: Any, vpc_id: str) -> dict[str, str]:
    """subnet ID -> its route table (an explicit association, else the VPC's main table) from DescribeRouteTables;
    the main table under the key '' ."""
    found: dict[str, str] = {}
    for table in tables if isinstance(tables, list) else []:
        table_id = field(table, "RouteTableId")
        associations = field(table, "Associations")
        if not isinstance(table_id, str) or field(table, "VpcId") not in (None, vpc_id):
            continue
        for association in associations if isinstance(associations, list) else []:
            if field(association, "Main") is True:
                found[""] = table_id
            elif isinstance(field(association, "SubnetId"), str):
                found[association["SubnetId"]] = table_id
    return found


def network_findings(config: EnvironmentConfig, subnets: Any, tables: Any, endpoints: Any) -> list[Problem]:
    """The existing VPC's subnets, their route tables and its S3 gateway endpoints against the config."""
    existing = config.network.existing
    assert existing is not None
    found: list[Problem] = []
    listed = {field(s, "SubnetId"): s for s in subnets if isinstance(s, dict)} if isinstance(subnets, list) else {}
    routes = route_table_of_each_subnet(tables, existing.vpc_id)
    for subnet in existing.private_subnets:
        answer = listed.get(subnet.id)
        zone, vpc = field(answer, "AvailabilityZone"), field(answer, "VpcId")
        if answer is None or vpc != existing.vpc_id:
            found.append(
                Problem("", f"subnet {subnet.id} is not in VPC {existing.vpc_id}", "list the VPC's own subnets")
            )
            continue
        if zone != subnet.availability_zone:
            found.append(Problem("", f"subnet {subnet.id} is in {zone}", f"set its availability_zone: {zone}"))
        table = routes.get(subnet.id, routes.get(""))
        if table != subnet.route_table_id:
            found.append(
                Problem(
                    "",
                    f"subnet {subnet.id} routes through {table}, not {subnet.route_table_id} (an endpoint on the "
                    "wrong table leaves S3 traffic on the NAT gateways)",
                    f"set its route_table_id: {table}",
                )
            )
    return found + _endpoint_coverage(config, existing, endpoints) + egress_findings(config, tables)


# Targets of a default route that reach the internet or another network from a private subnet.
EGRESS_TARGETS = ("NatGatewayId", "TransitGatewayId", "NetworkInterfaceId", "VpcPeeringConnectionId", "InstanceId")


def egress_findings(config: EnvironmentConfig, tables: Any) -> list[Problem]:
    """Each listed route table's default route: the kubectl handler calls the EKS, STS and Lambda APIs and Helm
    repositories, the GPU nodes pull their images; a private subnet reaches them through a NAT (or a transit
    gateway, a peering, an appliance)."""
    existing = config.network.existing
    assert existing is not None
    by_id = {field(t, "RouteTableId"): t for t in tables if isinstance(t, dict)} if isinstance(tables, list) else {}
    found = []
    for table_id in existing.route_table_ids:
        routes = field(by_id.get(table_id), "Routes")
        default = [
            r
            for r in (routes if isinstance(routes, list) else [])
            if isinstance(r, dict) and r.get("DestinationCidrBlock") == "0.0.0.0/0" and r.get("State") != "blackhole"
        ]
        if any(str(r.get("GatewayId", "")).startswith("igw-") for r in default):
            found.append(
                Problem(
                    "",
                    f"route table {table_id} sends 0.0.0.0/0 to an internet gateway: its subnets are public, and "
                    "nodes there get no public address from warmstart's node class",
                    "list private subnets (their default route through a NAT gateway) under network.existing",
                )
            )
        elif not any(isinstance(r.get(target), str) for r in default for target in EGRESS_TARGETS):
            found.append(
                Problem(
                    "",
                    f"route table {table_id} has no default route: the kubectl handler could not reach the EKS, STS "
                    "and Lambda APIs, nor the GPU nodes pull their images",
                    "add a default route through a NAT gateway (or a transit gateway); in a VPC without one, add "
                    "interface endpoints for eks, sts, lambda, ecr.api and ecr.dkr, and mirror every image into ECR",
                )
            )
    return found


def node_group_findings(config: EnvironmentConfig, reservations: Any) -> list[Problem]:
    """Security groups every running node of the cluster has (DescribeInstances), which the GPU nodes would not:
    what those groups admit (CoreDNS, metrics-server, the webhooks) the GPU nodes could not reach."""
    existing = config.cluster.existing
    assert existing is not None
    groups: list[set[str]] = []
    for reservation in reservations if isinstance(reservations, list) else []:
        for instance in field(reservation, "Instances") or []:
            attached = field(instance, "SecurityGroups")
            if isinstance(attached, list):
                groups.append({str(g["GroupId"]) for g in attached if isinstance(g, dict) and g.get("GroupId")})
    if not groups:
        return []
    missing = sorted(set.intersection(*groups) - {existing.security_group_id, *existing.node_security_group_ids})
    if not missing:
        return []
    return [
        Problem(
            "",
            f"every running node of cluster {config.cluster.name} has security group(s) {', '.join(missing)}, which "
            "warmstart's GPU nodes would not: they could not reach what those groups admit (CoreDNS, webhooks)",
            f"add them to cluster.existing.node_security_group_ids: [{', '.join(missing)}]",
        )
    ]


def _endpoint_coverage(config: EnvironmentConfig, existing: ExistingVpc, endpoints: Any) -> list[Problem]:
    covered: set[str] = set()
    for endpoint in endpoints if isinstance(endpoints, list) else []:
        tables = field(endpoint, "RouteTableIds")
        if field(endpoint, "VpcEndpointType") == "Gateway" and isinstance(tables, list):
            covered |= {table for table in tables if isinstance(table, str)}
    wanted = existing.route_table_ids
    missing = [table for table in wanted if table not in covered]
    if existing.s3_gateway_endpoint == "present" and missing:
        return [
            Problem(
                "",
                f"no S3 gateway endpoint on route table(s) {', '.join(missing)}: weights would cross the NAT gateways",
                "set network.existing.s3_gateway_endpoint: add (warmstart adds one to every listed table), or add "
                "the tables to your endpoint: aws ec2 modify-vpc-endpoint --vpc-endpoint-id <id> "
                f"--add-route-table-ids {' '.join(missing)} --region {config.region}",
            )
        ]
    if existing.s3_gateway_endpoint == "add" and len(missing) < len(wanted):
        return [
            Problem(
                "",
                f"route table(s) {', '.join(t for t in wanted if t in covered)} have an S3 gateway endpoint already, "
                "and EC2 refuses a second S3 route on a table",
                "set network.existing.s3_gateway_endpoint: present (and add the other tables to that endpoint)",
            )
        ]
    return []


class ClusterApi:
    """kubectl against the existing cluster's endpoint with a token of the caller's credentials, in a kubeconfig
    file only the caller reads (no kubeconfig of the user's is read or written; no token in any argument). Every
    read answers (the parsed JSON, '') or (None, why), e.g. a private endpoint seen from outside the VPC."""

    def __init__(self, config: EnvironmentConfig, cluster: dict, run: Runner) -> None:
        self.run = run
        self.endpoint = field(cluster, "endpoint")
        self.authority = field(cluster, "certificateAuthority", "data")
        token, self.error = _json(
            run, ["aws", "eks", "get-token", "--cluster-name", config.cluster.name, "--region", config.region]
        )
        self.token = field(token, "status", "token")

    def get(self, *args: str) -> tuple[Any, str]:
        if not (isinstance(self.endpoint, str) and isinstance(self.authority, str) and isinstance(self.token, str)):
            return None, self.error or "no endpoint or token"
        with tempfile.TemporaryDirectory() as folder:
            kubeconfig = Path(folder) / "kubeconfig"
            kubeconfig.touch(mode=0o600)
            kubeconfig.write_text(json.dumps(_kubeconfig(self.endpoint, self.authority, self.token)))
            return _json(
                self.run,
                [
                    "kubectl",
                    "--kubeconfig",
                    str(kubeconfig),
                    "--request-timeout",
                    "20s",
                    "get",
                    *args,
                    "--output",
                    "json",
                ],
            )


def _kubeconfig(endpoint: str, authority: str, token: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "existing", "cluster": {"server": endpoint, "certificate-authority-data": authority}}],
        "users": [{"name": "preflight", "user": {"token": token}}],
        "contexts": [{"name": "preflight", "context": {"cluster": "existing", "user": "preflight"}}],
        "current-context": "preflight",
    }


def _unreadable(what: str, error: str) -> str:
    return (
        f"could not read {what} from the cluster ({error}); a private endpoint answers only inside the VPC: run "
        "make preflight there, or check it by hand"
    )


def read_existing(config: EnvironmentConfig, run: Runner) -> tuple[list[Problem], list[str]]:
    """(findings, notes): every check the account can answer; a check it cannot answer is a note."""
    name = config.cluster.name
    described, error = _json(run, ["aws", "eks", "describe-cluster", "--name", name, "--region", config.region])
    if described is None:
        if "ResourceNotFoundException" in error:
            return [
                Problem(
                    "",
                    f"cluster {name} does not exist in {config.region}",
                    "check cluster.name and region, or remove cluster.existing to let warmstart create the cluster",
                )
            ], []
        return [], [f"could not read cluster {name} ({error}); its checks were skipped"]
    cluster = field(described, "cluster") or {}
    findings, notes = cluster_findings(config, cluster), []
    for check in (_read_network, _read_nodes, _read_in_cluster):
        more, said = check(config, cluster, run)
        findings += more
        notes += said
    return findings, notes


def _read_network(config: EnvironmentConfig, cluster: dict, run: Runner) -> tuple[list[Problem], list[str]]:
    network = config.network.existing
    if network is None:
        return [], []
    region = ["--region", config.region]
    ids = [subnet.id for subnet in network.private_subnets]
    in_vpc = ["--filters", f"Name=vpc-id,Values={network.vpc_id}"]
    s3 = f"Name=service-name,Values=com.amazonaws.{config.region}.s3"
    subnets, e1 = _json(run, ["aws", "ec2", "describe-subnets", "--subnet-ids", *ids, *region])
    tables, e2 = _json(run, ["aws", "ec2", "describe-route-tables", *in_vpc, *region])
    endpoints, e3 = _json(run, ["aws", "ec2", "describe-vpc-endpoints", *in_vpc, s3, *region])
    if e1 or e2 or e3:
        return [], [f"could not read the VPC's subnets, route tables or endpoints ({e1 or e2 or e3})"]
    return network_findings(
        config, field(subnets, "Subnets"), field(tables, "RouteTables"), field(endpoints, "VpcEndpoints")
    ), []


def _read_nodes(config: EnvironmentConfig, cluster: dict, run: Runner) -> tuple[list[Problem], list[str]]:
    """The security groups of the cluster's running nodes (Auto Mode tags its instances eks:eks-cluster-name, node
    groups and Karpenter kubernetes.io/cluster/<name>)."""
    name = config.cluster.name
    tag = (
        f"Name=tag:eks:eks-cluster-name,Values={name}"
        if isinstance(config.compute, AutoModeCompute)
        else f"Name=tag-key,Values=kubernetes.io/cluster/{name}"
    )
    command = ["aws", "ec2", "describe-instances", "--filters", tag, "Name=instance-state-name,Values=running"]
    instances, error = _json(run, [*command, "--region", config.region])
    if instances is None:
        return [], [f"could not read the cluster's nodes ({error}); their security groups were not compared"]
    return node_group_findings(config, field(instances, "Reservations")), []


def _read_in_cluster(config: EnvironmentConfig, cluster: dict, run: Runner) -> tuple[list[Problem], list[str]]:
    """Karpenter clusters: the add-ons (EKS add-on, else the DaemonSet), the device plugin, the controller and its
    nodes' access; Auto Mode runs all of them itself. Both: the cluster's own DaemonSets on warmstart's nodes."""
    compute = config.compute
    api = ClusterApi(config, cluster, run)
    daemonsets, why = api.get("daemonsets", "--all-namespaces")
    workloads, why_workloads = api.get("deployments,statefulsets", "--all-namespaces")
    mounts = host_root_findings(config, daemonsets) + host_root_findings(config, workloads)
    mount_notes = [_unreadable("the Deployments and StatefulSets", why_workloads)] if workloads is None else []
    if not isinstance(compute, KarpenterCompute):
        found, said = daemonset_findings(config, default_catalog(), daemonsets)
        return mounts + found, ([_unreadable("the DaemonSets", why)] if daemonsets is None else []) + mount_notes + said
    deployments, why_not = api.get("deployments", "--all-namespaces", "--selector", "app.kubernetes.io/name=karpenter")
    notes = [_unreadable("the DaemonSets", why)] if daemonsets is None else []
    notes += [_unreadable("the Karpenter Deployments", why_not)] if deployments is None else []
    results = [
        objects.pod_identity_findings(config, _addon(config, run, "eks-pod-identity-agent"), daemonsets),
        objects.network_policy_findings(config, _addon(config, run, "vpc-cni"), daemonsets),
        objects.device_plugin_findings(config, daemonsets),
        daemonset_findings(
            config, default_catalog(), daemonsets, objects.karpenter_vm_memory_overhead(config, deployments)
        ),
        objects.karpenter_findings(config, deployments),
    ]
    if compute.existing_controller is not None:
        aws_auth, _ = api.get("configmap", "aws-auth", "--namespace", "kube-system")
        entry = _access_entry_type(config, run, compute.existing_controller.node_role_name)
        mode = field(cluster, "accessConfig", "authenticationMode")
        results.append(objects.node_access_findings(config, entry, mode, aws_auth))
    findings = mounts + [f for found, _ in results for f in found]
    said = [n for _, more in results for n in more]
    return findings, notes + mount_notes + list(dict.fromkeys(said))


def _addon(config: EnvironmentConfig, run: Runner, addon: str) -> Any:
    """DescribeAddon's `addon`; {} when the cluster has no such EKS add-on; None when it could not be read."""
    command = ["aws", "eks", "describe-addon", "--cluster-name", config.cluster.name, "--addon-name", addon]
    answer, error = _json(run, [*command, "--region", config.region])
    if answer is None:
        return {} if "ResourceNotFoundException" in error else None
    return field(answer, "addon") or None


def _access_entry_type(config: EnvironmentConfig, run: Runner, role: str) -> Any:
    """The type of the role's access entry ('' when it has none; None when unreadable), whatever its path."""
    region = ["--region", config.region]
    listed, _ = _json(run, ["aws", "eks", "list-access-entries", "--cluster-name", config.cluster.name, *region])
    arns = field(listed, "accessEntries")
    if not isinstance(arns, list):
        return None
    matching = [a for a in arns if isinstance(a, str) and a.rpartition("/")[2] == role and ":role/" in a]
    if not matching:
        return ""
    command = ["aws", "eks", "describe-access-entry", "--cluster-name", config.cluster.name]
    entry, _ = _json(run, [*command, "--principal-arn", matching[0], *region])
    entry_type = field(entry, "accessEntry", "type")
    return entry_type if isinstance(entry_type, str) else None
