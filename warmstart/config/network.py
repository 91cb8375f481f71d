"""The `network` section: the VPC warmstart creates, or an existing one it imports."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import (
    Field,
    PositiveInt,
    field_validator,
    model_validator,
)

from warmstart.checks.fix import removing, setting
from warmstart.config.base import CidrBlock, RequiredCidrBlock, Strict, ipv4_cidr, unique_in_order
from warmstart.problem import Refused


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
            once = unique_in_order(value)
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
