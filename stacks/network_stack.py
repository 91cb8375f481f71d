from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from stacks.components.nag import acknowledge
from stacks.components.network import WarmstartVpc
from warmstart.config import NetworkConfig


class NetworkStack(Stack):
    def __init__(self, scope: Construct, id: str, *, network: NetworkConfig, **kwargs) -> None:
        self._zones = list(network.availability_zones)
        super().__init__(scope, id, **kwargs)
        self.network = WarmstartVpc(self, "Network", network=network)
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
