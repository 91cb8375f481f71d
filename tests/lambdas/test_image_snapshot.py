"""The image snapshot's custom resource: when it builds, what it returns, what it deletes.

CloudFormation behaviour it relies on (CloudFormation user guide, "Custom resources" and "Update behaviors of
stack resources"): a new physical ID on Update is a replacement, and the Delete for the old ID is sent only in
the cleanup phase after the whole stack update succeeded; on a rollback the Delete goes to the new ID. The
provider framework (aws-cdk-lib 2.275 custom-resources) passes onEvent's result, Data included, to isComplete.
"""

import pytest

from image_preload.runtime.snapshot.build import (
    ENVIRONMENT_TAG,
    IMAGE_SET_TAG,
    BuildFailed,
    Snapshot,
    execution_name,
    is_complete,
    on_event,
    reusable_snapshot,
    snapshots_to_delete,
)

ARN = "arn:aws:states:us-east-1:210987654321:stateMachine:ImageSnapshot"
KEY = "cc23cb93cf122272248e"


def tags(environment="prod", image_set=KEY):
    return {ENVIRONMENT_TAG: environment, IMAGE_SET_TAG: image_set}


class FakeAws:
    """Snapshots and executions in memory, with the filters the real listing applies (tag equality)."""

    def __init__(self, snapshots=(), status=("RUNNING", None, ""), builders=(), running=None):
        self.all = list(snapshots)
        self.status = status
        self.instances = list(builders)  # (instance ID, image set) of this environment's builders
        self.running = dict(running or {})  # execution name -> ARN
        self.started, self.deleted, self.stopped, self.terminated = [], [], [], []

    def snapshots(self, environment, image_set):
        return [s for s in self.all if s.tags == tags(environment, image_set)]

    def delete_snapshot(self, snapshot_id):
        self.deleted.append(snapshot_id)

    def start_build(self, state_machine_arn, name, image_set):
        self.started.append((state_machine_arn, name, image_set))
        return f"{ARN.replace('stateMachine', 'execution')}:{name}"

    def build_status(self, execution_arn):
        return self.status

    def running_builds(self, state_machine_arn):
        return dict(self.running)

    def stop_build(self, execution_arn):
        self.stopped.append(execution_arn)

    def builders(self, environment):
        return [b for b in self.instances if b[0] not in self.terminated]

    def terminate(self, instance_ids):
        self.terminated.extend(instance_ids)


def event(request, **extra):
    return {
        "RequestType": request,
        "RequestId": "6b1c2e2e-0000-4000-8000-000000000001",
        "ResourceProperties": {"Environment": "prod", "ImageSetKey": KEY, "StateMachineArn": ARN},
        **extra,
    }


def test_a_new_image_set_starts_a_build_named_after_it():
    aws = FakeAws()
    result = on_event(event("Create"), aws)
    assert result["PhysicalResourceId"] == KEY
    (started,) = aws.started
    assert started == (ARN, f"{KEY}-6b1c2e2e-0000-4000-8000-000000000001", KEY)
    assert result["Data"]["ExecutionArn"].endswith(started[1])


def test_an_image_set_with_a_completed_snapshot_is_not_built_again():
    aws = FakeAws(
        [
            Snapshot("snap-old", "completed", 1.0, tags()),
            Snapshot("snap-new", "completed", 2.0, tags()),
            Snapshot("snap-pending", "pending", 3.0, tags()),
        ]
    )
    result = on_event(event("Update"), aws)  # e.g. the rollback to an earlier image set
    assert result == {"PhysicalResourceId": KEY, "Data": {"SnapshotId": "snap-new"}}
    assert aws.started == []
    assert is_complete(event("Update", **result), aws) == {"IsComplete": True, "Data": {"SnapshotId": "snap-new"}}


def test_the_wait_follows_the_execution():
    arn = "arn:aws:states:us-east-1:210987654321:execution:ImageSnapshot:x"
    waiting = event("Create", PhysicalResourceId=KEY, Data={"ExecutionArn": arn})
    assert is_complete(waiting, FakeAws(status=("RUNNING", None, ""))) == {"IsComplete": False}
    done = FakeAws(status=("SUCCEEDED", {"SnapshotId": "snap-0abc"}, ""))
    assert is_complete(waiting, done) == {"IsComplete": True, "Data": {"SnapshotId": "snap-0abc"}}


@pytest.mark.parametrize(
    "status",
    [
        ("FAILED", None, "BuildFailed: see the failed step"),
        ("TIMED_OUT", None, ""),
        ("ABORTED", None, ""),
        ("SUCCEEDED", {"SnapshotId": ""}, ""),
    ],
)
def test_a_build_without_a_snapshot_fails_the_deploy_with_its_cause(status):
    waiting = event("Create", PhysicalResourceId=KEY, Data={"ExecutionArn": "arn:x"})
    with pytest.raises(BuildFailed, match=status[0]):
        is_complete(waiting, FakeAws(status=status))


def test_delete_removes_only_this_environments_snapshots_of_that_image_set():
    mine = [Snapshot("snap-a", "completed", 1.0, tags()), Snapshot("snap-b", "pending", 2.0, tags())]
    others = [
        Snapshot("snap-other-set", "completed", 1.0, tags(image_set="another")),
        Snapshot("snap-other-env", "completed", 1.0, tags(environment="dev")),
        Snapshot("snap-untagged", "completed", 1.0, {}),
    ]
    aws = FakeAws(
        mine + others,
        builders=[("i-mine", KEY), ("i-other", "another")],
        running={f"{KEY}-r1": "arn:mine", "another-r2": "arn:other"},
    )
    result = on_event(event("Delete", PhysicalResourceId=KEY), aws)
    assert result == {"PhysicalResourceId": KEY}
    assert aws.deleted == ["snap-a", "snap-b"]
    assert aws.stopped == ["arn:mine"] and aws.terminated == ["i-mine"]  # a build still running goes first
    assert is_complete(event("Delete", PhysicalResourceId=KEY), aws) == {"IsComplete": True}


def test_a_builder_whose_build_no_longer_runs_is_terminated_before_the_next_build():
    # The state machine's own timeout (no Catch runs) or a rollback to an earlier set (no Delete for the newer
    # one) can leave a builder running; the next Create or Update ends it, and leaves running builds alone.
    aws = FakeAws(builders=[("i-left", "older"), ("i-busy", "busy")], running={"busy-r1": "arn:busy"})
    on_event(event("Update"), aws)
    assert aws.terminated == ["i-left"]
    assert aws.started  # then its own build starts


def test_the_deletion_rule_checks_tags_itself_whatever_the_listing_returned():
    listing = [Snapshot("snap-a", "completed", 1.0, tags()), Snapshot("snap-x", "completed", 1.0, tags("dev"))]
    assert snapshots_to_delete(listing, "prod", KEY) == ["snap-a"]
    assert reusable_snapshot(listing, "staging", KEY) is None


def test_execution_names_fit_step_functions_limit():
    assert len(execution_name("k" * 20, "r" * 36)) == 57
    assert len(execution_name("k" * 64, "r" * 36)) == 80
