from __future__ import annotations

from aws_cdk import Stack
from constructs import Construct

from stacks.components.buckets import ArtifactBuckets
from warmstart.config import BucketsConfig


class DataStack(Stack):
    """Stateful storage, in a stack of its own so that cluster changes never touch it."""

    def __init__(self, scope: Construct, id: str, *, buckets: BucketsConfig, pruner_role_arn: str, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        self.buckets = ArtifactBuckets(self, "Buckets", buckets=buckets, pruner_role_arn=pruner_role_arn)
