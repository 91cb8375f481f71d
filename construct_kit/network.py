"""VPC whose private subnets reach S3 through a gateway endpoint, never through the NAT gateways."""

from __future__ import annotations

import ipaddress
from typing import Protocol

from aws_cdk import RemovalPolicy, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from construct_kit.log_retention import retention_days
from warmstart.config.network import ExistingVpc, NetworkConfig


class ClusterNetwork(Protocol):
    """What the cluster and its nodes need of a VPC, owned or existing."""

    @property
    def vpc(self) -> ec2.IVpc: ...

    @property
    def private_subnets(self) -> ec2.SubnetSelection: ...

    def private_subnet_list(self) -> list[ec2.ISubnet]: ...


def subnet_masks(vpc_cidr: str) -> tuple[int, int]:
    """(public, private) prefix lengths: large private subnets for GPU pods, small public ones for NAT/LBs."""
    prefix = ipaddress.ip_network(vpc_cidr).prefixlen
    return prefix + 6, prefix + 2


class WarmstartVpc(Construct):
    def __init__(self, scope: Construct, id: str, *, network: NetworkConfig) -> None:
        super().__init__(scope, id)
        public_mask, private_mask = subnet_masks(network.vpc_cidr)
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            ip_addresses=ec2.IpAddresses.cidr(network.vpc_cidr),
            availability_zones=list(network.availability_zones),
            nat_gateways=network.nat_gateways,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=public_mask),
                ec2.SubnetConfiguration(
                    name="private", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=private_mask
                ),
            ],
        )
        self.private_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        # Gateway (not Interface) endpoint on every private route table: weight downloads bypass the
        # NAT's shared bandwidth and its per-GB charge.
        self.s3_endpoint = self.vpc.add_gateway_endpoint(
            "S3Gateway", service=ec2.GatewayVpcEndpointAwsService.S3, subnets=[self.private_subnets]
        )
        self.flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=retention_days(network.flow_log_retention_days),
            removal_policy=RemovalPolicy.RETAIN,
        )
        self.flow_log = self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(self.flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.ALL,
        )
        for subnet in self.vpc.private_subnets:
            Tags.of(subnet).add("kubernetes.io/role/internal-elb", "1")
        for subnet in self.vpc.public_subnets:
            Tags.of(subnet).add("kubernetes.io/role/elb", "1")

    def private_subnet_list(self) -> list[ec2.ISubnet]:
        """The private subnets themselves (nodes and the image builder launch into them)."""
        return self.vpc.select_subnets(subnet_type=self.private_subnets.subnet_type).subnets


class ImportedVpc(Construct):
    """A VPC warmstart did not create, imported from the config's facts (no lookup at synth); with
    `add_s3_endpoint`, warmstart's S3 gateway endpoint on its private subnets' route tables."""

    def __init__(self, scope: Construct, id: str, *, existing: ExistingVpc, add_s3_endpoint: bool) -> None:
        super().__init__(scope, id)
        subnets = existing.private_subnets
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self,
            "Vpc",
            vpc_id=existing.vpc_id,
            vpc_cidr_block=existing.vpc_cidr,
            availability_zones=sorted({subnet.availability_zone for subnet in subnets}),
        )
        self._subnets = [
            ec2.Subnet.from_subnet_attributes(
                self,
                f"Subnet{index}",
                subnet_id=subnet.id,
                availability_zone=subnet.availability_zone,
                route_table_id=subnet.route_table_id,
            )
            for index, subnet in enumerate(subnets)
        ]
        self.private_subnets = ec2.SubnetSelection(subnets=self._subnets)
        self.s3_endpoint = (
            ec2.GatewayVpcEndpoint(
                self,
                "S3Gateway",
                vpc=self.vpc,
                service=ec2.GatewayVpcEndpointAwsService.S3,
                subnets=[self.private_subnets],
            )
            if add_s3_endpoint
            else None
        )

    def private_subnet_list(self) -> list[ec2.ISubnet]:
        return list(self._subnets)
