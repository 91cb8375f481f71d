"""A cluster and VPC that warmstart did not create: what it must be told, and what would lose the speed-up there.

What synth cannot know without a lookup (that the cluster, its add-ons and the endpoint are what the config says)
`make preflight` checks against the account (warmstart_cli/existing_preflight.py).
"""

from __future__ import annotations

from warmstart.agent_config import agent_settings
from warmstart.catalog import Catalog
from warmstart.checks.fix import Ask, Edit, removing, setting, together
from warmstart.checks.network_rules import in_region, two_zones
from warmstart.checks.rule import VALID_CONFIG, rule
from warmstart.config.compute import OWN_KARPENTER_SETTINGS, AutoModeCompute, KarpenterCompute
from warmstart.config.environment import EnvironmentConfig
from warmstart.problem import Problem

# The Karpenter release whose CRDs warmstart's EC2NodeClass and NodePool follow (tests/schemas name it).
KARPENTER_SCHEMA_VERSION = (1, 14, 1)
KARPENTER_SCHEMA_MINOR = KARPENTER_SCHEMA_VERSION[:2]


@rule()
def _existing_cluster_needs_its_vpc(config: EnvironmentConfig) -> list[Problem]:
    if config.cluster.existing is not None and config.network.existing is None:
        return [
            Problem(
                "network.existing",
                "the cluster exists, and warmstart would create a second VPC beside it: GPU nodes must launch in "
                "the cluster's own VPC",
                "describe the cluster's VPC under network.existing (vpc_id, vpc_cidr, private_subnets with their "
                "zone and route table, s3_gateway_endpoint); `aws eks describe-cluster --name "
                f"{config.cluster.name} --query cluster.resourcesVpcConfig` lists them",
                (_describe_existing_vpc(config),),
            )
        ]
    if config.cluster.existing is None and config.network.existing is not None:
        return [
            Problem(
                "network.existing",
                "an existing VPC with a cluster warmstart creates: warmstart creates its clusters only in a VPC "
                "it owns (subnet sizes, tags and DNS settings it can vouch for)",
                "remove network.existing (and give vpc_cidr and availability_zones) to let warmstart create both, "
                "or create the cluster yourself and describe it under cluster.existing",
                (
                    together(
                        Edit("network.existing"),
                        Edit("network.vpc_cidr", config.network.cidr),
                        Edit("network.availability_zones", two_zones(config.network.zones, config.region)),
                    ),
                ),
            )
        ]
    return []


def _describe_existing_vpc(config: EnvironmentConfig):
    """The shape network.existing takes, with the owned VPC's settings moved into it: the IDs are asked for
    (`aws eks describe-cluster` gives them; make preflight compares them with the account)."""
    network = config.network
    subnets = [
        {
            "id": Ask("a private subnet of the cluster", f"subnet-{index:08x}"),
            "availability_zone": zone,
            "route_table_id": Ask("that subnet's route table", f"rtb-{index:08x}"),
        }
        for index, zone in enumerate(two_zones(network.zones, config.region), start=1)
    ]
    return together(
        *(
            Edit(f"network.{name}")
            for name in ("vpc_cidr", "availability_zones", "nat_gateways", "flow_log_retention_days")
        ),
        Edit(
            "network.existing",
            {
                "vpc_id": Ask("the cluster's VPC", "vpc-00000000"),
                "vpc_cidr": network.cidr,
                "private_subnets": subnets,
                "s3_gateway_endpoint": "add",
            },
        ),
    )


@rule()
def _subnet_zones(config: EnvironmentConfig) -> list[Problem]:
    existing = config.network.existing
    if existing is None:
        return []
    return [
        Problem(
            f"network.existing.private_subnets[{i}].availability_zone",
            f"{subnet.availability_zone!r} is not a zone of region {config.region!r}",
            f"give the subnet's zone (aws ec2 describe-subnets --subnet-ids {subnet.id} --query "
            "'Subnets[0].AvailabilityZone')",
            (
                setting(
                    f"network.existing.private_subnets[{i}].availability_zone",
                    Ask("the subnet's zone", f"{config.region}a"),
                ),
            ),
        )
        for i, subnet in enumerate(existing.private_subnets)
        if not in_region(subnet.availability_zone, config.region)
    ]


@rule()
def _s3_gateway_endpoint(config: EnvironmentConfig) -> list[Problem]:
    existing = config.network.existing
    if existing is None or existing.s3_gateway_endpoint != "none":
        return []
    tables = " ".join(existing.route_table_ids)
    return [
        Problem(
            "network.existing.s3_gateway_endpoint",
            "no S3 gateway endpoint on the GPU subnets' route tables: every weight download and compile-cache "
            "restore would cross the NAT gateways (their shared bandwidth and per-GB charge)",
            "set s3_gateway_endpoint: add (warmstart adds one to those route tables), or add one yourself and set "
            f"present: aws ec2 create-vpc-endpoint --region {config.region} --vpc-id {existing.vpc_id} "
            f"--vpc-endpoint-type Gateway --service-name com.amazonaws.{config.region}.s3 --route-table-ids {tables}",
            (
                setting("network.existing.s3_gateway_endpoint", "add"),
                setting("network.existing.s3_gateway_endpoint", "present"),
            ),
        )
    ]


@rule()
def _auto_mode_roles(config: EnvironmentConfig) -> list[Problem]:
    compute = config.compute
    if not isinstance(compute, AutoModeCompute):
        return []
    named = [name for name in ("node_role_name", "cluster_role_name") if getattr(compute, name)]
    if config.cluster.existing is None:
        return [
            Problem(
                f"compute.{name}",
                "names a role of an existing cluster, but warmstart creates this cluster and its roles",
                f"remove compute.{name}",
                (removing(f"compute.{name}"),),
            )
            for name in named
        ]
    problems = []
    if compute.node_role_name is None:
        problems.append(
            Problem(
                "compute.node_role_name",
                "the existing Auto Mode cluster's node role is not given: the GPU NodeClass must name it",
                f"give its name: aws eks describe-cluster --name {config.cluster.name} --query "
                "cluster.computeConfig.nodeRoleArn (the part after role/)",
                (setting("compute.node_role_name", Ask("the cluster's node role name", "AmazonEKSAutoNodeRole")),),
            )
        )
    if config.tags and compute.cluster_role_name is None:
        problems.append(
            Problem(
                "compute.cluster_role_name",
                "the GPU NodeClass carries the environment's tags, and Auto Mode launches no node with tags its "
                "cluster role may not apply",
                "give the cluster role's name (warmstart adds the documented custom-tags policy to it): aws eks "
                f"describe-cluster --name {config.cluster.name} --query cluster.roleArn; or remove tags",
                (
                    setting("compute.cluster_role_name", Ask("the cluster role's name", "AmazonEKSAutoClusterRole")),
                    removing("tags"),
                ),
            )
        )
    return problems


@rule()
def _auto_mode_runs_its_own_agents(config: EnvironmentConfig) -> list[Problem]:
    existing = config.cluster.existing
    if existing is None or not isinstance(config.compute, AutoModeCompute):
        return []
    return [
        Problem(
            f"cluster.existing.{name}",
            "EKS Auto Mode runs it on every node itself",
            f"remove cluster.existing.{name}",
            (removing(f"cluster.existing.{name}"),),
        )
        for name in ("pod_identity_agent", "nvidia_device_plugin")
        if getattr(existing, name) is not None
    ]


ADD_ON_FIXES = {
    "pod_identity_agent": (
        "the EKS Pod Identity agent, without which no warmstart pod (agent, model) gets its AWS role",
        "aws eks create-addon --cluster-name {cluster} --region {region} --addon-name eks-pod-identity-agent",
    ),
    "nvidia_device_plugin": (
        "the NVIDIA device plugin, without which no node offers nvidia.com/gpu and no model pod is ever scheduled",
        "helm repo add nvdp https://nvidia.github.io/k8s-device-plugin && helm install nvdp "
        "nvdp/nvidia-device-plugin --version {version} --namespace kube-system, with tolerations of "
        "nvidia.com/gpu:NoSchedule and warmstart.io/gpu-pool:NoSchedule (warmstart's nodes carry both) and node "
        "affinity on karpenter.k8s.aws/instance-gpu-manufacturer=nvidia (the chart's default affinity needs labels "
        "warmstart's nodes do not have)",
    ),
}


@rule()
def _karpenter_cluster_add_ons(config: EnvironmentConfig) -> list[Problem]:
    existing = config.cluster.existing
    if existing is None or not isinstance(config.compute, KarpenterCompute):
        return []
    problems = []
    for name, (what, command) in ADD_ON_FIXES.items():
        said = getattr(existing, name)
        fix_command = command.format(
            cluster=config.cluster.name, region=config.region, version=config.compute.nvidia_device_plugin_version
        )
        if said is None:
            problems.append(
                Problem(
                    f"cluster.existing.{name}",
                    f"not said whether the cluster runs {what}",
                    f"set present (make preflight checks it), or add (warmstart installs it); to install it "
                    f"yourself: {fix_command}",
                    _present_or_add(config, name),
                )
            )
        elif said == "none":
            problems.append(
                Problem(
                    f"cluster.existing.{name}",
                    f"the cluster does not run {what}",
                    f"set add (warmstart installs it), or install it and set present: {fix_command}",
                    _present_or_add(config, name),
                )
            )
    return problems


def _present_or_add(config: EnvironmentConfig, name: str):
    """Both answers, where warmstart can install the add-on (a GitOps cluster's device plugin it cannot)."""
    field = f"cluster.existing.{name}"
    gitops = config.cluster.existing is not None and config.cluster.existing.kubernetes_objects == "gitops"
    answers = ("present",) if gitops and name == "nvidia_device_plugin" else ("present", "add")
    return tuple(setting(field, answer) for answer in answers)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


@rule()
def _existing_karpenter(config: EnvironmentConfig) -> list[Problem]:
    compute = config.compute
    if not isinstance(compute, KarpenterCompute) or compute.existing_controller is None:
        return []
    if config.cluster.existing is None:
        return [
            Problem(
                "compute.existing_controller",
                "warmstart creates this cluster, with its own Karpenter: there is no existing controller in it",
                "remove compute.existing_controller",
                (removing("compute.existing_controller"),),
            )
        ]
    version = _version(compute.existing_controller.version)
    schema = ".".join(map(str, KARPENTER_SCHEMA_VERSION))
    if version[:2] < KARPENTER_SCHEMA_MINOR or version[0] != KARPENTER_SCHEMA_VERSION[0]:
        return [
            Problem(
                "compute.existing_controller.version",
                f"Karpenter {compute.existing_controller.version}: warmstart's EC2NodeClass and NodePool follow the "
                f"v{schema} CRDs (RAID0 instance store, capacity reservations, the v1 disruption budget), which "
                "older controllers reject or ignore",
                f"upgrade the controller to {KARPENTER_SCHEMA_MINOR[0]}.{KARPENTER_SCHEMA_MINOR[1]} or later within "
                f"v{KARPENTER_SCHEMA_VERSION[0]} (Karpenter's upgrade guide), then give its version here",
                (setting("compute.existing_controller.version", Ask("the upgraded controller's version", schema)),),
            )
        ]
    return []


@rule()
def _gitops_applies_what_cdk_would(config: EnvironmentConfig) -> list[Problem]:
    existing = config.cluster.existing
    if existing is None or existing.kubernetes_objects != "gitops":
        return []
    problems = []
    compute = config.compute
    if isinstance(compute, KarpenterCompute) and compute.existing_controller is None:
        problems.append(
            Problem(
                "compute.existing_controller",
                "with kubernetes_objects: gitops warmstart applies nothing to the cluster, so it cannot install "
                "Karpenter (a Helm release)",
                "install Karpenter with your GitOps tool and describe it under compute.existing_controller, or set "
                "cluster.existing.kubernetes_objects: cdk",
                (
                    together(
                        *(Edit(f"compute.{name}") for name in OWN_KARPENTER_SETTINGS),
                        Edit(
                            "compute.existing_controller",
                            {
                                "version": Ask(
                                    "the controller's version", ".".join(map(str, KARPENTER_SCHEMA_VERSION))
                                ),
                                "node_role_name": Ask("its nodes' role name", "KarpenterNodeRole"),
                            },
                        ),
                    ),
                    setting("cluster.existing.kubernetes_objects", "cdk"),
                ),
            )
        )
    if existing.nvidia_device_plugin == "add":
        problems.append(
            Problem(
                "cluster.existing.nvidia_device_plugin",
                "with kubernetes_objects: gitops warmstart cannot install the device plugin (a Helm release)",
                "install NVIDIA's device plugin chart with your GitOps tool and set present, or set "
                "kubernetes_objects: cdk",
                (
                    setting("cluster.existing.nvidia_device_plugin", "present"),
                    setting("cluster.existing.kubernetes_objects", "cdk"),
                ),
            )
        )
    problems += [
        Problem(
            f"models[{i}].autoscaling",
            "autoscaling needs Prometheus and KEDA, which warmstart installs as Helm releases "
            "only when it applies the cluster's objects",
            "set replicas instead, or set cluster.existing.kubernetes_objects: cdk",
            (
                together(
                    Edit(f"models[{i}].autoscaling"),
                    Edit(
                        f"models[{i}].replicas",
                        max(model.least_replicas, 1 if model.allow_single_replica_downtime else 2),
                    ),
                ),
                setting("cluster.existing.kubernetes_objects", "cdk"),
            ),
        )
        for i, model in enumerate(config.models)
        if model.autoscaling is not None
    ]
    if config.image_preload.strategy.boots_with_images:
        problems.append(
            Problem(
                "image_preload.mode",
                "the image snapshot's ID is known only once the stack has built it, and the GitOps manifests are "
                "written at synth",
                "use mode: prepull, or set cluster.existing.kubernetes_objects: cdk",
                (setting("image_preload.mode", "prepull"), setting("cluster.existing.kubernetes_objects", "cdk")),
            )
        )
    return problems


@rule(needs=VALID_CONFIG)
def _gitops_agent_image(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    existing = config.cluster.existing
    if existing is None or existing.kubernetes_objects != "gitops" or config.deploy.agent_image is not None:
        return []
    if not (agent_settings(config, catalog).models or config.image_preload.strategy.prepulls):
        return []  # no node agent and no prepull DaemonSet: no agent image
    return [
        Problem(
            "deploy.agent_image",
            "the node agent's image is built at deploy by default, and the GitOps manifests must name it at synth",
            "build and push it once with `make agent-image`, then give its digest here "
            "(registry/repository@sha256:...)",
            (
                setting(
                    "deploy.agent_image",
                    Ask(
                        "the reference `make agent-image` prints",
                        f"{config.account}.dkr.ecr.{config.region}.amazonaws.com/warmstart-agent@sha256:{'0' * 64}",
                    ),
                ),
            ),
        )
    ]
