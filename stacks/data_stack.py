from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from construct_kit.buckets import ArtifactBuckets
from warmstart.config.operations import BucketsConfig


class DataStack(Stack):
    """Stateful storage, in a stack of its own so that cluster changes never touch it."""

    def __init__(self, scope: Construct, id: str, *, buckets: BucketsConfig, pruner_role_name: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        # The pruner's role has a fixed name, so the bucket policy can name it without a cross-stack reference.
        pruner_role_arn = f"arn:{self.partition}:iam::{self.account}:role/{pruner_role_name}"
        self.buckets = ArtifactBuckets(self, "Buckets", buckets=buckets, pruner_role_arn=pruner_role_arn)
