"""The image snapshot build as Step Functions states, in named parts: resolve the AMI and launch the builder; wait
for it to register with SSM and pull the images; stop it, snapshot its data volume and record the snapshot; and
terminate it, whatever happened. Every wait draws on one poll budget (`build_poll_budget`)."""

from __future__ import annotations

import base64
from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from image_preload.runtime.snapshot.build import IMAGE_SET_TAG
from warmstart.config.caches import ImageSnapshot as SnapshotSettings

OS_DEVICE, DATA_DEVICE = "/dev/xvda", "/dev/xvdb"
# The builder only needs SSM's agent (control container, on by default) and a root shell on the host for ctr
# (the admin container, through `apiclient exec admin sheltie`), as aws-samples/bottlerocket-images-cache does.
BUILDER_USER_DATA = "[settings.host-containers.admin]\nenabled = true\n"
POLL = Duration.seconds(30)
BUILDER_RESOURCES = ("instance", "volume", "network-interface")


def build_poll_budget(build_timeout_minutes: int) -> int:
    """Polls (one per 30 s) all the build's waits may take together: the build's time less 3 minutes for the
    calls between them."""
    return (build_timeout_minutes * 60 - 180) // int(POLL.to_seconds())


def pull_timeout_seconds(build_timeout_minutes: int) -> int:
    """How long the pull command may run on the builder: the build's time less 15 minutes for launch,
    registration, stop and snapshot."""
    return (build_timeout_minutes - 15) * 60


@dataclass(frozen=True)
class Builder:
    """Where and as what the builder instance runs."""

    settings: SnapshotSettings
    ami_parameter: str
    subnet: ec2.ISubnet
    security_group: ec2.ISecurityGroup
    instance_profile: iam.IInstanceProfile
    tags: dict[str, str]
    commands: list[str]
    environment: str
    parameter_name: str


class BuildStates:
    """Creates the states in `scope` (the snapshot construct): their IDs are the construct's children's."""

    def __init__(self, scope: Construct, builder: Builder) -> None:
        self.scope, self.builder = scope, builder
        self.instance_id = sfn.JsonPath.string_at("$.builder.InstanceId")
        self.instance_ids = sfn.JsonPath.array(self.instance_id)
        self.tag_list = [{"Key": k, "Value": v} for k, v in builder.tags.items()] + [
            {"Key": IMAGE_SET_TAG, "Value": sfn.JsonPath.string_at("$.imageSetKey")}
        ]
        # One budget of polls for every wait of the build: a hang anywhere (no SSM registration, a stuck stop or
        # snapshot) fails inside the Parallel, whose Catch terminates the builder. The state machine's own
        # timeout cannot be caught, so the budget ends well before it.
        self.poll_budget = build_poll_budget(builder.settings.build_timeout_minutes)

    def call(
        self,
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
            self.scope,
            id,
            service=service,
            action=action,
            parameters=parameters,
            iam_resources=["*"],
            result_path=result_path,
            result_selector=selector,
        )

    def poll(
        self,
        id: str,
        check: tasks.CallAwsService,
        done: sfn.Condition,
        failed: sfn.Condition | None,
        then: sfn.IChainable,
    ) -> sfn.IChainable:
        """Wait, check, and loop until `done`; `failed` and an exhausted poll budget end the build."""
        scope, budget = self.scope, self.poll_budget
        count = sfn.JsonPath.math_add(sfn.JsonPath.number_at("$.polls.n"), 1)
        wait = sfn.Wait(scope, f"{id}Wait", time=sfn.WaitTime.duration(POLL))
        counted = sfn.Pass(scope, f"{id}Count", parameters={"n": count}, result_path="$.polls")
        choice = sfn.Choice(scope, f"{id}Done").when(done, then)  # the first matching rule wins: done first
        if failed is not None:
            choice.when(
                failed,
                sfn.Fail(scope, f"{id}Failed", error=f"{id}Failed", cause=f"{id}: the step ended in a failed state"),
            )
        choice.when(
            sfn.Condition.number_greater_than("$.polls.n", budget),
            sfn.Fail(
                scope,
                f"{id}OutOfTime",
                error="BuildOutOfTime",
                cause=f"{id}: the build's poll budget ({budget} x {POLL.to_seconds()} s) ran out",
            ),
        )
        wait.next(check).next(counted).next(choice.otherwise(wait))
        return wait

    def definition(self) -> sfn.IChainable:
        resolve_ami = self.call(
            "ResolveAmi",
            "ssm",
            "getParameter",
            {"Name": self.builder.ami_parameter},
            result_path="$.ami",
            selector={"ImageId.$": "$.Parameter.Value"},
        )
        build = sfn.Parallel(
            self.scope, "Build", result_path="$.result", result_selector={"SnapshotId.$": "$[0].snapshot.SnapshotId"}
        )
        start_budget = sfn.Pass(
            self.scope, "StartPollBudget", result=sfn.Result.from_object({"n": 0}), result_path="$.polls"
        )
        build.branch(start_budget.next(self.registered_then_pull(then=self.stop_then_snapshot())))
        build.add_catch(
            self.terminate("TerminateAfterFailure").next(
                sfn.Fail(
                    self.scope, "BuildFailed", error="BuildFailed", cause="see the failed step in the execution history"
                )
            ),
            result_path="$.error",
        )
        done = sfn.Succeed(self.scope, "Built", output_path="$.result")
        return resolve_ami.next(self.launch()).next(build).next(self.terminate("TerminateBuilder")).next(done)

    def launch(self) -> tasks.CallAwsService:
        settings = self.builder.settings
        data_volume = {
            "VolumeSize": settings.data_volume_gib,
            "VolumeType": "gp3",
            "Encrypted": True,
            "Iops": settings.data_volume_iops,
            "Throughput": settings.data_volume_throughput_mibps,
            "DeleteOnTermination": True,
        }
        os_volume = {"VolumeSize": 4, "VolumeType": "gp3", "Encrypted": True, "DeleteOnTermination": True}
        parameters = {
            "ImageId": sfn.JsonPath.string_at("$.ami.ImageId"),
            "InstanceType": settings.builder_instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "SubnetId": self.builder.subnet.subnet_id,
            "SecurityGroupIds": [self.builder.security_group.security_group_id],
            "IamInstanceProfile": {"Arn": self.builder.instance_profile.instance_profile_arn},
            "UserData": base64.b64encode(BUILDER_USER_DATA.encode()).decode(),
            "MetadataOptions": {"HttpTokens": "required", "HttpEndpoint": "enabled"},
            "InstanceInitiatedShutdownBehavior": "terminate",
            # The data volume is encrypted here, so the snapshot and every node volume made from it are encrypted.
            "BlockDeviceMappings": [
                {"DeviceName": OS_DEVICE, "Ebs": os_volume},
                {"DeviceName": DATA_DEVICE, "Ebs": data_volume},
            ],
            "TagSpecifications": [{"ResourceType": kind, "Tags": self.tag_list} for kind in BUILDER_RESOURCES],
        }
        return self.call(
            "Launch",
            "ec2",
            "runInstances",
            parameters,
            result_path="$.builder",
            selector={"InstanceId.$": "$.Instances[0].InstanceId"},
        )

    def registered_then_pull(self, *, then: sfn.IChainable) -> sfn.IChainable:
        """Wait for the builder's SSM registration, pull the images through Run Command, wait for the pull."""
        online = self.call(
            "CheckOnline",
            "ssm",
            "describeInstanceInformation",
            {"Filters": [{"Key": "InstanceIds", "Values": self.instance_ids}]},
            result_path="$.online",
        )
        online_condition = sfn.Condition.and_(
            sfn.Condition.is_present("$.online.InstanceInformationList[0]"),
            sfn.Condition.string_equals("$.online.InstanceInformationList[0].PingStatus", "Online"),
        )
        in_progress = sfn.Condition.or_(
            *(
                sfn.Condition.string_equals("$.pullStatus.Status", status)
                for status in ("Pending", "InProgress", "Delayed")
            )
        )
        pulled = self.pull_status()
        after_pull = self.poll(
            "Pull",
            pulled,
            sfn.Condition.string_equals("$.pullStatus.Status", "Success"),
            sfn.Condition.not_(in_progress),
            then,
        )
        return self.poll("Online", online, online_condition, None, self.pull().next(after_pull))

    def pull(self) -> tasks.CallAwsService:
        settings, environment = self.builder.settings, self.builder.environment
        return self.call(
            "PullImages",
            "ssm",
            "sendCommand",
            {
                "DocumentName": "AWS-RunShellScript",
                "InstanceIds": self.instance_ids,
                "TimeoutSeconds": 600,
                "Comment": f"warmstart {environment}: pull serving images for the image snapshot",
                "Parameters": {
                    "commands": self.builder.commands,
                    "executionTimeout": [str(pull_timeout_seconds(settings.build_timeout_minutes))],
                },
            },
            result_path="$.pull",
            selector={"CommandId.$": "$.Command.CommandId"},
        )

    def pull_status(self) -> tasks.CallAwsService:
        pulled = self.call(
            "CheckPull",
            "ssm",
            "getCommandInvocation",
            {"CommandId": sfn.JsonPath.string_at("$.pull.CommandId"), "InstanceId": self.instance_id},
            result_path="$.pullStatus",
        )
        # The invocation appears a moment after SendCommand returns.
        pulled.add_retry(
            errors=["Ssm.InvocationDoesNotExistException"],
            interval=Duration.seconds(10),
            max_attempts=6,
            backoff_rate=1.5,
        )
        return pulled

    def stop_then_snapshot(self) -> sfn.IChainable:
        """Stop the builder, wait until stopped, snapshot its data volume, wait for the snapshot, record it."""
        stop = self.call(
            "StopBuilder", "ec2", "stopInstances", {"InstanceIds": self.instance_ids}, result_path=sfn.JsonPath.DISCARD
        )
        stopped = self.call(
            "CheckStopped",
            "ec2",
            "describeInstances",
            {"InstanceIds": self.instance_ids},
            result_path="$.stopped",
            selector={"State.$": "$.Reservations[0].Instances[0].State.Name"},
        )
        snapshot_state = self.call(
            "CheckSnapshot",
            "ec2",
            "describeSnapshots",
            {"SnapshotIds": sfn.JsonPath.array(sfn.JsonPath.string_at("$.snapshot.SnapshotId"))},
            result_path="$.snapshotState",
            selector={"State.$": "$.Snapshots[0].State"},
        )
        after_snapshot = self.poll(
            "Snapshot",
            snapshot_state,
            sfn.Condition.string_equals("$.snapshotState.State", "completed"),
            sfn.Condition.string_equals("$.snapshotState.State", "error"),
            self.record(),
        )
        stopped_then = self.find_data_volume().next(self.create_snapshot()).next(after_snapshot)
        after_stop = self.poll(
            "Stop", stopped, sfn.Condition.string_equals("$.stopped.State", "stopped"), None, stopped_then
        )
        return stop.next(after_stop)

    def find_data_volume(self) -> tasks.CallAwsService:
        return self.call(
            "FindDataVolume",
            "ec2",
            "describeVolumes",
            {
                "Filters": [
                    {"Name": "attachment.instance-id", "Values": self.instance_ids},
                    {"Name": "attachment.device", "Values": [DATA_DEVICE]},
                ]
            },
            result_path="$.data",
            selector={"VolumeId.$": "$.Volumes[0].VolumeId"},
        )

    def create_snapshot(self) -> tasks.CallAwsService:
        return self.call(
            "CreateSnapshot",
            "ec2",
            "createSnapshot",
            {
                "VolumeId": sfn.JsonPath.string_at("$.data.VolumeId"),
                "Description": f"warmstart {self.builder.environment} container images",
                "TagSpecifications": [{"ResourceType": "snapshot", "Tags": self.tag_list}],
            },
            result_path="$.snapshot",
            selector={"SnapshotId.$": "$.SnapshotId"},
        )

    def record(self) -> tasks.CallAwsService:
        return self.call(
            "Record",
            "ssm",
            "putParameter",
            {
                "Name": self.builder.parameter_name,
                "Type": "String",
                "Overwrite": True,
                "Value": sfn.JsonPath.string_at("$.snapshot.SnapshotId"),
                "Description": "the image snapshot warmstart's GPU nodes start from",
            },
            result_path=sfn.JsonPath.DISCARD,
        )

    def terminate(self, id: str) -> tasks.CallAwsService:
        return self.call(
            id, "ec2", "terminateInstances", {"InstanceIds": self.instance_ids}, result_path=sfn.JsonPath.DISCARD
        )
