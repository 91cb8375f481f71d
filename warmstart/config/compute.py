"""The `compute` section: the GPU pool and the compute mode (Auto Mode or Karpenter), a discriminated union on
`mode`."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, get_args

from pydantic import (
    Field,
    PositiveInt,
    field_validator,
    model_validator,
)

from warmstart.checks.fix import Edit, Fix, removing, setting
from warmstart.config.base import DNS_LABEL, DURATION, Strict, TagKey, TagValue, unique_in_order
from warmstart.config.cluster import IAM_ROLE_NAME
from warmstart.node_os import AMI_ALIAS_PATTERN, AUTO_MODE_OS, DEFAULT_AMI_ALIAS, NodeOs, karpenter_node_os
from warmstart.problem import Refused

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
            raise Refused(
                "an instance type is listed twice", "list each type once", setting("", unique_in_order(value))
            )
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
