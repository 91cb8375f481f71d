"""Every permission of the image snapshot build, written out (conditions included): the workflow's (launch one
builder tagged for this environment from a public AMI into its own subnet and group, run one command document on
it, stop, snapshot and terminate only what carries its tag, record the result) and the custom resource function's
(start and follow builds, delete only this environment's snapshots and builders)."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn

from image_preload.runtime.snapshot.build import BUILDER_TAG, ENVIRONMENT_TAG
from image_preload.snapshot_workflow import BUILDER_RESOURCES

statement = iam.PolicyStatement


@dataclass(frozen=True)
class WorkflowScope:
    """What the workflow's statements are scoped to."""

    stack: Stack
    environment: str
    ami_parameter: str
    subnet_id: str
    security_group_id: str
    builder_role_arn: str
    parameter_name: str

    @property
    def partition(self) -> str:
        return self.stack.partition

    @property
    def region(self) -> str:
        return self.stack.region

    @property
    def account(self) -> str:
        return self.stack.account

    @property
    def ec2_arn(self) -> str:
        return f"arn:{self.partition}:ec2:{self.region}:{self.account}"

    @property
    def snapshots(self) -> str:
        return f"arn:{self.partition}:ec2:{self.region}::snapshot/*"

    @property
    def builder_tag(self) -> dict:
        return {"StringEquals": {f"aws:ResourceTag/{BUILDER_TAG}": self.environment}}


def workflow_statements(scope: WorkflowScope) -> list[iam.PolicyStatement]:
    """Everything the build workflow may do."""
    return [*launch_statements(scope), *run_statements(scope), *snapshot_statements(scope), *service_statements()]


def launch_statements(scope: WorkflowScope) -> list[iam.PolicyStatement]:
    """Launch one builder, tagged for this environment, from a public AMI into its own subnet and group."""
    return [
        statement(
            sid="ResolveBottlerocketAmi",
            actions=["ssm:GetParameter"],
            resources=[f"arn:{scope.partition}:ssm:{scope.region}::parameter{scope.ami_parameter}"],
        ),
        # RunInstances names existing resources (the AMI is resolved at run time from AWS's public parameter)
        # and creates others, which must carry the builder tag (EC2 guide, "Grant permission to tag on creation").
        statement(
            sid="LaunchFromPublicAmiIntoOwnSubnet",
            actions=["ec2:RunInstances"],
            resources=[
                f"arn:{scope.partition}:ec2:{scope.region}::image/*",
                f"{scope.ec2_arn}:subnet/{scope.subnet_id}",
                f"{scope.ec2_arn}:security-group/{scope.security_group_id}",
            ],
        ),
        statement(
            sid="LaunchTaggedBuilder",
            actions=["ec2:RunInstances"],
            resources=[f"{scope.ec2_arn}:{kind}/*" for kind in BUILDER_RESOURCES],
            conditions={"StringEquals": {f"aws:RequestTag/{BUILDER_TAG}": scope.environment}},
        ),
        statement(
            sid="TagAtLaunch",
            actions=["ec2:CreateTags"],
            resources=[f"{scope.ec2_arn}:{kind}/*" for kind in BUILDER_RESOURCES],
            conditions={"StringEquals": {"ec2:CreateAction": "RunInstances"}},
        ),
        statement(
            sid="PassBuilderRole",
            actions=["iam:PassRole"],
            resources=[scope.builder_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
    ]


def run_statements(scope: WorkflowScope) -> list[iam.PolicyStatement]:
    """Run the pull on the own builder only, and follow the build."""
    return [
        statement(
            sid="RunShellScriptDocument",
            actions=["ssm:SendCommand"],
            resources=[f"arn:{scope.partition}:ssm:{scope.region}::document/AWS-RunShellScript"],
        ),
        # SSM user guide, "Restricting Run Command access based on tags": ssm:resourceTag on the instance.
        statement(
            sid="RunOnOwnBuilderOnly",
            actions=["ssm:SendCommand"],
            resources=[f"{scope.ec2_arn}:instance/*"],
            conditions={"StringEquals": {f"ssm:resourceTag/{BUILDER_TAG}": scope.environment}},
        ),
        # Describe and invocation reads take no resource ARNs (Service Authorization Reference).
        statement(
            sid="FollowProgress",
            resources=["*"],
            actions=[
                "ssm:DescribeInstanceInformation",
                "ssm:GetCommandInvocation",
                "ec2:DescribeInstances",
                "ec2:DescribeVolumes",
                "ec2:DescribeSnapshots",
            ],
        ),
    ]


def snapshot_statements(scope: WorkflowScope) -> list[iam.PolicyStatement]:
    """Stop, snapshot and terminate only what carries the build's tag; record the snapshot."""
    return [
        statement(
            sid="StopAndTerminateOwnBuilder",
            actions=["ec2:StopInstances", "ec2:TerminateInstances"],
            resources=[f"{scope.ec2_arn}:instance/*"],
            conditions=scope.builder_tag,
        ),
        statement(
            sid="SnapshotOwnDataVolume",
            actions=["ec2:CreateSnapshot"],
            resources=[f"{scope.ec2_arn}:volume/*"],
            conditions=scope.builder_tag,
        ),
        statement(
            sid="CreateTaggedSnapshot",
            actions=["ec2:CreateSnapshot"],
            resources=[scope.snapshots],
            conditions={"StringEquals": {f"aws:RequestTag/{ENVIRONMENT_TAG}": scope.environment}},
        ),
        statement(
            sid="TagAtSnapshot",
            actions=["ec2:CreateTags"],
            resources=[scope.snapshots],
            conditions={"StringEquals": {"ec2:CreateAction": "CreateSnapshot"}},
        ),
        statement(
            sid="RecordSnapshotId",
            actions=["ssm:PutParameter"],
            resources=[f"arn:{scope.partition}:ssm:{scope.region}:{scope.account}:parameter{scope.parameter_name}"],
        ),
    ]


def service_statements() -> list[iam.PolicyStatement]:
    """What Step Functions needs for its own logs and traces."""
    return [
        # What Step Functions needs for its own logs and traces (Step Functions guide, "IAM policies for logging
        # to CloudWatch Logs" and "X-Ray"); these APIs take no resource ARNs.
        statement(
            sid="DeliverLogs",
            resources=["*"],
            actions=[
                "logs:CreateLogDelivery",
                "logs:GetLogDelivery",
                "logs:UpdateLogDelivery",
                "logs:DeleteLogDelivery",
                "logs:ListLogDeliveries",
                "logs:PutResourcePolicy",
                "logs:DescribeResourcePolicies",
                "logs:DescribeLogGroups",
            ],
        ),
        statement(
            sid="Trace",
            resources=["*"],
            actions=[
                "xray:PutTraceSegments",
                "xray:PutTelemetryRecords",
                "xray:GetSamplingRules",
                "xray:GetSamplingTargets",
            ],
        ),
    ]


def resource_statements(stack: Stack, environment: str, state_machine: sfn.StateMachine) -> list[iam.PolicyStatement]:
    """The custom resource's functions: start and follow builds, delete only this environment's snapshots and
    builders."""
    return [
        iam.PolicyStatement(
            sid="RunBuilds",
            actions=["states:StartExecution", "states:ListExecutions"],
            resources=[state_machine.state_machine_arn],
        ),
        iam.PolicyStatement(
            sid="FollowBuilds",
            actions=["states:DescribeExecution", "states:StopExecution"],
            resources=[
                f"arn:{stack.partition}:states:{stack.region}:{stack.account}:execution:"
                f"{state_machine.state_machine_name}:*"
            ],
        ),
        # Describe calls take no resource ARNs (Service Authorization Reference, Amazon EC2).
        iam.PolicyStatement(
            sid="FindSnapshotsAndBuilders",
            actions=["ec2:DescribeSnapshots", "ec2:DescribeInstances"],
            resources=["*"],
        ),
        iam.PolicyStatement(
            sid="DeleteOwnSnapshots",
            actions=["ec2:DeleteSnapshot"],
            resources=[f"arn:{stack.partition}:ec2:{stack.region}::snapshot/*"],
            conditions={"StringEquals": {f"aws:ResourceTag/{ENVIRONMENT_TAG}": environment}},
        ),
        iam.PolicyStatement(
            sid="TerminateOwnBuilders",
            actions=["ec2:TerminateInstances"],
            resources=[f"arn:{stack.partition}:ec2:{stack.region}:{stack.account}:instance/*"],
            conditions={"StringEquals": {f"aws:ResourceTag/{BUILDER_TAG}": environment}},
        ),
    ]
