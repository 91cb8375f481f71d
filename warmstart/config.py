"""The one validated configuration model of an environment.

Structure and single-field rules live here (pydantic); rules that span several fields and the GPU
catalog live in `checks.py`, so that every problem is reported with its field path and its fix.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from warmstart.checks.fix import UNSET, Edit, Fix, Refused, removing, setting, together
from warmstart.node_os import AMI_ALIAS_PATTERN, AUTO_MODE_OS, DEFAULT_AMI_ALIAS, NodeOs, karpenter_node_os
from warmstart.preload_modes import PRELOAD_MODES, PreloadMode
from warmstart.vllm_release import VERSION_PATTERN as VLLM_VERSION_PATTERN

GIB = 2**30
MIB = 2**20

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
DURATION = r"^([0-9]+(s|m|h))+$"
S3_BUCKET_NAME = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
# The preload modes' names, from their objects (warmstart/preload_modes/): a new mode's module adds its name.
if TYPE_CHECKING:
    PreloadModeName = str
else:
    PreloadModeName = Literal[tuple(PRELOAD_MODES)]
# Kubernetes versions the pinned kubectl layer (v35) can drive: kubectl supports one minor version of skew.
SUPPORTED_KUBERNETES_VERSIONS = ("1.34", "1.35", "1.36")


def _once(items: list) -> list:
    """The list with each item's later repeats left out."""
    return list(dict.fromkeys(items))


class Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


EXAMPLE_CIDR = "10.20.0.0/16"


def ipv4_cidr(value: str, replacement: object = UNSET) -> ipaddress.IPv4Network:
    """An IPv4 block written as its network address (the VPC and EKS public endpoint take IPv4 here). A block
    that is not one is refused with `replacement` as its fix's value (by default: removed, so that the setting's
    default applies or the list item goes)."""
    instead = setting("", replacement)
    try:
        network = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise Refused("is not a CIDR block", f"write an IPv4 block such as {EXAMPLE_CIDR}", instead) from None
    if network.version != 4:
        raise Refused(
            "is an IPv6 block", f"write an IPv4 block such as {EXAMPLE_CIDR} (IPv6 is not supported)", instead
        )
    if str(network) != value:
        raise Refused("has host bits set", f"write the block's network address, {network}", setting("", str(network)))
    return network


def _cidr_block(value: str) -> str:
    ipv4_cidr(value)
    return value


def _required_cidr_block(value: str) -> str:
    ipv4_cidr(value, replacement=EXAMPLE_CIDR)
    return value


def _role_arn(value: str) -> str:
    if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]+", value):
        raise Refused(
            "is not an IAM role ARN", "write arn:aws:iam::<account>:role/<name>, or remove it", setting("", UNSET)
        )
    return value


CidrBlock = Annotated[str, AfterValidator(_cidr_block)]
RequiredCidrBlock = Annotated[str, AfterValidator(_required_cidr_block)]
RoleArn = Annotated[str, AfterValidator(_role_arn)]


class ExistingSubnet(Strict):
    """A private subnet of an existing VPC that GPU nodes launch into: its zone and route table are given, since
    synth never looks them up."""

    id: str = Field(pattern=r"^subnet-[0-9a-f]{8,17}$")
    availability_zone: str
    route_table_id: str = Field(pattern=r"^rtb-[0-9a-f]{8,17}$")


class ExistingVpc(Strict):
    """A VPC warmstart did not create (made by Terraform, eksctl, the console or another stack): warmstart creates
    no subnet, NAT gateway or flow log in it, and adds at most the S3 gateway endpoint."""

    vpc_id: str = Field(pattern=r"^vpc-[0-9a-f]{8,17}$")
    # The VPC's primary CIDR: the node agent's default scrapers (Amazon Managed Prometheus' collector).
    vpc_cidr: RequiredCidrBlock
    # The subnets of the cluster's GPU nodes (and of the kubectl handler, with a private endpoint).
    private_subnets: list[ExistingSubnet] = Field(min_length=1)
    # present: an S3 gateway endpoint is already on every route table above (make preflight checks it); add:
    # warmstart adds one to them; none: refused, since weights would cross the NAT gateways.
    s3_gateway_endpoint: Literal["present", "add", "none"]

    @field_validator("private_subnets")
    @classmethod
    def _distinct_subnets(cls, value: list[ExistingSubnet]) -> list[ExistingSubnet]:
        once = list({subnet.id: subnet for subnet in reversed(value)}.values())[::-1]
        if len(once) != len(value):
            raise Refused(
                "a subnet is listed twice", "list each subnet once", setting("", [s.model_dump() for s in once])
            )
        return value

    @property
    def route_table_ids(self) -> list[str]:
        return sorted({subnet.route_table_id for subnet in self.private_subnets})


# The owned VPC's settings, which an existing VPC replaces.
OWNED_VPC_SETTINGS = ("vpc_cidr", "availability_zones", "nat_gateways", "flow_log_retention_days")


class NetworkConfig(Strict):
    vpc_cidr: CidrBlock = "10.0.0.0/16"
    # Fixed in config: synth must never look AZs up (an existing VPC gives its subnets' zones instead).
    availability_zones: list[str] = Field(default_factory=list)
    nat_gateways: PositiveInt = 1
    flow_log_retention_days: Literal[1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1827, 3653] = 30
    # A VPC that exists already (for a cluster warmstart did not create); the settings above then stay unset.
    existing: ExistingVpc | None = None

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_size(cls, value: str) -> str:
        network = ipv4_cidr(value)
        if not 16 <= network.prefixlen <= 20:
            size = min(max(network.prefixlen, 16), 20)
            within = ipaddress.ip_network(f"{network.network_address}/{size}", strict=False)
            raise Refused(
                f"a /{network.prefixlen} block is outside /16 to /20",
                f"use a /16 to /20 block, such as {within}, so that each AZ gets room for GPU pods",
                setting("", str(within)),
            )
        return value

    @field_validator("availability_zones")
    @classmethod
    def _distinct_azs(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            once = _once(value)
            # The VPC needs two: the next zones of the same region where only one is left.
            region = once[0][:-1]
            once += [z for z in (f"{region}a", f"{region}b", f"{region}c") if z not in once][: max(0, 2 - len(once))]
            raise Refused("an availability zone is listed twice", "list each zone once", setting("", once))
        return value

    @model_validator(mode="after")
    def _owned_or_existing(self) -> NetworkConfig:
        if self.existing is not None:
            given = [name for name in OWNED_VPC_SETTINGS if name in self.model_fields_set]
            if given:
                raise Refused(
                    f"{', '.join(given)} beside existing: they describe a VPC warmstart creates",
                    "remove them (the existing VPC's CIDR goes in existing.vpc_cidr)",
                    removing(*given),
                )
        return self

    @property
    def owned(self) -> bool:
        """Whether warmstart creates the VPC."""
        return self.existing is None

    @property
    def cidr(self) -> str:
        """The VPC's primary CIDR, owned or existing."""
        return self.existing.vpc_cidr if self.existing else self.vpc_cidr

    @property
    def zones(self) -> list[str]:
        """The zones the GPU nodes launch in."""
        if self.existing:
            return sorted({subnet.availability_zone for subnet in self.existing.private_subnets})
        return list(self.availability_zones)


# An EKS prerequisite of an existing cluster: already there (make preflight checks it), added by warmstart, or
# missing (refused, with the command that adds it).
Prerequisite = Literal["present", "add", "none"]
IAM_ROLE_NAME = r"^[\w+=,.@-]{1,64}$"


class ExistingCluster(Strict):
    """An EKS cluster warmstart did not create: warmstart adds its own parts to it and never changes the cluster
    itself (its endpoint, logging, version, access entries other than its own)."""

    # The cluster security group EKS created (DescribeCluster: resourcesVpcConfig.clusterSecurityGroupId): GPU
    # nodes join with it, and the kubectl handler reaches a private endpoint through it.
    security_group_id: str = Field(pattern=r"^sg-[0-9a-f]{8,17}$")
    # cdk: warmstart applies its Kubernetes objects through its own kubectl handler, whose role gets a
    # cluster-admin access entry (the cluster's authentication mode must include API); gitops: `make synth`
    # writes them to dist/<env>/ with a kustomization, for Argo CD or Flux, and the stacks hold the AWS parts only.
    kubernetes_objects: Literal["cdk", "gitops"] = "cdk"
    # Security groups the GPU nodes join with beside the cluster security group: those the cluster's other nodes
    # have (terraform-aws-eks gives nodes their own group, which alone admits CoreDNS; make preflight compares).
    node_security_group_ids: list[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list, max_length=4
    )
    # Karpenter mode (Auto Mode runs both itself): the EKS Pod Identity agent, through which every warmstart pod
    # gets its role, and the NVIDIA device plugin, which makes the GPUs schedulable.
    pod_identity_agent: Prerequisite | None = None
    nvidia_device_plugin: Prerequisite | None = None


class ClusterConfig(Strict):
    name: str = Field(pattern=r"^[a-zA-Z][-a-zA-Z0-9]{0,99}$")
    kubernetes_version: Literal[SUPPORTED_KUBERNETES_VERSIONS] = "1.35"  # type: ignore[valid-type]
    endpoint_access: Literal["public_and_private", "private"] = "public_and_private"
    # Only with public_and_private; empty means the EKS default (0.0.0.0/0).
    public_access_cidrs: list[CidrBlock] = Field(default_factory=list)
    # IAM roles that get cluster-admin through an EKS access entry.
    admin_role_arns: list[RoleArn] = Field(default_factory=list)
    # A cluster that exists already (name, version and endpoint_access above say what it is).
    existing: ExistingCluster | None = None
    # Namespaces whose node agents the cluster trusts as the node's root (monitoring and security agents:
    # CloudWatch, Datadog, Falco): warmstart's host-path policy leaves their mounts of `/`, `/mnt` or /proc to the
    # cluster's Pod Security. Elsewhere only a container that cannot become root, or is privileged, mounts them
    # (docs/trust-model.md, "What a cluster must allow").
    trusted_node_readers: list[Annotated[str, Field(pattern=DNS_LABEL)]] = Field(default_factory=list, max_length=20)

    @model_validator(mode="after")
    def _owned_settings(self) -> ClusterConfig:
        given = [name for name in ("public_access_cidrs", "admin_role_arns") if getattr(self, name)]
        if self.existing is not None and given:
            raise Refused(
                f"{', '.join(given)} beside existing: they configure a cluster warmstart creates",
                "remove them (grant access to your cluster where it is managed)",
                removing(*given),
            )
        return self

    @property
    def owned(self) -> bool:
        """Whether warmstart creates the cluster."""
        return self.existing is None

    @property
    def applies_kubernetes_objects(self) -> bool:
        """Whether the stacks apply the Kubernetes objects (else a GitOps tool applies dist/<env>/)."""
        return self.existing is None or self.existing.kubernetes_objects == "cdk"


# AWS resource tags (Tagging AWS resources, "Tag naming limits and requirements"): keys of 1-128 and values of
# 0-256 Unicode letters, digits, spaces and _ . : / = + - @; the aws: prefix is reserved for AWS.
TAG_CHARACTERS = r"^[\w .:/=+\-@]*$"


def _not_aws_reserved(value: str) -> str:
    if value.lower().startswith("aws:"):
        raise Refused(
            "starts with 'aws:', which AWS reserves", "choose another key, or remove the tag", setting("", UNSET)
        )
    return value


TagKey = Annotated[str, Field(min_length=1, max_length=128, pattern=TAG_CHARACTERS), AfterValidator(_not_aws_reserved)]
TagValue = Annotated[str, Field(max_length=256, pattern=TAG_CHARACTERS)]


# Removing a reservation term may leave 'reserved' with nothing to select, which the pool's rule refuses in turn.
TERM_REMOVED = Fix((Edit(""),), then_also=("compute.gpu_pool.capacity_types",))


class CapacityReservationTerm(Strict):
    """One `capacityReservationSelectorTerms` entry of the EC2NodeClass (Karpenter v1.14.1 CRD): a reservation
    ID alone, or tags (optionally of reservations shared by another account)."""

    id: str | None = Field(default=None, pattern=r"^cr-[0-9a-z]+$")
    tags: dict[TagKey, TagValue] | None = Field(default=None, min_length=1, max_length=20)
    owner_id: str | None = Field(default=None, pattern=r"^[0-9]{12}$")

    @model_validator(mode="after")
    def _one_selector(self) -> CapacityReservationTerm:
        if self.id is not None and self.tags is not None:
            raise Refused(
                "a reservation term with both id and tags",
                "keep one: id (cr-...) or tags",
                removing("tags"),
                removing("id", "owner_id"),
            )
        if self.id is None and self.tags is None:
            raise Refused(
                "a reservation term with no selector",
                "give either id (cr-...) or tags, or remove the term (then also remove 'reserved' from "
                "capacity_types if no term is left)",
                TERM_REMOVED,
            )
        if self.id is not None and self.owner_id is not None:
            raise Refused("owner_id beside id", "owner_id goes with tags, not with id: remove it", removing("owner_id"))
        if self.tags and any(not k or not v for k, v in self.tags.items()):
            kept = {k: v for k, v in self.tags.items() if k and v}
            raise Refused(
                "an empty tag key or value",
                "give every tag a key and a value, or remove the empty ones"
                + (
                    "" if kept else " and the term (then also remove 'reserved' from capacity_types if no term is left)"
                ),
                setting("tags", kept) if kept else TERM_REMOVED,
            )
        return self


class GpuPool(Strict):
    instance_types: list[str] = Field(min_length=1)
    capacity_types: list[Literal["on-demand", "spot", "reserved"]] = Field(default=["on-demand"], min_length=1)
    # On-Demand Capacity Reservations the pool may use; Karpenter launches `reserved` capacity only from
    # reservations these select (Karpenter v1.14 docs, "Utilizing ODCRs").
    capacity_reservations: list[CapacityReservationTerm] = Field(default_factory=list, max_length=30)
    # Upper bound on GPUs the pool may run at once (a cost guard-rail Karpenter enforces on whole nodes).
    gpu_limit: PositiveInt = 64
    # A rollout starts each new pod on a spare node before the old one goes (gpu_limit must leave room for it);
    # false: rollouts replace one pod at a time within the limit (a single replica is offline meanwhile).
    surge: bool = True
    # How long an empty GPU node stays (scale-down delay: a warm node keeps its caches).
    consolidate_after: str = Field(default="10m", pattern=DURATION)
    # Node lifetime. Expiry is forceful (no replacement is started first), so models keep >= 2 replicas on
    # separate nodes; 336h is Auto Mode's default, and Auto Mode caps lifetime plus grace at 21 days.
    expire_after: str = Field(default="336h", pattern=r"^(([0-9]+(s|m|h))+|Never)$")
    # How long a node being removed waits for its pods (PDBs) before they are deleted: bounds a node's life.
    termination_grace_period: str = Field(default="24h", pattern=DURATION)

    @field_validator("instance_types")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise Refused("an instance type is listed twice", "list each type once", setting("", _once(value)))
        return value


class AutoModeCompute(Strict):
    title: ClassVar[str] = "EKS Auto Mode"
    mode: Literal["auto"]
    gpu_pool: GpuPool
    # Root EBS size Auto Mode gives the node. It must stay BELOW every pool instance's NVMe capacity,
    # otherwise Auto Mode puts /mnt/.ephemeral on EBS instead of the RAID0 instance store.
    ephemeral_storage_gib: PositiveInt = 80
    ephemeral_storage_iops: int = Field(default=3000, ge=3000, le=16000)
    ephemeral_storage_throughput_mibps: int = Field(default=125, ge=125, le=1000)
    # An existing Auto Mode cluster: its node role (the NodeClass names it; EKS gave it its access entry), and its
    # cluster role, which needs leave to tag what Auto Mode creates when the environment has tags.
    node_role_name: str | None = Field(default=None, pattern=IAM_ROLE_NAME)
    cluster_role_name: str | None = Field(default=None, pattern=IAM_ROLE_NAME)

    @property
    def node_os(self) -> NodeOs:
        """Auto Mode's own OS (Bottlerocket, whose release is AWS's choice)."""
        return AUTO_MODE_OS


class SystemNodeGroup(Strict):
    instance_type: str = "m7i.xlarge"
    min_size: PositiveInt = 2
    max_size: PositiveInt = 4


class ExistingKarpenter(Strict):
    """A Karpenter controller that already runs in an existing cluster: warmstart adds its EC2NodeClass and
    NodePool and installs no controller."""

    # Its version (the chart's appVersion): warmstart's EC2NodeClass and NodePool follow Karpenter v1.14.1's CRDs.
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    # The role its nodes use (with an EC2_LINUX access entry): warmstart's EC2NodeClass names it.
    node_role_name: str = Field(pattern=IAM_ROLE_NAME)
    # Where the controller runs (make preflight reads its version and feature gates there).
    namespace: str = Field(default="kube-system", pattern=DNS_LABEL)


# A Karpenter warmstart installs; an existing controller replaces them.
OWN_KARPENTER_SETTINGS = ("karpenter_version", "system_node_group")


class KarpenterCompute(Strict):
    title: ClassVar[str] = "self-managed Karpenter"
    mode: Literal["karpenter"]
    gpu_pool: GpuPool
    karpenter_version: str = Field(default="1.14.1", pattern=r"^\d+\.\d+\.\d+$")
    nvidia_device_plugin_version: str = Field(default="0.19.0", pattern=r"^\d+\.\d+\.\d+$")
    # A pinned EKS-optimized AMI release; "latest" would roll nodes on every AMI release.
    ami_alias: str = Field(default=DEFAULT_AMI_ALIAS, pattern=AMI_ALIAS_PATTERN)
    root_volume_gib: int = Field(default=200, ge=20, le=16384)
    system_node_group: SystemNodeGroup = SystemNodeGroup()
    # A Karpenter already running in an existing cluster; default: warmstart installs its own.
    existing_controller: ExistingKarpenter | None = None

    @model_validator(mode="after")
    def _own_or_existing(self) -> KarpenterCompute:
        given = [name for name in OWN_KARPENTER_SETTINGS if name in self.model_fields_set]
        if self.existing_controller is not None and given:
            raise Refused(
                f"{', '.join(given)} beside existing_controller: they configure the Karpenter warmstart installs",
                "remove them (the existing controller's version goes in existing_controller.version)",
                removing(*given),
            )
        return self

    @property
    def node_os(self) -> NodeOs:
        """The OS of the pinned AMI alias's family."""
        return karpenter_node_os(self.ami_alias)


Compute = Annotated[AutoModeCompute | KarpenterCompute, Field(discriminator="mode")]
# Each compute mode's name (its `mode` literal) and settings class, read from the union above: a mode added there
# is known to the loader's messages without being named twice.
COMPUTE_MODES: dict[str, type[AutoModeCompute | KarpenterCompute]] = {
    get_args(model.model_fields["mode"].annotation)[0]: model for model in get_args(get_args(Compute)[0])
}


def mode_name(settings: type[AutoModeCompute | KarpenterCompute]) -> str:
    """A compute mode's name in the config (its `mode` literal)."""
    return next(name for name, model in COMPUTE_MODES.items() if model is settings)


class ModelBucket(Strict):
    name: str = Field(pattern=S3_BUCKET_NAME)
    # False: the bucket exists already and is only referenced (never created, never deleted).
    create: bool = True
    # An existing bucket encrypted with a customer KMS key: the readers get kms:Decrypt on it.
    kms_key_arn: str | None = Field(default=None, pattern=r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]{36}$")


class BucketsConfig(Strict):
    models: ModelBucket
    # Created by warmstart; a fixed name keeps IAM scopes readable.
    compile_cache: str = Field(pattern=S3_BUCKET_NAME)
    access_log_retention_days: PositiveInt = 90
    abort_incomplete_multipart_days: PositiveInt = 1


class MeasuredCompile(Strict):
    """torch.compile times measured for one model (vLLM logs them: `warmstart status --starts` shows them)."""

    cold: PositiveFloat  # the first pod of a configuration, nothing cached
    cached: PositiveFloat  # a pod that finds the compiled artifacts (same node, or restored on a new one)


class StartEstimate(Strict):
    """What `warmstart plan --estimate` assumes beyond the config and the GPU catalog: each default is a published
    measurement or a published limit (docs/estimate.md gives each one's source, and the figures it is checked
    against, none of them the parameter's own); `plan --estimate --calibrate` fits them to a cluster's starts."""

    # A GPU node from launch to Ready (Karpenter maintainers, aws/karpenter-provider-aws#6165: "about 30-40s").
    node_ready_seconds: float = Field(default=35, ge=0)
    # A serving image's compressed size (assumption: the vLLM 0.21.0 DLC is 8.8 GB; a model's image_size_gb wins).
    image_size_gb: PositiveFloat = 10
    # Plain containerd pull and unpack (an AI-on-EKS startup workshop, g6.4xlarge, Bottlerocket: 9.35 GB, 98 MB/s).
    plain_pull_mb_per_s: PositiveFloat = 98
    # SOCI parallel pull; default: the node OS's published figure (warmstart/node_os/).
    parallel_pull_mb_per_s: PositiveFloat | None = None
    # Starting a container whose image is on the node (the same workshop's warm start: 1-2 s).
    image_present_seconds: float = Field(default=1, ge=0)
    # The Run:ai streamer: each S3 client's throughput target (RUNAI_STREAMER_S3_TARGET_GBPS, the AWS CRT default
    # of 10 Gbit/s per client), times its clients (the rendered concurrency) and streaming processes.
    streamer_client_gbit_per_s: PositiveFloat = 10
    # S3's request rate per partitioned prefix (5,500 GET/s) times the CRT client's part size (8 MiB).
    s3_prefix_gets_per_s: PositiveInt = 5500
    s3_part_mib: PositiveInt = 8
    # One streamer reader on a local disk (Run:ai benchmark: Llama 3 8B, 16.06 GB, in 47.56 s at concurrency 1, gp3).
    local_reader_gb_per_s: PositiveFloat = 0.3377
    # Instance-store read rate where the catalog has no published figure (assumption; see docs/estimate.md).
    nvme_gb_per_s: PositiveFloat = 2.0
    # Without warmstart: a downloader (the AWS CLI's 10 concurrent requests, S3's 85-90 MB/s per connection)
    # through a NAT gateway (up to 100 Gbit/s, shared by the nodes scaling out) to the root EBS volume (~1 GB/s),
    # then vLLM's default safetensors loader (Run:ai benchmark: the same 16.06 GB in 47.99 s).
    download_connections: PositiveInt = 10
    s3_connection_mb_per_s: PositiveFloat = 87.5
    nat_gbit_per_s: PositiveFloat = 100
    root_volume_gb_per_s: PositiveFloat = 1.0
    loader_gb_per_s: PositiveFloat = 0.3347
    # How many new nodes start at once (they share the NAT without warmstart); `plan --estimate --nodes N`.
    scale_out_nodes: PositiveInt = 1
    # torch.compile from nothing: base + per ln(GB) (least squares on the EKS guide's 53 s at 60 GB, 60 s at 140 GB
    # and 80 s at 640 GB: the compiled graph grows far slower than the weights).
    compile_cold_base_seconds: float = Field(default=4.34, ge=0)
    compile_cold_seconds_per_ln_gb: float = Field(default=11.61, ge=0)
    # torch.compile with the artifacts on the node (EKS guide: ~6 s, 4-6 s, for every size).
    compile_cached_seconds: float = Field(default=6, ge=0)
    # Restoring the compile cache on a new node (a ~15 MB archive through the gateway endpoint, unpacked).
    restore_seconds: float = Field(default=1, ge=0)
    # vLLM's engine start after the weights: KV-cache profiling, warm-up and CUDA graph capture (the workshop's
    # vLLM 0.22 on g6.4xlarge: 27.9 s and 4.0 s); with enforce_eager, no capture.
    engine_seconds: float = Field(default=31.9, ge=0)
    engine_eager_seconds: float = Field(default=27.9, ge=0)
    # The settings above measured in this cluster (`plan --estimate --calibrate` writes them): their phases are
    # marked as measured.
    measured: list[str] = Field(default_factory=list)

    @field_validator("measured")
    @classmethod
    def _known_settings(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in cls.model_fields or name == "measured"]
        if unknown:
            raise Refused(
                f"names no estimate setting: {', '.join(unknown)}",
                "list only the settings above",
                setting("", [name for name in value if name not in unknown]),
            )
        return value


class Autoscaling(Strict):
    """The model's pods scale on vLLM's own load (a HorizontalPodAutoscaler); the GPU pool adds and removes nodes
    for them. The replicas setting gives way to min_replicas."""

    min_replicas: PositiveInt
    max_replicas: PositiveInt
    # waiting_requests: requests queued per pod (vLLM's vllm:num_requests_waiting); kv_cache_usage: the share of
    # the KV cache in use per pod (vllm:kv_cache_usage_perc, 0 to 1).
    metric: Literal["waiting_requests", "kv_cache_usage"] = "waiting_requests"
    # The per-pod value to hold: default 5 waiting requests, or 0.8 of the KV cache.
    target_value: PositiveFloat | None = None


class ModelSpec(Strict):
    name: str = Field(pattern=DNS_LABEL)
    s3_uri: str = Field(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/(.+/)?$")
    size_gb: PositiveFloat
    tensor_parallel_size: PositiveInt | Literal["auto"] = "auto"
    # Share of one GPU's memory the weights may take; the rest is KV cache and activations.
    weights_memory_fraction: float = Field(default=0.8, gt=0, le=0.95)
    max_model_len: PositiveInt = 8192
    image: str = Field(min_length=1)
    replicas: PositiveInt = 1
    # With one replica, replacing its node (expiry, an AMI change, a rollout without room to surge) takes the
    # model offline until the new pod is Ready; refused unless accepted here (a dev environment).
    allow_single_replica_downtime: bool = False
    # Longest the pod may take to serve after it starts (startup probe); default: derived from the model's
    # size, tensor parallelism and torch.compile, with headroom (see `warmstart plan`).
    startup_budget_seconds: int | None = Field(default=None, ge=60, le=7200)
    # Namespaces whose pods may call this model's serving port; default: serving.client_namespaces.
    client_namespaces: list[Annotated[str, Field(pattern=DNS_LABEL)]] | None = None
    # Disables torch.compile and CUDA graphs (fast start, lower throughput); refused with the compile cache on.
    enforce_eager: bool = False
    # Restricts the model to some of the pool's instance types; default: all of them.
    instance_types: list[str] | None = None
    # Pod requests; default: the model's share (by GPUs) of the smallest candidate instance, less headroom.
    cpu: PositiveFloat | None = None
    memory_gib: PositiveInt | None = None
    # /dev/shm for NCCL between tensor-parallel ranks (memory-backed).
    shared_memory_gib: PositiveInt = 16
    # For `warmstart plan --estimate` only: the serving image's compressed size (default estimate.image_size_gb)
    # and torch.compile times measured for this model (default: estimate's size-based figures).
    image_size_gb: PositiveFloat | None = None
    compile_seconds: MeasuredCompile | None = None
    # Scale on load instead of a fixed replica count (off by default).
    autoscaling: Autoscaling | None = None

    # The vLLM release inside the image; default: the one its tag names (vllm/vllm-openai:v0.34.0, AWS's
    # .../vllm:0.34.0-gpu-...). Needed for an image whose tag names none (a digest alone, your own build):
    # warmstart reads the release's facts (warmstart/vllm_releases/) from it.
    vllm_version: str | None = Field(default=None, pattern=VLLM_VERSION_PATTERN)

    # Compile-relevant identity: every field below is a factor of the torch.compile cache key.
    # Which weights (a commit, release or date): new weights under the same name get a new key.
    weights_revision: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    # PyTorch inside the serving image, in which compiled kernels are specific; default: what the image's vLLM
    # release pins (its wheel's metadata). Needed for a release warmstart has no facts of.
    torch_version: str | None = Field(default=None, pattern=r"^\d+\.\d+(\.\d+)?([+a-z0-9.]*)$")
    # Single-node serving: pipeline stages across nodes are out of scope; kept as a key factor.
    pipeline_parallel_size: Literal[1] = 1
    max_num_batched_tokens: PositiveInt | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    quantization: str | None = Field(default=None, pattern=r"^[a-z0-9_]+$")
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    compilation_config: dict[str, Any] | None = None
    # Weights cache on node NVMe for this model; default: caches.weights.
    weights_cache: bool | None = None
    # Extra VLLM_* variables for every pod of the model (pod-specific ones are refused: they would make
    # every pod's compile hash different).
    vllm_env: dict[str, str] = Field(default_factory=dict)

    @property
    def bucket(self) -> str:
        return self.s3_uri.removeprefix("s3://").split("/", 1)[0]

    @property
    def least_replicas(self) -> int:
        """The fewest replicas the model runs: what availability rules hold."""
        return self.autoscaling.min_replicas if self.autoscaling else self.replicas

    @property
    def most_replicas(self) -> int:
        """The most replicas the model runs: what the GPU budget must hold."""
        return self.autoscaling.max_replicas if self.autoscaling else self.replicas

    @property
    def prefix(self) -> str:
        return self.s3_uri.removeprefix("s3://").split("/", 1)[1]


class StreamerTuning(Strict):
    """Run:ai Model Streamer settings: each stream holds one chunk in memory, concurrency is at most size / chunk,
    and RUNAI_STREAMER_MEMORY_LIMIT caps a process's buffers (docs/upstream-facts.md, Run:ai streamer)."""

    chunk_bytes: int = Field(default=4 * GIB, ge=8 * MIB)
    request_timeout_ms: PositiveInt = 3000
    low_speed_limit_bytes_per_s: PositiveInt = 1 * MIB
    # Upper bound on concurrency = ceil(size / chunk): each stream holds one chunk in memory.
    max_concurrency: int = Field(default=64, ge=1, le=512)
    # RUNAI_STREAMER_MEMORY_LIMIT: the streamer never buffers more than this per process.
    memory_limit_bytes: PositiveInt = 40 * 10**9
    # Memory the vLLM process needs beside the streamer's buffers (Python, tokenizer, CUDA host state).
    process_headroom_gib: PositiveInt = 8


# The image-cache DaemonSet's long-running container by default (tiny, pinned).
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


class CacheSwitches(Strict):
    compile: bool = True
    weights: bool = False
    # Host folder of the torch.compile cache; default <NVMe mount>/compile-cache. Must stay under the
    # compute mode's NVMe mount, or DirectoryOrCreate would silently create it on the EBS root volume.
    compile_host_path: str | None = Field(default=None, pattern=r"^/")
    # Longest an inference pod waits for the node agent's restore before it compiles on its own.
    restore_wait_seconds: int = Field(default=90, ge=0, le=900)
    # How often the agent re-lists each cached model's S3 prefix: an update there is served by new pods
    # after at most this long (pods stream from S3 until the new copy is complete).
    weights_poll_seconds: int = Field(default=30, ge=5, le=3600)
    # NVMe budget per node beside the weights: container images (one per distinct serving image) and the
    # torch.compile cache.
    image_size_gb: float = Field(default=25, gt=0)
    compile_cache_reserve_gb: float = Field(default=10, ge=0)
    # The image-cache DaemonSet's long-running container (tiny, pinned).
    pause_image: str = PAUSE_IMAGE

    @model_validator(mode="before")
    @classmethod
    def _moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "image" in data:
            mode = "prepull" if data["image"] is True else "off"
            raise Refused(
                "caches.image moved to image_preload.mode",
                "write image_preload: {mode: prepull} (for true) or {mode: off} (for false)",
                together(Edit("image"), Edit("/image_preload.mode", mode)),
            )
        return data


class ImageSnapshot(Strict):
    """The EBS snapshot GPU nodes' container-image volume starts from (image_preload.mode: snapshot)."""

    # Bottlerocket's data volume (/dev/xvdb): the container images, plus room for what containers write.
    data_volume_gib: int = Field(default=150, ge=20, le=16384)
    data_volume_iops: int = Field(default=6000, ge=3000, le=16000)
    data_volume_throughput_mibps: int = Field(default=500, ge=125, le=1000)
    # A volume made from a snapshot fetches each block from S3 on first read; an initialization rate (100-300
    # MiB/s, EBS "Provisioned rate for volume initialization") makes the whole volume local at a known pace.
    volume_initialization_rate_mibps: int | None = Field(default=300, ge=100, le=300)
    # The short-lived instance that pulls the images (network and CPU for unpacking).
    builder_instance_type: str = Field(default="m7i.2xlarge", pattern=r"^[a-z][a-z0-9-]*\.[a-z0-9]+$")
    # Longest one build may take (launch, pull, stop, snapshot); the deploy waits for it inside one custom
    # resource call, which CloudFormation (and CDK's provider framework) bound at one hour.
    build_timeout_minutes: int = Field(default=50, ge=30, le=50)


class ImagePreload(Strict):
    """How the serving images reach a GPU node before the pods that need them.

    off: every pod pulls its image itself. prepull: a DaemonSet per image pulls it onto every GPU node as the
    node joins, and a new image reaches the existing nodes before its pods roll. snapshot (Karpenter with
    Bottlerocket): new nodes boot with the images already on their data volume, made from an EBS snapshot the
    stack builds; the pre-pull DaemonSets stay for nodes that predate a new snapshot."""

    mode: PreloadModeName = "prepull"
    # SOCI parallel pull and unpack for every pull on the GPU nodes (Karpenter nodes; not lazy loading).
    parallel_pull: bool = False
    # Longest a rollout to a new image waits for its pre-pull DaemonSet (the deploy's kubectl step lasts 15 min,
    # which must also hold the gate Job's start and status).
    rollout_wait_minutes: int = Field(default=10, ge=1, le=10)
    snapshot: ImageSnapshot = ImageSnapshot()

    @property
    def strategy(self) -> PreloadMode:
        """The mode's object: what it runs and how an image reaches a new node."""
        return PRELOAD_MODES[self.mode]

    @model_validator(mode="before")
    @classmethod
    def _lazy(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("mode") == "lazy":
            raise Refused(
                "lazy loading is not available on EKS nodes: Bottlerocket's SOCI snapshotter runs in parallel-pull "
                "mode only and the AL2023 AMI's FastImagePull turns lazy loading off (see README, Image preload)",
                "use mode: prepull or snapshot, with parallel_pull: true for faster pulls",
                setting("mode", "prepull"),
            )
        return data


class ServingAccess(Strict):
    """Who may call the models (a NetworkPolicy per model admits only these namespaces, and the model's own)."""

    client_namespaces: list[Annotated[str, Field(pattern=DNS_LABEL)]] = Field(default_factory=list)


class AgentMetricsAccess(Strict):
    """The node agent's Prometheus endpoint (/metrics) and who may scrape it (a NetworkPolicy admits only them)."""

    port: int = Field(default=9400, ge=1024, le=65535)
    # Amazon Managed Service for Prometheus' collector connects from its network interfaces in the cluster's
    # subnets: default, the VPC's CIDR. An in-cluster Prometheus: add its namespace below.
    scraper_cidrs: list[CidrBlock] | None = None
    scraper_namespaces: list[Annotated[str, Field(pattern=DNS_LABEL)]] = Field(default_factory=list)


def _github_environment(value: str) -> str:
    """GitHub's rule ("Managing environments for deployment"): at most 255 characters, any of them (spaces too);
    warmstart also refuses what a reader could not see: control characters, and spaces at either end."""
    if not value:
        raise Refused("is empty", "give the environment's name, or remove environment", setting("", UNSET))
    if len(value) > 255:
        raise Refused(f"has {len(value)} characters", "GitHub allows 1 to 255", setting("", value[:255].strip()))
    if value != value.strip():
        raise Refused(
            "starts or ends with a space", "write the name as GitHub shows it, without them", setting("", value.strip())
        )
    if any(not c.isprintable() for c in value):
        shown = "".join(c for c in value if c.isprintable()).strip()
        raise Refused(
            "holds a control character",
            "write the name as GitHub shows it",
            setting("", shown) if shown else setting("", UNSET),
        )
    return value


class GithubAccess(Strict):
    """Who may deploy this environment from GitHub Actions (OIDC, no stored keys): the CI access stack's roles."""

    repository: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$")  # owner/name
    # The deploy role trusts jobs of this GitHub environment (whose required reviewers gate the deploy) or,
    # without one, pushes to this branch.
    environment: Annotated[str, AfterValidator(_github_environment)] | None = None
    branch: str = Field(default="main", pattern=r"^[A-Za-z0-9._/-]{1,255}$")
    # Pull requests of the repository may run `make diff` through a read-only role (the CDK lookup role).
    pull_request_diff: bool = True
    # The account's GitHub OIDC provider (one per account): created by this environment's CI stack, or already
    # there (another environment of the account, or made by hand).
    create_oidc_provider: bool = True


class DeploySettings(Strict):
    """How the environment is deployed (`make bootstrap/diff/deploy/destroy`)."""

    # A prebuilt agent image (registry/repository@sha256:<digest>, built and pushed with `make agent-image`): no
    # Docker needed at deploy. Default: CDK builds node_agent/Dockerfile at deploy (Docker with buildx).
    agent_image: str | None = None
    # The CDK bootstrap qualifier of the account and Region (cdk bootstrap's default).
    bootstrap_qualifier: str = Field(default="hnb659fds", pattern=r"^[a-z0-9]{1,10}$")
    github: GithubAccess | None = None


class Alerts(Strict):
    """Where alarms go: a new SNS topic per environment with these email subscriptions, or an existing topic."""

    emails: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]] = Field(default_factory=list)
    topic_arn: str | None = Field(default=None, pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$")


class PruningPolicy(Strict):
    """The scheduled pruner of the compile-cache bucket."""

    schedule: str = Field(default="rate(1 day)", pattern=r"^(rate\(.+\)|cron\(.+\))$")
    retention_days: PositiveInt = 14
    max_deletions_per_run: PositiveInt = 10_000
    dry_run: bool = False
    # An archive whose publisher never wrote the manifest is removed after this long.
    orphan_age_hours: PositiveInt = 24
    # Other environments' active-set parameters, when they share this compile-cache bucket.
    extra_active_set_parameters: list[str] = Field(default_factory=list)


class EnvironmentConfig(Strict):
    name: str = Field(pattern=DNS_LABEL)
    account: str = Field(pattern=r"^\d{12}$")
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    network: NetworkConfig
    cluster: ClusterConfig
    compute: Compute
    buckets: BucketsConfig
    models: list[ModelSpec] = Field(min_length=1)
    streamer: StreamerTuning = StreamerTuning()
    caches: CacheSwitches = CacheSwitches()
    image_preload: ImagePreload = ImagePreload()
    pruning: PruningPolicy = PruningPolicy()
    serving: ServingAccess = ServingAccess()
    alerts: Alerts = Alerts()
    estimate: StartEstimate = StartEstimate()
    metrics: AgentMetricsAccess = AgentMetricsAccess()
    deploy: DeploySettings = DeploySettings()
    # AWS tags on every resource (at most 50 per resource, some added by CDK and EKS: keep well below).
    tags: dict[TagKey, TagValue] = Field(default_factory=dict, max_length=40)
