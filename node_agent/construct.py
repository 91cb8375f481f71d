"""The warmstart node agent: its AWS identity (the compile-cache prefix, and read-only the model prefixes whose
weights it caches) and its Kubernetes objects, running the agent image (image.py)."""

from __future__ import annotations

import cdk8s
from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from construct_kit.nag import acknowledge, wildcard
from construct_kit.pod_identity import PodIdentity, model_read_statements
from construct_kit.source import applies_objects
from contracts.agent_settings import AGENT_NAMESPACE, AGENT_SERVICE_ACCOUNT, AgentSettings
from contracts.cache_key import KEY_ROOT
from contracts.pruner_report import PRUNER_REPORT_KEY
from node_agent.chart import MetricsScrapers, NodeAgentChart, NodeFolders
from node_agent.image import AgentImage
from warmstart.scale import prefix_groups


def agent_statements(bucket_name: str, *, partition: str) -> list[iam.PolicyStatement]:
    """Read and create under compile-cache/ only, never delete (the bucket policy leaves that to the pruner);
    abort its own failed multipart uploads; list for 404s; read the pruner's report of its last run."""
    bucket_arn = f"arn:{partition}:s3:::{bucket_name}"
    return [
        iam.PolicyStatement(
            sid="CompileCacheObjects",
            actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
            resources=[f"{bucket_arn}/{KEY_ROOT}/*"],
        ),
        iam.PolicyStatement(
            sid="ReadPrunerReport",
            actions=["s3:GetObject"],
            resources=[f"{bucket_arn}/{PRUNER_REPORT_KEY}"],
        ),
        # Without ListBucket S3 answers 403 instead of 404 for a key that is not published yet.
        iam.PolicyStatement(
            sid="ListCompileCache",
            actions=["s3:ListBucket"],
            resources=[bucket_arn],
            # The report's key too: a GetObject of it before the pruner's first run must answer 404, not 403.
            conditions={"StringLike": {"s3:prefix": [f"{KEY_ROOT}/*", PRUNER_REPORT_KEY]}},
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
        image: AgentImage,
        settings: AgentSettings,
        folders: NodeFolders,
        scrapers: MetricsScrapers,
        model_kms_key_arn: str | None,
    ) -> None:
        super().__init__(scope, id)
        self.image = image
        self.identity = PodIdentity(
            self,
            "Identity",
            cluster=cluster,
            namespace=AGENT_NAMESPACE,
            service_account=AGENT_SERVICE_ACCOUNT,
            description="warmstart node agent: compile-cache prefix, cached model prefixes (read-only)",
        )
        self.policy = self._compile_cache_access(settings)
        self.weights_policies = self._weights_access(settings, model_kms_key_arn)
        self.chart = NodeAgentChart(
            charts,
            "NodeAgent",
            settings=settings,
            image=image.uri,
            folders=folders,
            scrapers=scrapers,
        )
        # None where a GitOps tool applies the chart (rendered to dist/<env>/).
        self.manifest = cluster.add_cdk8s_chart("NodeAgent", self.chart) if applies_objects(cluster) else None
        if self.manifest is not None:
            self.manifest.node.add_dependency(
                self.identity.association, *([self.policy] if self.policy else []), *self.weights_policies
            )

    def _compile_cache_access(self, settings: AgentSettings) -> iam.Policy | None:
        if not settings.compile_models:
            return None
        policy = iam.Policy(
            self,
            "CompileCacheAccess",
            statements=agent_statements(settings.bucket, partition=Stack.of(self).partition),
            roles=[self.identity.role],
        )
        acknowledge(
            policy,
            "The agent reads and writes cache archives under compile-cache/ only; their names are content "
            "hashes of compiled kernels, unknown at synth.",
            wildcard(f"arn:aws:s3:::{settings.bucket}/{KEY_ROOT}/*"),
        )
        return policy

    def _weights_access(self, settings: AgentSettings, model_kms_key_arn: str | None) -> list[iam.ManagedPolicy]:
        # Managed policies, a group of models each (warmstart.scale): a role's inline policies share 10,240
        # characters in all, while each managed policy holds 6,144 and a role takes 10.
        prefixes = [model.weights_cache.prefix for model in settings.weights_models]
        policies = [
            iam.ManagedPolicy(
                self,
                f"ReadWeights{index}" if index else "ReadWeights",
                statements=model_read_statements(
                    settings.model_bucket, group, model_kms_key_arn, partition=Stack.of(self).partition
                ),
                roles=[self.identity.role],
                description="warmstart node agent: read the cached models' S3 prefixes",
            )
            for index, group in enumerate(prefix_groups(settings.model_bucket, prefixes))
        ]
        for policy in policies:
            acknowledge(
                policy,
                "The agent copies the cached models' files to node NVMe: read-only, under each model's own "
                "prefix; the file names change with every model update.",
                *(wildcard(f"arn:aws:s3:::{settings.model_bucket}/{prefix}*") for prefix in prefixes),
            )
        return policies
