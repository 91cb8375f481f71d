"""The warmstart agent's container image: built by CDK at deploy (never at synth) from the node agent's runtime,
the runtimes it shares (the image rollout gate; the vLLM entry step, whose records the agent reads) and the domain
package; the node agent DaemonSet and the image rollout gates run it."""

from __future__ import annotations

from aws_cdk import IgnoreMode
from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct

from stacks.components.source import REPOSITORY_ROOT, only

# What the image runs, nothing else of the repository (a change elsewhere does not rebuild it).
IMAGE_SOURCE = (
    "node_agent/runtime",
    "node_agent/requirements.txt",
    "image_preload/runtime/gate.py",
    "model_workload/runtime",
    "warmstart",
)
# Command-line only (the estimate's chart, which imports matplotlib): not in the image.
IMAGE_LEAVES_OUT = ("warmstart/estimate_plot.py",)
DOCKERFILE = "node_agent/Dockerfile"
# CDK re-includes a Dockerfile by its base name only, which matches a top-level one: name ours explicitly, or the
# build would find no Dockerfile in the context it is sent.
IMAGE_CONTEXT = only(*IMAGE_SOURCE, DOCKERFILE, leaving_out=IMAGE_LEAVES_OUT)


class AgentImage(Construct):
    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        self.asset = ecr_assets.DockerImageAsset(
            self,
            "Image",
            directory=str(REPOSITORY_ROOT),
            file=DOCKERFILE,
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
