"""Shared by the pruner tests: the SSM stand-in, a fast S3 client, and what a consistent bucket looks like."""

from __future__ import annotations

import json

from botocore.exceptions import ClientError

from contracts.pruner_report import PRUNER_REPORT_KEY
from tests.s3_server import SeaweedS3

PARAMETER = "/warmstart/test/compile-cache/active-keys"


class StandInSsm:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get_parameter(self, Name: str) -> dict:
        if Name not in self.values:
            raise ClientError({"Error": {"Code": "ParameterNotFound", "Message": Name}}, "GetParameter")
        return {"Parameter": {"Name": Name, "Value": self.values[Name]}}


def fast_client(server: SeaweedS3):
    """Many connections, retries, no default checksums, a long read timeout: for batches of 1,000 deletes."""
    return server.client(retries=3, default_checksums=False, max_pool_connections=32, read_timeout=60)


def all_keys(client, bucket: str) -> set[str]:
    """Every object of the bucket but the pruner's report of its last run (tests/lambdas/test_pruner_report.py)."""
    found = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        found |= {o["Key"] for o in page.get("Contents", [])}
    return found - {PRUNER_REPORT_KEY}


def assert_no_manifest_without_archive(client, bucket):
    """Every manifest has an archive beside it, and the one it names where it names one."""
    names = all_keys(client, bucket)
    for name in names:
        if name.rsplit("/", 1)[-1].startswith("manifest-"):
            named = json.loads(client.get_object(Bucket=bucket, Key=name)["Body"].read() or b"{}").get("archive")
            prefix = name.rsplit("/", 1)[0] + "/"
            archives = [k for k in names if k.startswith(prefix + "archive-")]
            assert archives and (named is None or named in archives), name
