"""The warmstart agent's container image: built by CDK at deploy (never at synth) from the node agent's runtime,
the image rollout gate's and the contracts package (nothing of the domain package: a new refusal message does not
rebuild it); the node agent DaemonSet and the image rollout gates run it."""

from __future__ import annotations

from aws_cdk import IgnoreMode
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

from construct_kit.source import REPOSITORY_ROOT, only

# What the image runs, nothing else of the repository (a change elsewhere does not rebuild it).
IMAGE_SOURCE = (
    "node_agent/runtime",
    "node_agent/requirements.txt",
    "image_preload/runtime/gate.py",
    "contracts",
)
DOCKERFILE = "node_agent/Dockerfile"
# CDK re-includes a Dockerfile by its base name only, which matches a top-level one: name ours explicitly, or the
# build would find no Dockerfile in the context it is sent.
IMAGE_CONTEXT = only(*IMAGE_SOURCE, DOCKERFILE)


class AgentImage(Construct):
    """The image CDK builds at deploy (Docker with buildx), or a prebuilt one named by digest
    (deploy.agent_image, pushed by `make agent-image`): then nothing is built and no Docker is needed."""

    def __init__(self, scope: Construct, id: str, *, prebuilt: str | None = None) -> None:
        super().__init__(scope, id)
        self.asset: ecr_assets.DockerImageAsset | None = None
        if prebuilt is not None:
            self.uri, self.revision = prebuilt, prebuilt.rsplit("@sha256:", 1)[1]
            return
        self.asset = ecr_assets.DockerImageAsset(
            self,
            "Image",
            directory=str(REPOSITORY_ROOT),
            file=DOCKERFILE,
            exclude=IMAGE_CONTEXT,
            ignore_mode=IgnoreMode.DOCKER,
            platform=ecr_assets.Platform.LINUX_AMD64,
        )
        # The revision changes with the image's content, known at synth: the asset hash, or the digest.
        self.uri, self.revision = self.asset.image_uri, self.asset.asset_hash


def dockerignore() -> str:
    """node_agent/Dockerfile.dockerignore: the same context for `make agent-image` (BuildKit reads a
    <Dockerfile>.dockerignore beside the Dockerfile) as for CDK's asset (tests hold the two equal)."""
    return "# Written from node_agent/image.py (IMAGE_CONTEXT); tests/unit/test_agent_image.py holds it equal.\n" + (
        "\n".join(IMAGE_CONTEXT) + "\n"
    )
