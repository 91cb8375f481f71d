"""The image snapshot's custom resource: builds a snapshot when the image set is new, reports its ID, and
deletes a set's snapshots once CloudFormation no longer needs them.

CloudFormation semantics carry the lifecycle: the physical ID is the image-set key, so a new set replaces the
resource, and CloudFormation sends Delete for the old key only after the whole update (the node class now naming
the new snapshot included) succeeded; on a rollback the Delete goes to the new key instead. A snapshot is
therefore deleted exactly when no node class references it. Nodes already running keep their volumes (an EBS
volume does not depend on the snapshot it was made from).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Protocol

# The builder instance carries it (its value: the environment), so the workflow and the resource touch only their
# own builder; here, not in aws.py, so that synth reads it without botocore.
BUILDER_TAG = "warmstart.io/image-builder"
ENVIRONMENT_TAG = "warmstart.io/environment"
IMAGE_SET_TAG = "warmstart.io/image-set"


@dataclass(frozen=True)
class Snapshot:
    snapshot_id: str
    state: str  # pending | completed | error | recoverable | recovering
    start_time: float
    tags: dict[str, str]


class BuildFailed(RuntimeError):
    """The build did not produce a snapshot; CloudFormation shows the message and rolls back."""


class SnapshotAws(Protocol):
    def snapshots(self, environment: str, image_set: str) -> list[Snapshot]: ...
    def delete_snapshot(self, snapshot_id: str) -> None: ...
    def start_build(self, state_machine_arn: str, name: str, image_set: str) -> str: ...
    def build_status(self, execution_arn: str) -> tuple[str, dict | None, str]: ...
    def running_builds(self, state_machine_arn: str) -> dict[str, str]: ...  # execution name -> ARN
    def stop_build(self, execution_arn: str) -> None: ...
    def builders(self, environment: str) -> list[tuple[str, str]]: ...  # (instance ID, image set), not terminated
    def terminate(self, instance_ids: list[str]) -> None: ...


def reusable_snapshot(snapshots: list[Snapshot], environment: str, image_set: str) -> Snapshot | None:
    """The newest completed snapshot of this environment and image set (a rollback, or a retried deploy, needs
    no new build)."""
    mine = [s for s in snapshots if s.state == "completed" and _belongs(s, environment, image_set)]
    return max(mine, key=lambda s: s.start_time, default=None)


def snapshots_to_delete(snapshots: list[Snapshot], environment: str, image_set: str) -> list[str]:
    """Every snapshot of this environment made for this image set, and only those (tags checked again here:
    the listing's filters are not trusted to be the only guard)."""
    return sorted(s.snapshot_id for s in snapshots if _belongs(s, environment, image_set))


def _belongs(snapshot: Snapshot, environment: str, image_set: str) -> bool:
    return snapshot.tags.get(ENVIRONMENT_TAG) == environment and snapshot.tags.get(IMAGE_SET_TAG) == image_set


def image_set_of(execution_name: str) -> str:
    return execution_name.split("-", 1)[0]


def orphan_builders(builders: list[tuple[str, str]], running: dict[str, str]) -> list[str]:
    """Builders whose build no longer runs: the state machine's own timeout (which no Catch sees) left them, and
    an update rolled back to an earlier image set never sends Delete for the newer one."""
    live = {image_set_of(name) for name in running}
    return sorted(instance for instance, image_set in builders if image_set not in live)


def execution_name(image_set: str, request_id: str) -> str:
    """Unique per request (Step Functions keeps names for 90 days), findable by image set; at most 80 chars."""
    return f"{image_set}-{request_id}"[:80]


def on_event(event: dict, aws: SnapshotAws) -> dict:
    props = event["ResourceProperties"]
    environment, image_set = props["Environment"], props["ImageSetKey"]
    if event["RequestType"] == "Delete":
        key = event["PhysicalResourceId"]
        # A build of this set may still run (a rollback after a timed-out wait): stop it and its instance first.
        for name, arn in aws.running_builds(props["StateMachineArn"]).items():
            if image_set_of(name) == key:
                aws.stop_build(arn)
        mine = [instance for instance, image_set in aws.builders(environment) if image_set == key]
        if mine:
            aws.terminate(mine)
        for snapshot_id in snapshots_to_delete(aws.snapshots(environment, key), environment, key):
            aws.delete_snapshot(snapshot_id)
        return {"PhysicalResourceId": key}
    orphans = orphan_builders(aws.builders(environment), aws.running_builds(props["StateMachineArn"]))
    if orphans:
        aws.terminate(orphans)
    existing = reusable_snapshot(aws.snapshots(environment, image_set), environment, image_set)
    if existing:
        return {"PhysicalResourceId": image_set, "Data": {"SnapshotId": existing.snapshot_id}}
    arn = aws.start_build(props["StateMachineArn"], execution_name(image_set, event["RequestId"]), image_set)
    return {"PhysicalResourceId": image_set, "Data": {"ExecutionArn": arn}}


def is_complete(event: dict, aws: SnapshotAws) -> dict:
    if event["RequestType"] == "Delete":
        return {"IsComplete": True}
    data = event.get("Data", {})
    if "SnapshotId" in data:
        return {"IsComplete": True, "Data": {"SnapshotId": data["SnapshotId"]}}
    status, output, failure = aws.build_status(data["ExecutionArn"])
    if status == "RUNNING":
        return {"IsComplete": False}
    if status == "SUCCEEDED" and output and output.get("SnapshotId", "").startswith("snap-"):
        return {"IsComplete": True, "Data": {"SnapshotId": output["SnapshotId"]}}
    raise BuildFailed(f"image snapshot build {data['ExecutionArn']} ended {status}: {failure or json.dumps(output)}")
