"""The one module of the image snapshot's custom resource that talks to AWS (EC2, Step Functions)."""

from __future__ import annotations

import json

from botocore.exceptions import ClientError

from image_preload.runtime.snapshot.build import BUILDER_TAG, ENVIRONMENT_TAG, IMAGE_SET_TAG, Snapshot


class BotoSnapshotAws:
    def __init__(self, ec2, stepfunctions) -> None:
        self._ec2 = ec2
        self._sfn = stepfunctions

    def snapshots(self, environment: str, image_set: str) -> list[Snapshot]:
        pages = self._ec2.get_paginator("describe_snapshots").paginate(
            OwnerIds=["self"],
            Filters=[
                {"Name": f"tag:{ENVIRONMENT_TAG}", "Values": [environment]},
                {"Name": f"tag:{IMAGE_SET_TAG}", "Values": [image_set]},
            ],
        )
        return [
            Snapshot(
                s["SnapshotId"],
                s["State"],
                s["StartTime"].timestamp(),
                {t["Key"]: t["Value"] for t in s.get("Tags", [])},
            )
            for page in pages
            for s in page["Snapshots"]
        ]

    def delete_snapshot(self, snapshot_id: str) -> None:
        try:
            self._ec2.delete_snapshot(SnapshotId=snapshot_id)
        except ClientError as error:
            if error.response["Error"]["Code"] != "InvalidSnapshot.NotFound":
                raise

    def start_build(self, state_machine_arn: str, name: str, image_set: str) -> str:
        response = self._sfn.start_execution(
            stateMachineArn=state_machine_arn, name=name, input=json.dumps({"imageSetKey": image_set})
        )
        return response["executionArn"]

    def build_status(self, execution_arn: str) -> tuple[str, dict | None, str]:
        response = self._sfn.describe_execution(executionArn=execution_arn)
        output = json.loads(response["output"]) if response.get("output") else None
        failure = ": ".join(part for part in (response.get("error"), response.get("cause")) if part)
        return response["status"], output, failure

    def running_builds(self, state_machine_arn: str) -> dict[str, str]:
        pages = self._sfn.get_paginator("list_executions").paginate(
            stateMachineArn=state_machine_arn, statusFilter="RUNNING"
        )
        return {e["name"]: e["executionArn"] for page in pages for e in page["executions"]}

    def stop_build(self, execution_arn: str) -> None:
        self._sfn.stop_execution(
            executionArn=execution_arn, error="Replaced", cause="CloudFormation deleted this image set"
        )

    def builders(self, environment: str) -> list[tuple[str, str]]:
        pages = self._ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": f"tag:{BUILDER_TAG}", "Values": [environment]},
                {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
            ]
        )
        return [
            (i["InstanceId"], {t["Key"]: t["Value"] for t in i.get("Tags", [])}.get(IMAGE_SET_TAG, ""))
            for page in pages
            for r in page["Reservations"]
            for i in r["Instances"]
        ]

    def terminate(self, instance_ids: list[str]) -> None:
        self._ec2.terminate_instances(InstanceIds=instance_ids)
