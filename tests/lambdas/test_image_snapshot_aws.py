"""The image snapshot resource's AWS module: every request checked against botocore's service models (botocore
1.44.8 Stubber validates parameter names and types as the real API would refuse them), and the one error the
real API answers that the module tolerates (InvalidSnapshot.NotFound)."""

import datetime as dt

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from image_preload.runtime.snapshot.aws import BUILDER_TAG, BotoSnapshotAws
from image_preload.runtime.snapshot.build import ENVIRONMENT_TAG, IMAGE_SET_TAG

ARN = "arn:aws:states:us-east-1:210987654321:stateMachine:ImageSnapshot"


@pytest.fixture
def clients():
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    sfn = boto3.client("stepfunctions", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ec2) as ec2_stub, Stubber(sfn) as sfn_stub:
        yield BotoSnapshotAws(ec2, sfn), ec2_stub, sfn_stub
        ec2_stub.assert_no_pending_responses()
        sfn_stub.assert_no_pending_responses()


def test_snapshots_are_listed_by_both_tags_and_owner(clients):
    aws, ec2, _ = clients
    started = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
    ec2.add_response(
        "describe_snapshots",
        {
            "Snapshots": [
                {
                    "SnapshotId": "snap-0a",
                    "State": "completed",
                    "StartTime": started,
                    "Tags": [{"Key": ENVIRONMENT_TAG, "Value": "prod"}, {"Key": IMAGE_SET_TAG, "Value": "k"}],
                }
            ]
        },
        {
            "OwnerIds": ["self"],
            "Filters": [
                {"Name": f"tag:{ENVIRONMENT_TAG}", "Values": ["prod"]},
                {"Name": f"tag:{IMAGE_SET_TAG}", "Values": ["k"]},
            ],
        },
    )
    (snapshot,) = aws.snapshots("prod", "k")
    assert (snapshot.snapshot_id, snapshot.state, snapshot.start_time) == ("snap-0a", "completed", started.timestamp())
    assert snapshot.tags == {ENVIRONMENT_TAG: "prod", IMAGE_SET_TAG: "k"}


def test_a_snapshot_already_gone_is_not_an_error_but_others_are(clients):
    aws, ec2, _ = clients
    ec2.add_client_error("delete_snapshot", "InvalidSnapshot.NotFound", expected_params={"SnapshotId": "snap-gone"})
    ec2.add_client_error("delete_snapshot", "InvalidSnapshot.InUse", expected_params={"SnapshotId": "snap-ami"})
    aws.delete_snapshot("snap-gone")
    with pytest.raises(ClientError):
        aws.delete_snapshot("snap-ami")


def test_builds_start_with_the_image_set_as_input_and_report_output_and_failure(clients):
    aws, _, sfn = clients
    execution = f"{ARN.replace('stateMachine', 'execution')}:k-1"
    sfn.add_response(
        "start_execution",
        {"executionArn": execution, "startDate": dt.datetime(2026, 11, 30)},
        {"stateMachineArn": ARN, "name": "k-1", "input": '{"imageSetKey": "k"}'},
    )
    assert aws.start_build(ARN, "k-1", "k") == execution
    sfn.add_response(
        "describe_execution",
        {
            "executionArn": execution,
            "stateMachineArn": ARN,
            "status": "SUCCEEDED",
            "startDate": dt.datetime(2026, 11, 30),
            "output": '{"SnapshotId": "snap-0a"}',
        },
        {"executionArn": execution},
    )
    assert aws.build_status(execution) == ("SUCCEEDED", {"SnapshotId": "snap-0a"}, "")
    sfn.add_response(
        "describe_execution",
        {
            "executionArn": execution,
            "stateMachineArn": ARN,
            "status": "FAILED",
            "startDate": dt.datetime(2026, 11, 30),
            "error": "BuildFailed",
            "cause": "PullFailed",
        },
        {"executionArn": execution},
    )
    assert aws.build_status(execution) == ("FAILED", None, "BuildFailed: PullFailed")


def test_running_builds_are_listed_by_name_and_stopped_by_arn(clients):
    aws, _, sfn = clients
    base = ARN.replace("stateMachine", "execution")
    sfn.add_response(
        "list_executions",
        {
            "executions": [
                {
                    "executionArn": f"{base}:k-1",
                    "stateMachineArn": ARN,
                    "name": "k-1",
                    "status": "RUNNING",
                    "startDate": dt.datetime(2026, 11, 30),
                }
            ]
        },
        {"stateMachineArn": ARN, "statusFilter": "RUNNING"},
    )
    assert aws.running_builds(ARN) == {"k-1": f"{base}:k-1"}
    sfn.add_response(
        "stop_execution",
        {"stopDate": dt.datetime(2026, 11, 30)},
        {"executionArn": f"{base}:k-1", "error": "Replaced", "cause": "CloudFormation deleted this image set"},
    )
    aws.stop_build(f"{base}:k-1")


def test_builders_are_found_by_the_environment_tag_with_their_image_set(clients):
    aws, ec2, _ = clients
    ec2.add_response(
        "describe_instances",
        {
            "Reservations": [
                {
                    "Instances": [
                        {"InstanceId": "i-0a", "Tags": [{"Key": IMAGE_SET_TAG, "Value": "k"}]},
                        {"InstanceId": "i-0b"},
                    ]
                }
            ]
        },
        {
            "Filters": [
                {"Name": f"tag:{BUILDER_TAG}", "Values": ["prod"]},
                {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
            ]
        },
    )
    assert aws.builders("prod") == [("i-0a", "k"), ("i-0b", "")]
    ec2.add_response("terminate_instances", {"TerminatingInstances": []}, {"InstanceIds": ["i-0a"]})
    aws.terminate(["i-0a"])
