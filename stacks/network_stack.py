from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from construct_kit.nag import acknowledge
from construct_kit.network import ImportedVpc, WarmstartVpc
from warmstart.config.network import NetworkConfig


def owns_network_resources(network: NetworkConfig) -> bool:
    """Whether the environment has a network stack: its own VPC, or an S3 gateway endpoint it adds to an existing
    VPC (an existing VPC is otherwise only imported, where the cluster stack needs it)."""
    return network.existing is None or network.existing.s3_gateway_endpoint == "add"


class NetworkStack(Stack):
    """The VPC warmstart creates, or the S3 gateway endpoint it adds to an existing VPC's private route tables."""

    def __init__(self, scope: Construct, id: str, *, network: NetworkConfig, **kwargs) -> None:
        self._zones = network.zones
        super().__init__(scope, id, **kwargs)
        self.network: WarmstartVpc | ImportedVpc = (
            WarmstartVpc(self, "Network", network=network)
            if network.existing is None
            else ImportedVpc(self, "Network", existing=network.existing, add_s3_endpoint=True)
        )
        acknowledge(
            self,
            "The AZs are fixed in the environment's config on purpose: synth must never look them up (no "
            "credentials, no network), and a deploy must never move subnets to other zones.",
            "CloudFormation-Validate::W3010",
        )

    @property
    def availability_zones(self) -> list[str]:
        # The config fixes the AZs: without this override CDK would look them up (needs credentials).
        return self._zones
