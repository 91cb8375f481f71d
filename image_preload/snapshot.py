"""The image snapshot GPU nodes' data volumes start from (image_preload.mode: snapshot, Karpenter + Bottlerocket).

A Step Functions state machine builds it: it starts a Bottlerocket instance of the nodes' release in a private
subnet, pulls the serving images into containerd's store through SSM Run Command
(runtime/snapshot/pull-images.sh), stops the instance, snapshots its data volume (/dev/xvdb), records the
snapshot ID in SSM Parameter Store and terminates the instance (also when any step fails). A custom resource
runs it during `cdk deploy` whenever the image set changes and returns the snapshot ID, which the EC2NodeClass
names: Karpenter sees the node class drift and replaces the GPU nodes one at a time, each replacement launched
before its predecessor goes. The same resource deletes a set's snapshots once CloudFormation no longer needs
them (see runtime/snapshot/build.py).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from aws_cdk import custom_resources as cr
from constructs import Construct

from image_preload.runtime.snapshot.aws import BUILDER_TAG
from image_preload.runtime.snapshot.build import ENVIRONMENT_TAG, IMAGE_SET_TAG
from lambdas.packaging import function_code
from stacks.components.log_retention import retention_days
from stacks.components.nag import acknowledge, arn_wildcard, logical_id, managed, wildcard
from warmstart.config import ImageSnapshot as SnapshotSettings
from warmstart.image_preload import builder_commands, snapshot_parameter_name

RUNTIME = Path(__file__).resolve().parent / "runtime" / "snapshot"
PULL_SCRIPT = RUNTIME / "pull-images.sh"
FUNCTION_SOURCE = ("image_preload/runtime/snapshot",)
# The builder's OS volume and its data volume (Bottlerocket's split layout; the data volume is what is kept).
OS_DEVICE, DATA_DEVICE = "/dev/xvda", "/dev/xvdb"
# The builder only needs SSM's agent (control container, on by default) and a root shell on the host for ctr
# (the admin container, through `apiclient exec admin sheltie`), as aws-samples/bottlerocket-images-cache does.
BUILDER_USER_DATA = "[settings.host-containers.admin]\nenabled = true\n"
POLL = Duration.seconds(30)


@dataclass(frozen=True)
class SnapshotRequest:
    """What a build takes from the environment's config: the images, their set's key, the nodes' OS release."""

    environment: str
    settings: SnapshotSettings
    images: Sequence[str]
    image_set_key: str
    ami_parameter: str


class ImageSnapshotBuild(Construct):
    """Exposes `snapshot_id` (a deploy-time value) for the EC2NodeClass."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        environment: str,
        settings: SnapshotSettings,
        images: Sequence[str],
        image_set_key: str,
        ami_parameter: str,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
    ) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.parameter_name = snapshot_parameter_name(environment)
        self.builder_role = iam.Role(
            self,
            "BuilderRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"warmstart {environment} image snapshot builder: SSM, and Bottlerocket's own host containers",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore"),
                # Bottlerocket pulls its control (SSM agent) and admin containers from AWS's ECR with the
                # instance role (bottlerocket-os/bottlerocket #851, #1139; the images-cache sample's builder role).
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonEC2ContainerRegistryPullOnly"),
            ],
        )
        self.instance_profile = iam.InstanceProfile(self, "BuilderProfile", role=self.builder_role)
        self.security_group = ec2.SecurityGroup(
            self,
            "BuilderSecurityGroup",
            vpc=vpc,
            allow_all_outbound=True,
            description="image snapshot builder: no inbound; outbound to registries, SSM and S3",
        )
        self.log_group = logs.LogGroup(self, "Logs", retention=retention_days(90), removal_policy=RemovalPolicy.DESTROY)
        tags = {BUILDER_TAG: environment, ENVIRONMENT_TAG: environment}
        commands = builder_commands(list(images), PULL_SCRIPT.read_text())
        # Every permission of the workflow is written out in `workflow_statements` (conditions included); the
        # state machine gets the role as immutable, so CDK adds no unconditioned statement per task.
        self.workflow_role = iam.Role(
            self,
            "WorkflowRole",
            assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
            description=f"warmstart {environment} image snapshot workflow: one tagged builder, its snapshot",
        )
        self.workflow_policy = iam.Policy(
            self,
            "WorkflowAccess",
            roles=[self.workflow_role],
            statements=workflow_statements(
                stack=stack,
                environment=environment,
                ami_parameter=ami_parameter,
                subnet_id=subnet.subnet_id,
                security_group_id=self.security_group.security_group_id,
                builder_role_arn=self.builder_role.role_arn,
                parameter_name=self.parameter_name,
            ),
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(
                self._definition(
                    settings=settings,
                    ami_parameter=ami_parameter,
                    subnet=subnet,
                    tags=tags,
                    commands=commands,
                    environment=environment,
                )
            ),
            role=iam.Role.from_role_arn(self, "WorkflowRoleRef", self.workflow_role.role_arn, mutable=False),
            # Past the poll budget (which fails the build and terminates the builder): a last resort only.
            timeout=Duration.minutes(settings.build_timeout_minutes + 5),
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=False),
            tracing_enabled=True,
        )
        # Step Functions checks the log delivery permissions when the state machine is created.
        self.state_machine.node.add_dependency(self.workflow_policy)
        self.function_role = iam.Role(
            self,
            "ResourceRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"warmstart {environment} image snapshot resource: start builds, delete its own snapshots",
        )
        self.function_policy = iam.Policy(
            self,
            "ResourceAccess",
            roles=[self.function_role],
            statements=[
                iam.PolicyStatement(
                    sid="RunBuilds",
                    actions=["states:StartExecution", "states:ListExecutions"],
                    resources=[self.state_machine.state_machine_arn],
                ),
                iam.PolicyStatement(
                    sid="FollowBuilds",
                    actions=["states:DescribeExecution", "states:StopExecution"],
                    resources=[
                        f"arn:{stack.partition}:states:{stack.region}:{stack.account}:execution:"
                        f"{self.state_machine.state_machine_name}:*"
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
            ],
        )
        code = function_code(*FUNCTION_SOURCE)
        functions = {
            name: lambda_.Function(
                self,
                name,
                runtime=lambda_.Runtime.PYTHON_3_14,
                code=code,
                role=self.function_role,
                handler=f"image_preload.runtime.snapshot.handler.{handler}",
                timeout=Duration.minutes(2),
                memory_size=256,
                log_group=logs.LogGroup(
                    self, f"{name}Logs", retention=retention_days(90), removal_policy=RemovalPolicy.DESTROY
                ),
            )
            for name, handler in (("OnEvent", "on_event_handler"), ("IsComplete", "is_complete_handler"))
        }
        self.functions = functions
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=functions["OnEvent"],
            is_complete_handler=functions["IsComplete"],
            query_interval=Duration.minutes(1),
            disable_waiter_state_machine_logging=False,
            waiter_state_machine_log_options=cr.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=False
            ),
            # The state machine's own timeout plus polling slack, within the framework's (and CloudFormation's) hour.
            total_timeout=Duration.minutes(min(60, settings.build_timeout_minutes + 10)),
        )
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=self.provider.service_token,
            resource_type="Custom::WarmstartImageSnapshot",
            properties={
                "Environment": environment,
                "ImageSetKey": image_set_key,
                "StateMachineArn": self.state_machine.state_machine_arn,
                "Images": list(images),
            },
        )
        self.resource.node.add_dependency(self.function_policy)
        self.snapshot_id = self.resource.get_att_string("SnapshotId")
        self._acknowledge_findings()

    def _acknowledge_findings(self) -> None:
        build = self
        stack = Stack.of(self)
        region, account = stack.region, stack.account
        ec2 = f"arn:aws:ec2:{region}"
        acknowledge(
            build.builder_role,
            "The policy SSM documents for a managed instance (the agent registers and receives Run Command), and "
            "image pulls, which Bottlerocket needs for its own control and admin containers from AWS's registry; the "
            "builder has nothing else and pulls the serving images anonymously.",
            managed("AmazonSSMManagedInstanceCore"),
            managed("AmazonEC2ContainerRegistryPullOnly"),
        )
        acknowledge(
            build.workflow_policy,
            "The builder's instance, volumes, interface and snapshot have no ID before the workflow creates them: "
            "creating them requires this environment's tag, and stop, terminate, snapshot and Run Command apply only "
            "to resources carrying it; the AMI is AWS's public Bottlerocket image resolved at run time; Describe, "
            "command-invocation reads, log delivery and X-Ray take no resource ARNs.",
            wildcard("*"),
            wildcard(f"{ec2}::image/*"),
            wildcard(f"{ec2}::snapshot/*"),
            *(wildcard(f"{ec2}:{account}:{kind}/*") for kind in ("instance", "volume", "network-interface")),
        )
        acknowledge(
            build.function_policy,
            "The custom resource follows executions of its own state machine (IDs made per build), deletes only "
            "snapshots tagged for this environment and terminates only builders tagged for it; Describe calls take no "
            "resource ARNs.",
            wildcard("*"),
            wildcard(f"{ec2}::snapshot/*"),
            wildcard(f"{ec2}:{account}:instance/*"),
            wildcard(f"arn:aws:states:{region}:{account}:execution:<{logical_id(build.state_machine)}.Name>:*"),
        )
        framework = build.provider.node
        for name in ("framework-onEvent", "framework-isComplete", "framework-onTimeout"):
            function = framework.find_child(name)
            acknowledge(
                function,
                "aws-cdk-lib's custom resource provider framework: its functions log with the basic execution role "
                "and invoke the handler functions and their versions (ARN:*).",
                managed("service-role/AWSLambdaBasicExecutionRole"),
                arn_wildcard(build.functions["OnEvent"]),
                arn_wildcard(build.functions["IsComplete"]),
            )
        waiter = framework.find_child("waiter-state-machine")
        acknowledge(
            waiter,
            "aws-cdk-lib's provider framework waiter: it invokes the framework's own functions and versions (ARN:*) "
            "and offers no X-Ray setting; it logs ALL events to the build's log group (log delivery APIs take no "
            "resource ARNs).",
            wildcard("*"),
            arn_wildcard(framework.find_child("framework-isComplete")),
            arn_wildcard(framework.find_child("framework-onTimeout")),
            "AwsSolutions-SF2",
        )

    def _definition(
        self,
        *,
        settings: SnapshotSettings,
        ami_parameter: str,
        subnet: ec2.ISubnet,
        tags: dict[str, str],
        commands: list[str],
        environment: str,
    ) -> sfn.IChainable:
        instance_id = sfn.JsonPath.string_at("$.builder.InstanceId")
        instance_ids = sfn.JsonPath.array(instance_id)
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()] + [
            {"Key": IMAGE_SET_TAG, "Value": sfn.JsonPath.string_at("$.imageSetKey")}
        ]

        def call(
            id: str,
            service: str,
            action: str,
            parameters: dict,
            *,
            result_path: str | None,
            selector: dict | None = None,
        ) -> tasks.CallAwsService:
            # iam_resources is required by CDK but unused: the role is immutable (see workflow_statements).
            return tasks.CallAwsService(
                self,
                id,
                service=service,
                action=action,
                parameters=parameters,
                iam_resources=["*"],
                result_path=result_path,
                result_selector=selector,
            )

        # One budget of polls for every wait of the build: a hang anywhere (no SSM registration, a stuck stop or
        # snapshot) fails inside the Parallel, whose Catch terminates the builder. The state machine's own
        # timeout cannot be caught, so the budget ends well before it.
        poll_budget = build_poll_budget(settings.build_timeout_minutes)
        count = sfn.JsonPath.math_add(sfn.JsonPath.number_at("$.polls.n"), 1)

        def poll(
            id: str,
            check: tasks.CallAwsService,
            done: sfn.Condition,
            failed: sfn.Condition | None,
            then: sfn.IChainable,
        ) -> sfn.IChainable:
            """Wait, check, and loop until `done`; `failed` and an exhausted poll budget end the build."""
            wait = sfn.Wait(self, f"{id}Wait", time=sfn.WaitTime.duration(POLL))
            counted = sfn.Pass(self, f"{id}Count", parameters={"n": count}, result_path="$.polls")
            choice = sfn.Choice(self, f"{id}Done").when(done, then)  # the first matching rule wins: done first
            if failed is not None:
                choice.when(
                    failed,
                    sfn.Fail(self, f"{id}Failed", error=f"{id}Failed", cause=f"{id}: the step ended in a failed state"),
                )
            choice.when(
                sfn.Condition.number_greater_than("$.polls.n", poll_budget),
                sfn.Fail(
                    self,
                    f"{id}OutOfTime",
                    error="BuildOutOfTime",
                    cause=f"{id}: the build's poll budget ({poll_budget} x {POLL.to_seconds()} s) ran out",
                ),
            )
            wait.next(check).next(counted).next(choice.otherwise(wait))
            return wait

        resolve_ami = call(
            "ResolveAmi",
            "ssm",
            "getParameter",
            {"Name": ami_parameter},
            result_path="$.ami",
            selector={"ImageId.$": "$.Parameter.Value"},
        )
        launch = call(
            "Launch",
            "ec2",
            "runInstances",
            {
                "ImageId": sfn.JsonPath.string_at("$.ami.ImageId"),
                "InstanceType": settings.builder_instance_type,
                "MinCount": 1,
                "MaxCount": 1,
                "SubnetId": subnet.subnet_id,
                "SecurityGroupIds": [self.security_group.security_group_id],
                "IamInstanceProfile": {"Arn": self.instance_profile.instance_profile_arn},
                "UserData": base64.b64encode(BUILDER_USER_DATA.encode()).decode(),
                "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
                "InstanceInitiatedShutdownBehavior": "terminate",
                "BlockDeviceMappings": [
                    {
                        "DeviceName": OS_DEVICE,
                        "Ebs": {"VolumeSize": 4, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True},
                    },
                    # Encrypted here, so the snapshot and every node volume made from it are encrypted.
                    {
                        "DeviceName": DATA_DEVICE,
                        "Ebs": {
                            "VolumeSize": settings.data_volume_gib,
                            "VolumeType": "gp3",
                            "Encrypted": True,
                            "Iops": settings.data_volume_iops,
                            "Throughput": settings.data_volume_throughput_mibps,
                            "DeleteOnTermination": True,
                        },
                    },
                ],
                "TagSpecifications": [{"ResourceType": kind, "Tags": tag_list} for kind in BUILDER_RESOURCES],
            },
            result_path="$.builder",
            selector={"InstanceId.$": "$.Instances[0].InstanceId"},
        )
        online = call(
            "CheckOnline",
            "ssm",
            "describeInstanceInformation",
            {"Filters": [{"Key": "InstanceIds", "Values": instance_ids}]},
            result_path="$.online",
        )
        pull = call(
            "PullImages",
            "ssm",
            "sendCommand",
            {
                "DocumentName": "AWS-RunShellScript",
                "InstanceIds": instance_ids,
                "TimeoutSeconds": 600,
                "Comment": f"warmstart {environment}: pull serving images for the image snapshot",
                "Parameters": {
                    "commands": commands,
                    "executionTimeout": [str(pull_timeout_seconds(settings.build_timeout_minutes))],
                },
            },
            result_path="$.pull",
            selector={"CommandId.$": "$.Command.CommandId"},
        )
        pulled = call(
            "CheckPull",
            "ssm",
            "getCommandInvocation",
            {"CommandId": sfn.JsonPath.string_at("$.pull.CommandId"), "InstanceId": instance_id},
            result_path="$.pullStatus",
        )
        # The invocation appears a moment after SendCommand returns.
        pulled.add_retry(
            errors=["Ssm.InvocationDoesNotExistException"],
            interval=Duration.seconds(10),
            max_attempts=6,
            backoff_rate=1.5,
        )
        stop = call(
            "StopBuilder", "ec2", "stopInstances", {"InstanceIds": instance_ids}, result_path=sfn.JsonPath.DISCARD
        )
        stopped = call(
            "CheckStopped",
            "ec2",
            "describeInstances",
            {"InstanceIds": instance_ids},
            result_path="$.stopped",
            selector={"State.$": "$.Reservations[0].Instances[0].State.Name"},
        )
        find_volume = call(
            "FindDataVolume",
            "ec2",
            "describeVolumes",
            {
                "Filters": [
                    {"Name": "attachment.instance-id", "Values": instance_ids},
                    {"Name": "attachment.device", "Values": [DATA_DEVICE]},
                ]
            },
            result_path="$.data",
            selector={"VolumeId.$": "$.Volumes[0].VolumeId"},
        )
        snapshot = call(
            "CreateSnapshot",
            "ec2",
            "createSnapshot",
            {
                "VolumeId": sfn.JsonPath.string_at("$.data.VolumeId"),
                "Description": f"warmstart {environment} container images",
                "TagSpecifications": [{"ResourceType": "snapshot", "Tags": tag_list}],
            },
            result_path="$.snapshot",
            selector={"SnapshotId.$": "$.SnapshotId"},
        )
        snapshot_state = call(
            "CheckSnapshot",
            "ec2",
            "describeSnapshots",
            {"SnapshotIds": sfn.JsonPath.array(sfn.JsonPath.string_at("$.snapshot.SnapshotId"))},
            result_path="$.snapshotState",
            selector={"State.$": "$.Snapshots[0].State"},
        )
        record = call(
            "Record",
            "ssm",
            "putParameter",
            {
                "Name": self.parameter_name,
                "Type": "String",
                "Overwrite": True,
                "Value": sfn.JsonPath.string_at("$.snapshot.SnapshotId"),
                "Description": "the image snapshot warmstart's GPU nodes start from",
            },
            result_path=sfn.JsonPath.DISCARD,
        )

        build = sfn.Parallel(
            self, "Build", result_path="$.result", result_selector={"SnapshotId.$": "$[0].snapshot.SnapshotId"}
        )
        in_progress = sfn.Condition.or_(
            *(
                sfn.Condition.string_equals("$.pullStatus.Status", status)
                for status in ("Pending", "InProgress", "Delayed")
            )
        )
        after_snapshot = poll(
            "Snapshot",
            snapshot_state,
            sfn.Condition.string_equals("$.snapshotState.State", "completed"),
            sfn.Condition.string_equals("$.snapshotState.State", "error"),
            record,
        )
        after_stop = poll(
            "Stop",
            stopped,
            sfn.Condition.string_equals("$.stopped.State", "stopped"),
            None,
            find_volume.next(snapshot).next(after_snapshot),
        )
        after_pull = poll(
            "Pull",
            pulled,
            sfn.Condition.string_equals("$.pullStatus.Status", "Success"),
            sfn.Condition.not_(in_progress),
            stop.next(after_stop),
        )
        online_condition = sfn.Condition.and_(
            sfn.Condition.is_present("$.online.InstanceInformationList[0]"),
            sfn.Condition.string_equals("$.online.InstanceInformationList[0].PingStatus", "Online"),
        )
        start_budget = sfn.Pass(self, "StartPollBudget", result=sfn.Result.from_object({"n": 0}), result_path="$.polls")
        build.branch(start_budget.next(poll("Online", online, online_condition, None, pull.next(after_pull))))
        terminate = call(
            "TerminateBuilder",
            "ec2",
            "terminateInstances",
            {"InstanceIds": instance_ids},
            result_path=sfn.JsonPath.DISCARD,
        )
        terminate_after_failure = call(
            "TerminateAfterFailure",
            "ec2",
            "terminateInstances",
            {"InstanceIds": instance_ids},
            result_path=sfn.JsonPath.DISCARD,
        )
        build.add_catch(
            terminate_after_failure.next(
                sfn.Fail(self, "BuildFailed", error="BuildFailed", cause="see the failed step in the execution history")
            ),
            result_path="$.error",
        )
        done = sfn.Succeed(self, "Built", output_path="$.result")
        return resolve_ami.next(launch).next(build).next(terminate).next(done)


BUILDER_RESOURCES = ("instance", "volume", "network-interface")


def build_poll_budget(build_timeout_minutes: int) -> int:
    """Polls (one per 30 s) all the build's waits may take together: the build's time less 3 minutes for the
    calls between them."""
    return (build_timeout_minutes * 60 - 180) // int(POLL.to_seconds())


def pull_timeout_seconds(build_timeout_minutes: int) -> int:
    """How long the pull command may run on the builder: the build's time less 15 minutes for launch,
    registration, stop and snapshot."""
    return (build_timeout_minutes - 15) * 60


def workflow_statements(
    *,
    stack: Stack,
    environment: str,
    ami_parameter: str,
    subnet_id: str,
    security_group_id: str,
    builder_role_arn: str,
    parameter_name: str,
) -> list[iam.PolicyStatement]:
    """Everything the build workflow may do: launch one builder tagged for this environment from a public AMI
    into its own subnet and group, run one command document on it, stop, snapshot and terminate only what
    carries its tag, and record the result."""
    partition, region, account = stack.partition, stack.region, stack.account
    ec2_arn = f"arn:{partition}:ec2:{region}:{account}"
    snapshots = f"arn:{partition}:ec2:{region}::snapshot/*"
    builder_tag = {"StringEquals": {f"aws:ResourceTag/{BUILDER_TAG}": environment}}
    statement = iam.PolicyStatement
    return [
        statement(
            sid="ResolveBottlerocketAmi",
            actions=["ssm:GetParameter"],
            resources=[f"arn:{partition}:ssm:{region}::parameter{ami_parameter}"],
        ),
        # RunInstances names existing resources (the AMI is resolved at run time from AWS's public parameter)
        # and creates others, which must carry the builder tag (EC2 guide, "Grant permission to tag on creation").
        statement(
            sid="LaunchFromPublicAmiIntoOwnSubnet",
            actions=["ec2:RunInstances"],
            resources=[
                f"arn:{partition}:ec2:{region}::image/*",
                f"{ec2_arn}:subnet/{subnet_id}",
                f"{ec2_arn}:security-group/{security_group_id}",
            ],
        ),
        statement(
            sid="LaunchTaggedBuilder",
            actions=["ec2:RunInstances"],
            resources=[f"{ec2_arn}:{kind}/*" for kind in BUILDER_RESOURCES],
            conditions={"StringEquals": {f"aws:RequestTag/{BUILDER_TAG}": environment}},
        ),
        statement(
            sid="TagAtLaunch",
            actions=["ec2:CreateTags"],
            resources=[f"{ec2_arn}:{kind}/*" for kind in BUILDER_RESOURCES],
            conditions={"StringEquals": {"ec2:CreateAction": "RunInstances"}},
        ),
        statement(
            sid="PassBuilderRole",
            actions=["iam:PassRole"],
            resources=[builder_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}},
        ),
        statement(
            sid="RunShellScriptDocument",
            actions=["ssm:SendCommand"],
            resources=[f"arn:{partition}:ssm:{region}::document/AWS-RunShellScript"],
        ),
        # SSM user guide, "Restricting Run Command access based on tags": ssm:resourceTag on the instance.
        statement(
            sid="RunOnOwnBuilderOnly",
            actions=["ssm:SendCommand"],
            resources=[f"{ec2_arn}:instance/*"],
            conditions={"StringEquals": {f"ssm:resourceTag/{BUILDER_TAG}": environment}},
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
        statement(
            sid="StopAndTerminateOwnBuilder",
            actions=["ec2:StopInstances", "ec2:TerminateInstances"],
            resources=[f"{ec2_arn}:instance/*"],
            conditions=builder_tag,
        ),
        statement(
            sid="SnapshotOwnDataVolume",
            actions=["ec2:CreateSnapshot"],
            resources=[f"{ec2_arn}:volume/*"],
            conditions=builder_tag,
        ),
        statement(
            sid="CreateTaggedSnapshot",
            actions=["ec2:CreateSnapshot"],
            resources=[snapshots],
            conditions={"StringEquals": {f"aws:RequestTag/{ENVIRONMENT_TAG}": environment}},
        ),
        statement(
            sid="TagAtSnapshot",
            actions=["ec2:CreateTags"],
            resources=[snapshots],
            conditions={"StringEquals": {"ec2:CreateAction": "CreateSnapshot"}},
        ),
        statement(
            sid="RecordSnapshotId",
            actions=["ssm:PutParameter"],
            resources=[f"arn:{partition}:ssm:{region}:{account}:parameter{parameter_name}"],
        ),
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
