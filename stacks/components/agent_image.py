"""The warmstart agent's container image: built by CDK at deploy (never at synth) from agent/ and the domain
package; the node agent DaemonSet and the image rollout gates run it."""

from __future__ import annotations

from aws_cdk import IgnoreMode
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

from stacks.components.source import REPOSITORY_ROOT, only

# The image needs the agent and the domain package, nothing else of the repository.
IMAGE_CONTEXT = only("agent", "warmstart")


class AgentImage(Construct):
    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        self.asset = ecr_assets.DockerImageAsset(
            self,
            "Image",
            directory=str(REPOSITORY_ROOT),
            file="agent/Dockerfile",
            exclude=IMAGE_CONTEXT,
            ignore_mode=IgnoreMode.DOCKER,
            platform=ecr_assets.Platform.LINUX_AMD64,
        )

    @property
    def uri(self) -> str:
        return self.asset.image_uri

    @property
    def revision(self) -> str:
        """Changes with the image's content (the asset hash), known at synth."""
        return self.asset.asset_hash
