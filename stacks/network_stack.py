from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from stacks.components.network import WarmstartVpc
from warmstart.config import NetworkConfig


class NetworkStack(Stack):
    def __init__(self, scope: Construct, id: str, *, network: NetworkConfig, **kwargs) -> None:
        self._zones = list(network.availability_zones)
        super().__init__(scope, id, **kwargs)
        self.network = WarmstartVpc(self, "Network", network=network)

    @property
    def availability_zones(self) -> list[str]:
        # The config fixes the AZs: without this override CDK would look them up (needs credentials).
        return self._zones
