"""Lambda entry points of the image snapshot's custom resource (CDK provider framework: onEvent, isComplete)."""

from __future__ import annotations

import boto3
from botocore.config import Config

from image_preload.runtime.snapshot.aws import BotoSnapshotAws
from image_preload.runtime.snapshot.build import is_complete, on_event
from lambdas.log import log_line

# Every call ends: 5 s to connect, 30 s between bytes (small EC2 and Step Functions calls), standard retries.
CLIENT_CONFIG = Config(connect_timeout=5, read_timeout=30, retries={"mode": "standard", "total_max_attempts": 5})


def _aws() -> BotoSnapshotAws:
    return BotoSnapshotAws(
        boto3.client("ec2", config=CLIENT_CONFIG), boto3.client("stepfunctions", config=CLIENT_CONFIG)
    )


def on_event_handler(event: dict, _context) -> dict:
    result = on_event(event, _aws())
    log_line({"event": "image-snapshot", "request": event["RequestType"], **result})
    return result


def is_complete_handler(event: dict, _context) -> dict:
    result = is_complete(event, _aws())
    log_line({"event": "image-snapshot-wait", "request": event["RequestType"], **result})
    return result
