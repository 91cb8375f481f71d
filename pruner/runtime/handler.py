"""Lambda entry point: settings from the environment, real clients, structured log and EMF metrics."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

import boto3
from botocore.config import Config

from lambdas.log import log_line
from pruner.runtime.aws import PrunerAws
from pruner.runtime.pruner import Settings, run
from pruner.runtime.settings import PrunerEnvironment

NAMESPACE = "Warmstart/CompileCachePruner"
METRICS = (
    "scanned",
    "keys",
    "kept_active",
    "kept_recent",
    "deleted_keys",
    "deleted_objects",
    "orphans_deleted",
    "repaired_manifests",
    "bytes_freed",
    "deferred_objects",
    "changed_since_listing",
    "malformed",
    "unreadable_manifests",
    "aborted_uploads",
)


def settings_from_environment() -> Settings:
    environment = PrunerEnvironment.read(os.environ)
    return Settings(
        active_set_parameters=environment.active_set_parameters,
        retention=environment.retention,
        orphan_age=environment.orphan_age,
        max_deletions=environment.max_deletions,
        dry_run=environment.dry_run,
    )


def emit(record: dict) -> None:
    """One JSON line; the summary also carries CloudWatch embedded-metric-format fields (no API call)."""
    if record.get("event") in ("pruned", "active-set-unavailable"):
        metrics = {name: record.get(name, 0) for name in METRICS if isinstance(record.get(name, 0), int)}
        if record["event"] == "active-set-unavailable":
            metrics = {"active_set_unavailable": 1}
        record = {
            **record,
            **metrics,
            "Environment": os.environ.get("WARMSTART_ENVIRONMENT", "unknown"),
            "_aws": {
                "Timestamp": int(time.time() * 1000),
                "CloudWatchMetrics": [
                    {
                        "Namespace": NAMESPACE,
                        "Dimensions": [["Environment"]],
                        "Metrics": [
                            {"Name": name, "Unit": "Bytes" if name == "bytes_freed" else "Count"} for name in metrics
                        ],
                    }
                ],
            },
        }
    log_line(record)


def handler(event, context) -> dict:
    # Every call ends: 5 s to connect, 30 s between bytes (listings and deletes of a few kB), 8 attempts.
    config = Config(connect_timeout=5, read_timeout=30, retries={"mode": "standard", "total_max_attempts": 8})
    bucket = PrunerEnvironment.read(os.environ).bucket
    aws = PrunerAws(boto3.client("s3", config=config), boto3.client("ssm", config=config), bucket)
    summary = run(
        aws, settings_from_environment(), lambda: datetime.now(UTC), emit, run_id=getattr(context, "aws_request_id", "")
    )
    return {"deleted_objects": summary.deleted_objects, "bytes_freed": summary.bytes_freed}
