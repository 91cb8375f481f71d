"""Lambda entry points of the image snapshot's custom resource (CDK provider framework: onEvent, isComplete)."""

from __future__ import annotations

import json

import boto3

from lambdas.image_snapshot.aws import BotoSnapshotAws
from lambdas.image_snapshot.build import is_complete, on_event


def _aws() -> BotoSnapshotAws:
    return BotoSnapshotAws(boto3.client("ec2"), boto3.client("stepfunctions"))


def on_event_handler(event: dict, _context) -> dict:
    result = on_event(event, _aws())
    print(json.dumps({"event": "image-snapshot", "request": event["RequestType"], **result}))
    return result


def is_complete_handler(event: dict, _context) -> dict:
    result = is_complete(event, _aws())
    print(json.dumps({"event": "image-snapshot-wait", "request": event["RequestType"], **result}))
    return result
