"""S3 buckets: model weights (created or existing), compile artifacts, and their access logs."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from contracts.cache_key import ARCHIVE_STEM, KEY_ROOT, MANIFEST_STEM
from warmstart.config.operations import BucketsConfig


def _secure_bucket_props() -> dict:
    return dict(
        encryption=s3.BucketEncryption.S3_MANAGED,
        block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
        enforce_ssl=True,
        minimum_tls_version=1.2,
        object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
        removal_policy=RemovalPolicy.RETAIN,
    )


def first_writer_wins(bucket: s3.Bucket, *, pruner_role_arn: str) -> None:
    """Every node loads and runs what the manifests and archives hold, so no node may overwrite or delete
    them: they are created only with If-None-Match (the parts of a multipart upload are exempt through
    s3:ObjectCreationOperation; its completion carries the condition), and only the pruner deletes them.
    last-use.json stays writable. S3 user guide, "Enforce conditional writes on Amazon S3 buckets"."""
    shared = [
        bucket.arn_for_objects(f"{KEY_ROOT}/*/{MANIFEST_STEM}*"),
        bucket.arn_for_objects(f"{KEY_ROOT}/*/{ARCHIVE_STEM}*"),
    ]
    for sid, action, conditions in (
        (
            "CreateCacheObjectsOnlyIfAbsent",
            "s3:PutObject",
            {"Null": {"s3:if-none-match": "true"}, "Bool": {"s3:ObjectCreationOperation": "true"}},
        ),
        (
            "OnlyThePrunerDeletesCacheObjects",
            "s3:DeleteObject",
            {"ArnNotEquals": {"aws:PrincipalArn": pruner_role_arn}},
        ),
    ):
        bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid=sid,
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=[action],
                resources=shared,
                conditions=conditions,
            )
        )


class ArtifactBuckets(Construct):
    def __init__(self, scope: Construct, id: str, *, buckets: BucketsConfig, pruner_role_arn: str) -> None:
        super().__init__(scope, id)
        abort_multipart = s3.LifecycleRule(
            id="abort-incomplete-multipart-uploads",
            abort_incomplete_multipart_upload_after=Duration.days(buckets.abort_incomplete_multipart_days),
        )
        self.access_logs = s3.Bucket(
            self,
            "AccessLogs",
            **_secure_bucket_props(),
            lifecycle_rules=[
                abort_multipart,
                s3.LifecycleRule(id="expire-access-logs", expiration=Duration.days(buckets.access_log_retention_days)),
            ],
        )
        self.compile_cache = s3.Bucket(
            self,
            "CompileCache",
            bucket_name=buckets.compile_cache,
            **_secure_bucket_props(),
            server_access_logs_bucket=self.access_logs,
            server_access_logs_prefix="compile-cache/",
            lifecycle_rules=[abort_multipart],
        )
        first_writer_wins(self.compile_cache, pruner_role_arn=pruner_role_arn)
        self.model_bucket_name = buckets.models.name
        if buckets.models.create:
            # Versioned: an overwritten weight file keeps its old version until the new cache is live.
            self.models: s3.IBucket = s3.Bucket(
                self,
                "Models",
                bucket_name=buckets.models.name,
                **_secure_bucket_props(),
                versioned=True,
                server_access_logs_bucket=self.access_logs,
                server_access_logs_prefix="models/",
                lifecycle_rules=[
                    abort_multipart,
                    s3.LifecycleRule(id="expire-noncurrent-weights", noncurrent_version_expiration=Duration.days(30)),
                ],
            )
        else:
            self.models = s3.Bucket.from_bucket_name(self, "Models", buckets.models.name)
