from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Stack
from aws_cdk import aws_eks_v2 as eks
from constructs import Construct

from model_workload.construct import ModelWorkload
from warmstart.autoscaling import ScalingPolicy
from warmstart.workload import ModelPlan


class ModelStack(Stack):
    """One served model (its identity and workload), in a stack of its own: an environment's templates stay
    within CloudFormation's size and resource limits whatever the number of models, and adding or removing a
    model touches only its stack."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.Cluster,
        plan: ModelPlan,
        scaling: ScalingPolicy | None,
        bucket_name: str,
        kms_key_arn: str | None,
        after: Sequence[Construct],
        **kwargs,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        self.workload = ModelWorkload(
            self,
            "Model",
            cluster=cluster,
            plan=plan,
            scaling=scaling,
            bucket_name=bucket_name,
            kms_key_arn=kms_key_arn,
            after=after,
        )
