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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warmstart.config import AutoModeCompute, EnvironmentConfig, ExistingVpc, KarpenterCompute

Runner = Callable[[list[str]], tuple[int, str, str]]
# Authentication modes that accept access entries (EKS API, AccessConfigResponse.authenticationMode).
ACCESS_ENTRY_MODES = ("API", "API_AND_CONFIG_MAP")


@dataclass(frozen=True)
class Finding:
    what: str
    fix: str


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


def _field(document: Any, *path: str) -> Any:
    for key in path:
        document = document.get(key) if isinstance(document, dict) else None
    return document


def cluster_findings(config: EnvironmentConfig, cluster: dict) -> list[Finding]:
    """The existing cluster (DescribeCluster's `cluster`) against the config."""
    existing = config.cluster.existing
    assert existing is not None
    name = config.cluster.name
    found: list[Finding] = []
    version = _field(cluster, "version")
    if version != config.cluster.kubernetes_version:
        found.append(
            Finding(
                f"cluster {name} runs Kubernetes {version}, and the config says {config.cluster.kubernetes_version} "
                "(the version warmstart's manifests are checked against, and its kubectl speaks)",
                f"set cluster.kubernetes_version: {version!r}",
            )
        )
    vpc = _field(cluster, "resourcesVpcConfig", "vpcId")
    if config.network.existing is not None and vpc != config.network.existing.vpc_id:
        found.append(
            Finding(
                f"cluster {name} is in VPC {vpc}, and network.existing.vpc_id says {config.network.existing.vpc_id}",
                f"set network.existing.vpc_id: {vpc} and list that VPC's private subnets",
            )
        )
    group = _field(cluster, "resourcesVpcConfig", "clusterSecurityGroupId")
    if group != existing.security_group_id:
        found.append(
            Finding(
                f"cluster {name}'s cluster security group is {group}, and the config says {existing.security_group_id}"
                " (GPU nodes without it cannot reach the control plane or the other nodes)",
                f"set cluster.existing.security_group_id: {group}",
            )
        )
    found += _endpoint_findings(config, cluster)
    found += _compute_findings(config, cluster)
    mode = _field(cluster, "accessConfig", "authenticationMode")
    needs_entries = existing.kubernetes_objects == "cdk" or (
        isinstance(config.compute, KarpenterCompute) and config.compute.existing_controller is None
    )
    if needs_entries and mode not in ACCESS_ENTRY_MODES:
        found.append(
            Finding(
                f"cluster {name} authenticates through the aws-auth ConfigMap only ({mode}): the access entries "
                "warmstart creates (its kubectl handler; the nodes of its Karpenter) would not let anyone in",
                f"aws eks update-cluster-config --name {name} --region {config.region} --access-config "
                "authenticationMode=API_AND_CONFIG_MAP (keeps the ConfigMap's mappings)",
            )
        )
    return found


def _endpoint_findings(config: EnvironmentConfig, cluster: dict) -> list[Finding]:
    """The kubectl handler runs outside the VPC with public_and_private: the endpoint must take it from anywhere."""
    if config.cluster.endpoint_access == "private" or not config.cluster.applies_kubernetes_objects:
        return []
    public = _field(cluster, "resourcesVpcConfig", "endpointPublicAccess")
    cidrs = _field(cluster, "resourcesVpcConfig", "publicAccessCidrs")
    if public is True and cidrs in (None, ["0.0.0.0/0"]):
        return []
    return [
        Finding(
            f"cluster {config.cluster.name}'s endpoint is not open to the public internet (public access {public}, "
            f"from {cidrs}), and endpoint_access: public_and_private runs warmstart's kubectl handler outside the VPC",
            "set cluster.endpoint_access: private (the handler then runs in the private subnets, with the cluster "
            "security group)",
        )
    ]


def _compute_findings(config: EnvironmentConfig, cluster: dict) -> list[Finding]:
    enabled = _field(cluster, "computeConfig", "enabled") is True
    compute = config.compute
    name = config.cluster.name
    if isinstance(compute, AutoModeCompute) and not enabled:
        return [Finding(f"cluster {name} does not run EKS Auto Mode", "set compute.mode: karpenter (and describe it)")]
    if isinstance(compute, KarpenterCompute) and enabled:
        return [
            Finding(
                f"cluster {name} runs EKS Auto Mode, and the config says karpenter",
                "set compute.mode: auto with the cluster's node_role_name",
            )
        ]
    role = _field(cluster, "computeConfig", "nodeRoleArn")
    if isinstance(compute, AutoModeCompute) and not (
        isinstance(role, str) and role.rpartition("/")[2] == compute.node_role_name
    ):
        return [
            Finding(
                f"cluster {name}'s Auto Mode node role is {role}, and compute.node_role_name says "
                f"{compute.node_role_name}",
                "set compute.node_role_name to the role's name (the part after the last /)",
            )
        ]
    return []


def route_table_of_each_subnet(tables: Any, vpc_id: str) -> dict[str, str]:
    """subnet ID -> its route table (an explicit association, else the VPC's main table) from DescribeRouteTables;
    the main table under the key '' ."""
    found: dict[str, str] = {}
    for table in tables if isinstance(tables, list) else []:
        table_id = _field(table, "RouteTableId")
        associations = _field(table, "Associations")
        if not isinstance(table_id, str) or _field(table, "VpcId") not in (None, vpc_id):
            continue
        for association in associations if isinstance(associations, list) else []:
            if _field(association, "Main") is True:
                found[""] = table_id
            elif isinstance(_field(association, "SubnetId"), str):
                found[association["SubnetId"]] = table_id
    return found


def network_findings(config: EnvironmentConfig, subnets: Any, tables: Any, endpoints: Any) -> list[Finding]:
    """The existing VPC's subnets, their route tables and its S3 gateway endpoints against the config."""
    existing = config.network.existing
    assert existing is not None
    found: list[Finding] = []
    listed = {_field(s, "SubnetId"): s for s in subnets if isinstance(s, dict)} if isinstance(subnets, list) else {}
    routes = route_table_of_each_subnet(tables, existing.vpc_id)
    for subnet in existing.private_subnets:
        answer = listed.get(subnet.id)
        zone, vpc = _field(answer, "AvailabilityZone"), _field(answer, "VpcId")
        if answer is None or vpc != existing.vpc_id:
            found.append(Finding(f"subnet {subnet.id} is not in VPC {existing.vpc_id}", "list the VPC's own subnets"))
            continue
        if zone != subnet.availability_zone:
            found.append(Finding(f"subnet {subnet.id} is in {zone}", f"set its availability_zone: {zone}"))
        table = routes.get(subnet.id, routes.get(""))
        if table != subnet.route_table_id:
            found.append(
                Finding(
                    f"subnet {subnet.id} routes through {table}, not {subnet.route_table_id} (an endpoint on the "
                    "wrong table leaves S3 traffic on the NAT gateways)",
                    f"set its route_table_id: {table}",
                )
            )
    return found + _endpoint_coverage(config, existing, endpoints)


def _endpoint_coverage(config: EnvironmentConfig, existing: ExistingVpc, endpoints: Any) -> list[Finding]:
    covered: set[str] = set()
    for endpoint in endpoints if isinstance(endpoints, list) else []:
        tables = _field(endpoint, "RouteTableIds")
        if _field(endpoint, "VpcEndpointType") == "Gateway" and isinstance(tables, list):
            covered |= {table for table in tables if isinstance(table, str)}
    wanted = existing.route_table_ids
    missing = [table for table in wanted if table not in covered]
    if existing.s3_gateway_endpoint == "present" and missing:
        return [
            Finding(
                f"no S3 gateway endpoint on route table(s) {', '.join(missing)}: weights would cross the NAT gateways",
                "set network.existing.s3_gateway_endpoint: add (warmstart adds one to every listed table), or add "
                "the tables to your endpoint: aws ec2 modify-vpc-endpoint --vpc-endpoint-id <id> "
                f"--add-route-table-ids {' '.join(missing)} --region {config.region}",
            )
        ]
    if existing.s3_gateway_endpoint == "add" and len(missing) < len(wanted):
        return [
            Finding(
                f"route table(s) {', '.join(t for t in wanted if t in covered)} have an S3 gateway endpoint already, "
                "and EC2 refuses a second S3 route on a table",
                "set network.existing.s3_gateway_endpoint: present (and add the other tables to that endpoint)",
            )
        ]
    return []


def add_on_findings(config: EnvironmentConfig, installed: dict[str, dict | None]) -> list[Finding]:
    """The Karpenter cluster's EKS add-ons (None: not installed as an EKS add-on) against the config."""
    existing = config.cluster.existing
    assert existing is not None
    name, region = config.cluster.name, config.region
    found: list[Finding] = []
    agent = installed.get("eks-pod-identity-agent")
    if existing.pod_identity_agent == "present" and agent is None:
        found.append(
            Finding(
                f"cluster {name} has no eks-pod-identity-agent add-on: no warmstart pod would get its AWS role",
                "set cluster.existing.pod_identity_agent: add, or aws eks create-addon --cluster-name "
                f"{name} --region {region} --addon-name eks-pod-identity-agent",
            )
        )
    if existing.pod_identity_agent == "add" and agent is not None:
        found.append(
            Finding(
                f"cluster {name} has the eks-pod-identity-agent add-on already (creating it again fails the deploy)",
                "set cluster.existing.pod_identity_agent: present",
            )
        )
    cni = installed.get("vpc-cni")
    values = _field(cni, "configurationValues")
    try:
        enforced = _field(json.loads(values), "enableNetworkPolicy") == "true" if isinstance(values, str) else False
    except ValueError:
        enforced = False
    if not enforced:
        found.append(
            Finding(
                f"cluster {name}'s VPC CNI does not enforce NetworkPolicy: warmstart's policies (who may call the "
                "models, scrape the agent) would be written and ignored",
                f"aws eks update-addon --cluster-name {name} --region {region} --addon-name vpc-cni "
                '--configuration-values \'{"enableNetworkPolicy": "true"}\' (merge your other values in)',
            )
        )
    return found


def image_tag(image: Any) -> str:
    """The tag of an image reference (registry[:port]/repository[:tag][@digest]); '' when it has none."""
    if not isinstance(image, str):
        return ""
    name = image.split("@", 1)[0]
    tag = name.rpartition(":")[2] if ":" in name else ""
    return "" if "/" in tag else tag


def karpenter_findings(config: EnvironmentConfig, deployments: Any) -> list[Finding]:
    """The running Karpenter controller (the Deployments of its namespace) against compute.existing_controller."""
    compute = config.compute
    assert isinstance(compute, KarpenterCompute) and compute.existing_controller is not None
    said = compute.existing_controller
    containers = [
        container
        for item in _field(deployments, "items") or []
        if _field(item, "metadata", "labels", "app.kubernetes.io/name") == "karpenter"
        for container in _field(item, "spec", "template", "spec", "containers") or []
        if isinstance(container, dict) and _field(container, "name") == "controller"
    ]
    if not containers:
        return [
            Finding(
                f"no Karpenter controller in namespace {said.namespace} of cluster {config.cluster.name}",
                "set compute.existing_controller.namespace to where it runs, or remove existing_controller to let "
                "warmstart install its own",
            )
        ]
    image = _field(containers[0], "image")
    tag = image_tag(image)
    env = {e.get("name"): e.get("value") for e in _field(containers[0], "env") or [] if isinstance(e, dict)}
    found: list[Finding] = []
    if tag.lstrip("v") != said.version:
        found.append(
            Finding(
                f"the cluster runs Karpenter {tag or image}, and compute.existing_controller.version says "
                f"{said.version}",
                f"set compute.existing_controller.version: {tag.lstrip('v') or '<its version>'}",
            )
        )
    if env.get("CLUSTER_NAME") not in (None, config.cluster.name):
        found.append(
            Finding(
                f"the Karpenter in {said.namespace} manages cluster {env.get('CLUSTER_NAME')}",
                "name the cluster it runs in under cluster.name",
            )
        )
    gates = str(env.get("FEATURE_GATES") or "")
    if "reserved" in compute.gpu_pool.capacity_types and "ReservedCapacity=false" in gates:
        found.append(
            Finding(
                "the pool asks for reserved capacity, and the Karpenter controller runs with ReservedCapacity=false: "
                "it would never launch into the reservations",
                "turn the feature gate on (Helm value settings.featureGates.reservedCapacity: true), or remove "
                "reserved from compute.gpu_pool.capacity_types",
            )
        )
    return found


def read_existing(config: EnvironmentConfig, run: Runner) -> tuple[list[Finding], list[str]]:
    """(findings, notes): every check the account can answer; a check it cannot answer is a note."""
    region = ["--region", config.region]
    name = config.cluster.name
    described, error = _json(run, ["aws", "eks", "describe-cluster", "--name", name, *region])
    if described is None:
        if "ResourceNotFoundException" in error:
            return [
                Finding(
                    f"cluster {name} does not exist in {config.region}",
                    "check cluster.name and region, or remove cluster.existing to let warmstart create the cluster",
                )
            ], []
        return [], [f"could not read cluster {name} ({error}); its checks were skipped"]
    cluster = _field(described, "cluster") or {}
    findings = cluster_findings(config, cluster)
    notes: list[str] = []
    network = config.network.existing
    if network is not None:
        ids = [subnet.id for subnet in network.private_subnets]
        vpc_filter = ["--filters", f"Name=vpc-id,Values={network.vpc_id}"]
        subnets, e1 = _json(run, ["aws", "ec2", "describe-subnets", "--subnet-ids", *ids, *region])
        tables, e2 = _json(run, ["aws", "ec2", "describe-route-tables", *vpc_filter, *region])
        endpoints, e3 = _json(
            run,
            [
                "aws",
                "ec2",
                "describe-vpc-endpoints",
                *vpc_filter,
                f"Name=service-name,Values=com.amazonaws.{config.region}.s3",
                *region,
            ],
        )
        if e1 or e2 or e3:
            notes.append(f"could not read the VPC's subnets, route tables or endpoints ({e1 or e2 or e3})")
        else:
            findings += network_findings(
                config, _field(subnets, "Subnets"), _field(tables, "RouteTables"), _field(endpoints, "VpcEndpoints")
            )
    if isinstance(config.compute, KarpenterCompute):
        installed: dict[str, dict | None] = {}
        for addon in ("eks-pod-identity-agent", "vpc-cni"):
            answer, error = _json(
                run, ["aws", "eks", "describe-addon", "--cluster-name", name, "--addon-name", addon, *region]
            )
            installed[addon] = _field(answer, "addon") if answer is not None else None
            if answer is None and "ResourceNotFoundException" not in error:
                notes.append(f"could not read the {addon} add-on ({error})")
        findings += add_on_findings(config, installed)
        if config.compute.existing_controller is not None:
            deployments, note = read_karpenter(config, cluster, run)
            if deployments is None:
                notes.append(note)
            else:
                findings += karpenter_findings(config, deployments)
    return findings, notes


def read_karpenter(config: EnvironmentConfig, cluster: dict, run: Runner) -> tuple[Any, str]:
    """The Deployments of the controller's namespace, read through the cluster's API with a token of the caller's
    credentials (no kubeconfig is read or written); (None, why) where the endpoint does not answer from here."""
    compute = config.compute
    assert isinstance(compute, KarpenterCompute) and compute.existing_controller is not None
    endpoint = _field(cluster, "endpoint")
    authority = _field(cluster, "certificateAuthority", "data")
    token, error = _json(
        run, ["aws", "eks", "get-token", "--cluster-name", config.cluster.name, "--region", config.region]
    )
    secret = _field(token, "status", "token")
    if not (isinstance(endpoint, str) and isinstance(authority, str) and isinstance(secret, str)):
        return None, f"could not read Karpenter's version and settings from the cluster ({error or 'no endpoint'})"
    namespace = compute.existing_controller.namespace
    with tempfile.TemporaryDirectory() as folder:  # the token in a file only the caller reads, never in argv
        kubeconfig = Path(folder) / "kubeconfig"
        kubeconfig.touch(mode=0o600)
        kubeconfig.write_text(json.dumps(_kubeconfig(endpoint, authority, secret)))
        deployments, error = _json(
            run,
            [
                "kubectl",
                "--kubeconfig",
                str(kubeconfig),
                "--request-timeout",
                "20s",
                "get",
                "deployments",
                "--namespace",
                namespace,
                "--output",
                "json",
            ],
        )
    if deployments is None:
        return None, (
            f"could not read Karpenter's version and settings from the cluster ({error}); a private endpoint answers "
            "only inside the VPC: run make preflight there, or check them by hand"
        )
    return deployments, ""


def _kubeconfig(endpoint: str, authority: str, token: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "existing", "cluster": {"server": endpoint, "certificate-authority-data": authority}}],
        "users": [{"name": "preflight", "user": {"token": token}}],
        "contexts": [{"name": "preflight", "context": {"cluster": "existing", "user": "preflight"}}],
        "current-context": "preflight",
    }
