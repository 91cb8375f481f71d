"""The scheduled Lambda that prunes stale compile-cache keys, its active set, its alarms.

No bundling and no Docker: the function is the repository's own source (`pruner/runtime/`, the shared Lambda
parts and the domain package for the key layout), and it needs nothing beyond the runtime's boto3.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_scheduler as scheduler
from aws_cdk import aws_scheduler_targets as scheduler_targets
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from construct_kit.lambda_packaging import function_code
from construct_kit.log_retention import retention_days
from construct_kit.nag import acknowledge, arn_wildcard, wildcard
from contracts.active_set_format import STANDARD_LIMIT, active_set_part_name
from contracts.cache_key import KEY_ROOT, PRUNER_LOCK_KEY
from contracts.pruner_report import PRUNER_REPORT_KEY
from pruner.runtime.settings import PrunerEnvironment
from warmstart.config.operations import PruningPolicy

FUNCTION_SOURCE = ("pruner/runtime", "contracts")
METRIC_NAMESPACE = "Warmstart/CompileCachePruner"


def pruner_role_name(environment: str) -> str:
    """Fixed, so the compile-cache bucket's policy can name the one principal allowed to delete manifests and
    archives (the environment name is at most 36 characters: at most 59 here)."""
    return f"warmstart-{environment}-cache-pruner"


class CompileCachePruner(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        environment: str,
        bucket_name: str,
        active_set_name: str,
        active_set_documents: list[str],
        policy: PruningPolicy,
    ) -> None:
        super().__init__(scope, id)
        self._active_set(active_set_name, active_set_documents)
        self.dead_letters = sqs.Queue(
            self,
            "DeadLetters",
            retention_period=Duration.days(14),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        self.log_group = logs.LogGroup(self, "Logs", retention=retention_days(90), removal_policy=RemovalPolicy.DESTROY)
        self._function(environment, bucket_name, active_set_name, policy)
        self._access(bucket_name, active_set_name, len(active_set_documents), policy)
        self._schedule(environment, policy)
        self._alarms(environment)
        self._acknowledge_findings(bucket_name, policy)

    def _active_set(self, active_set_name: str, active_set_documents: list[str]) -> None:
        """The keys the pruner keeps, in as many SSM parameters as they need."""
        self.active_set_parts = [
            ssm.StringParameter(
                self,
                "ActiveSet" if part == 1 else f"ActiveSet{part}",
                parameter_name=active_set_part_name(active_set_name, part),
                string_value=document,
                description="compile-cache keys the current models can produce; the pruner never deletes them"
                + (f" (part {part})" if part > 1 else ""),
                tier=ssm.ParameterTier.STANDARD if len(document) <= STANDARD_LIMIT else ssm.ParameterTier.ADVANCED,
            )
            for part, document in enumerate(active_set_documents, start=1)
        ]
        self.active_set = self.active_set_parts[0]

    def _function(self, environment: str, bucket_name: str, active_set_name: str, policy: PruningPolicy) -> None:
        parameters = [active_set_name, *policy.extra_active_set_parameters]
        self.role = iam.Role(
            self,
            "Role",
            role_name=pruner_role_name(environment),
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"compile-cache pruner of {environment}: list and delete under {KEY_ROOT}/ only",
        )
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=lambda_.Runtime.PYTHON_3_14,
            code=function_code(*FUNCTION_SOURCE),
            handler="pruner.runtime.handler.handler",
            role=self.role,
            memory_size=512,
            timeout=Duration.minutes(15),
            # Runs never overlap: a lock object in the bucket (conditional create), not reserved concurrency,
            # which accounts with a low concurrency quota refuse (Lambda guide, "Configuring reserved concurrency").
            log_group=self.log_group,
            dead_letter_queue=self.dead_letters,
            retry_attempts=0,  # a failed run is reported, and the next scheduled run starts afresh
            environment=PrunerEnvironment(
                bucket=bucket_name,
                active_set_parameters=tuple(parameters),
                retention_days=policy.retention_days,
                orphan_age_hours=policy.orphan_age_hours,
                max_deletions=policy.max_deletions_per_run,
                dry_run=policy.dry_run,
                environment=environment,
            ).variables(),
        )

    def _access(self, bucket_name: str, active_set_name: str, parts: int, policy: PruningPolicy) -> None:
        stack = Stack.of(self)
        parameter_arn = f"arn:{stack.partition}:ssm:{stack.region}:{stack.account}:parameter"
        own = [active_set_part_name(active_set_name, part) for part in range(1, parts + 1)]
        # Another environment's set may have parts too (<name>-2, ...): their number is only known at run time.
        shared = [name for extra in policy.extra_active_set_parameters for name in (extra, f"{extra}-*")]
        self.policy = iam.Policy(
            self,
            "Access",
            roles=[self.role],
            statements=pruner_statements(
                bucket_name=bucket_name,
                parameter_arns=[f"{parameter_arn}{name}" for name in [*own, *shared]],
                log_group_arn=self.log_group.log_group_arn,
                partition=stack.partition,
            ),
        )

    def _schedule(self, environment: str, policy: PruningPolicy) -> None:
        self.scheduler_role = iam.Role(
            self,
            "SchedulerRole",
            assumed_by=iam.ServicePrincipal("scheduler.amazonaws.com"),
            description=f"EventBridge Scheduler: invoke the compile-cache pruner of {environment}",
        )
        self.schedule = scheduler.Schedule(
            self,
            "Schedule",
            schedule=scheduler.ScheduleExpression.expression(policy.schedule),
            target=scheduler_targets.LambdaInvoke(
                self.function, role=self.scheduler_role, dead_letter_queue=self.dead_letters, retry_attempts=2
            ),
            description=f"prune stale compile-cache keys of {environment}",
        )

    def _alarms(self, environment: str) -> None:
        self.alarms = [
            _alarm_on_any(
                self,
                "FailedRun",
                self.function.metric_errors(period=Duration.hours(1)),
                "A pruning run failed (it deleted nothing it had not decided on; see its logs).",
            ),
            _alarm_on_any(
                self,
                "DeadLetter",
                self.dead_letters.metric_approximate_number_of_messages_visible(period=Duration.hours(1)),
                "A pruning run could not be invoked or failed asynchronously.",
            ),
            _alarm_on_any(
                self,
                "ActiveSetUnavailable",
                cloudwatch.Metric(
                    namespace=METRIC_NAMESPACE,
                    metric_name="active_set_unavailable",
                    dimensions_map={"Environment": environment},
                    statistic="Sum",
                    period=Duration.hours(1),
                ),
                "The pruner found no readable active set and deleted nothing (fail closed).",
            ),
        ]

    def _acknowledge_findings(self, bucket_name: str, policy: PruningPolicy) -> None:
        stack = Stack.of(self)
        if policy.extra_active_set_parameters:
            acknowledge(
                self.policy,
                "Another environment's active set may be split into parts (<name>-2, ...) whose number only its "
                "first parameter tells at run time; read-only, under that environment's own parameter name.",
                *(
                    wildcard(f"arn:aws:ssm:{stack.region}:{stack.account}:parameter{name}-*")
                    for name in policy.extra_active_set_parameters
                ),
            )
        acknowledge(
            self.policy,
            "The pruner deletes stale compile-cache objects, whose names are only known by listing; the grant is "
            "limited to the compile-cache/ prefix of the environment's own bucket.",
            wildcard(f"arn:aws:s3:::{bucket_name}/{KEY_ROOT}/*"),
        )
        acknowledge(
            self.policy,
            "Log streams of the function's own log group are created by the Lambda runtime with generated names.",
            arn_wildcard(self.log_group),
        )
        acknowledge(
            self.scheduler_role,
            "EventBridge Scheduler's role may invoke the pruner function and its versions (ARN:*), nothing else.",
            arn_wildcard(self.function),
        )


def _alarm_on_any(scope: Construct, id: str, metric: cloudwatch.IMetric, description: str) -> cloudwatch.Alarm:
    """Raised by a single occurrence; quiet when there is no data (no run, no failure)."""
    return cloudwatch.Alarm(
        scope,
        id,
        metric=metric,
        threshold=1,
        evaluation_periods=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        alarm_description=description,
    )


def pruner_statements(
    *, bucket_name: str, parameter_arns: list[str], log_group_arn: str, partition: str
) -> list[iam.PolicyStatement]:
    bucket_arn = f"arn:{partition}:s3:::{bucket_name}"
    return [
        iam.PolicyStatement(
            sid="ListCompileCache",
            actions=["s3:ListBucket"],
            resources=[bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{KEY_ROOT}/*"]}},
        ),
        # Its own statement: s3:prefix is not a condition key of ListBucketMultipartUploads (Service
        # Authorization Reference, Amazon S3), and a condition on a key an action lacks is false: always denied.
        iam.PolicyStatement(
            sid="ListMultipartUploads",
            actions=["s3:ListBucketMultipartUploads"],
            resources=[bucket_arn],
        ),
        # GetObject: manifests name their archive, and a delete conditional on the listed ETag (so an
        # object rewritten since the listing is kept) needs it beside DeleteObject (S3 guide, "How to perform
        # conditional deletes").
        iam.PolicyStatement(
            sid="DeleteCompileCache",
            actions=["s3:GetObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            resources=[f"{bucket_arn}/{KEY_ROOT}/*"],
        ),
        iam.PolicyStatement(
            sid="OneRunAtATime",
            actions=["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            resources=[f"{bucket_arn}/{PRUNER_LOCK_KEY}"],
        ),
        # Each run's report, which the node agents read into the metrics the alert rules watch.
        iam.PolicyStatement(
            sid="ReportLastRun",
            actions=["s3:PutObject"],
            resources=[f"{bucket_arn}/{PRUNER_REPORT_KEY}"],
        ),
        iam.PolicyStatement(
            sid="ReadActiveSets",
            actions=["ssm:GetParameter"],
            resources=parameter_arns,
        ),
        iam.PolicyStatement(
            sid="WriteOwnLogs",
            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
            resources=[log_group_arn, f"{log_group_arn}:*"],
        ),
    ]
