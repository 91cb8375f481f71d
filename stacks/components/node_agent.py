"""The warmstart node agent: its image (built by CDK at deploy, never at synth), its AWS identity (the
compile-cache prefix, and read-only the model prefixes whose weights it caches), its Kubernetes objects."""

from __future__ import annotations

import cdk8s
from aws_cdk import IgnoreMode
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from k8s.node_agent import NodeAgentChart
from stacks.components.pod_identity import PodIdentity, model_read_statements
from stacks.components.source import REPOSITORY_ROOT, only
from warmstart.agent_settings import AGENT_NAMESPACE, AGENT_SERVICE_ACCOUNT, AgentSettings
from warmstart.cache_key import KEY_ROOT

# The image needs the agent and the domain package, nothing else of the repository.
IMAGE_CONTEXT = only("agent", "warmstart")


def agent_statements(bucket_name: str) -> list[iam.PolicyStatement]:
    """Read and create under compile-cache/ only, never delete (the bucket policy leaves that to the pruner);
    abort its own failed multipart uploads; list for 404s."""
    bucket_arn = f"arn:aws:s3:::{bucket_name}"
    return [
        iam.PolicyStatement(
            sid="CompileCacheObjects",
            actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
            resources=[f"{bucket_arn}/{KEY_ROOT}/*"],
        ),
        # Without ListBucket S3 answers 403 instead of 404 for a key that is not published yet.
        iam.PolicyStatement(
            sid="ListCompileCache",
            actions=["s3:ListBucket"],
            resources=[bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{KEY_ROOT}/*"]}},
        ),
    ]


class NodeAgent(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.Cluster,
        charts: cdk8s.App,
        settings: AgentSettings,
        cache_root: str,
        weights_root: str,
        pod_records_root: str,
        model_kms_key_arn: str | None,
    ) -> None:
        super().__init__(scope, id)
        self.image = ecr_assets.DockerImageAsset(
            self,
            "Image",
            directory=str(REPOSITORY_ROOT),
            file="agent/Dockerfile",
            exclude=IMAGE_CONTEXT,
            ignore_mode=IgnoreMode.DOCKER,
            platform=ecr_assets.Platform.LINUX_AMD64,
        )
        self.identity = PodIdentity(
            self,
            "Identity",
            cluster=cluster,
            namespace=AGENT_NAMESPACE,
            service_account=AGENT_SERVICE_ACCOUNT,
            description="warmstart node agent: compile-cache prefix, cached model prefixes (read-only)",
        )
        self.policy = None
        if settings.compile_models:
            self.policy = iam.Policy(
                self, "CompileCacheAccess", statements=agent_statements(settings.bucket), roles=[self.identity.role]
            )
        self.weights_policies = {
            model.name: iam.Policy(
                self,
                f"ReadWeights-{model.name}",
                statements=model_read_statements(settings.model_bucket, model.weights.prefix, model_kms_key_arn),
                roles=[self.identity.role],
            )
            for model in settings.weights_models
        }
        self.chart = NodeAgentChart(
            charts,
            "NodeAgent",
            settings=settings,
            image=self.image.image_uri,
            cache_root=cache_root,
            weights_root=weights_root,
            pod_records_root=pod_records_root,
        )
        self.manifest = cluster.add_cdk8s_chart("NodeAgent", self.chart)
        self.manifest.node.add_dependency(
            self.identity.association, *([self.policy] if self.policy else []), *self.weights_policies.values()
        )
