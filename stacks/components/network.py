"""VPC whose private subnets reach S3 through a gateway endpoint, never through the NAT gateways."""

from __future__ import annotations

import ipaddress

from aws_cdk import RemovalPolicy, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from stacks.components.log_retention import retention_days
from warmstart.config import NetworkConfig


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
