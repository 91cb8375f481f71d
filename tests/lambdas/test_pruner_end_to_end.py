"""The pruner against a real S3-compatible server (SeaweedFS): 25,000 objects, faults, idempotence.

SSM has no local server here, so the active-set parameter comes from a one-call stand-in that answers and
fails exactly as SSM's GetParameter does.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from lambdas.compile_cache_pruner.aws import PrunerAws
from lambdas.compile_cache_pruner.pruner import ActiveSetUnavailable, Settings, run
from tests.s3_server import ACCESS_KEY, SECRET_KEY, SeaweedS3

PARAMETER = "/warmstart/test/compile-cache/active-keys"


class StandInSsm:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get_parameter(self, Name: str) -> dict:
        if Name not in self.values:
            raise ClientError({"Error": {"Code": "ParameterNotFound", "Message": Name}}, "GetParameter")
        return {"Parameter": {"Name": Name, "Value": self.values[Name]}}


def key(group: str, index: int) -> str:
    return f"compile-cache/{group}/h100-sm_90/tp2-pp1/torch2.11.0/{index:020x}/"


def fast_client(server: SeaweedS3):
    return boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                                      retries={"mode": "standard", "max_attempts": 3},
                                      request_checksum_calculation="when_required"))


def put_all(client, bucket: str, keys: list[str]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=bucket, Key=k, Body=b"{}"), keys))


def all_keys(client, bucket: str) -> set[str]:
    found = set()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        found |= {o["Key"] for o in page.get("Contents", [])}
    return found


def settings(retention: timedelta, orphan_age: timedelta, **overrides) -> Settings:
    return Settings(**{"active_set_parameters": (PARAMETER,), "retention": retention, "orphan_age": orphan_age,
                       "max_deletions": 100_000, "dry_run": False, **overrides})


def full_key(prefix: str) -> list[str]:
    return [f"{prefix}archive-{'b' * 64}.tar.zst", f"{prefix}last-use.json", f"{prefix}manifest.json"]


def test_25000_objects_exactly_the_stale_ones_go_and_a_second_run_deletes_nothing(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active_old = [key("active", i) for i in range(1000)]
    stale = [key("stale", i) for i in range(4000)]
    recent = [key("recent", i) for i in range(2000)]
    orphaned = [key("orphaned", i) for i in range(500)]
    malformed = [f"compile-cache/unexpected/{i:05d}.bin" for i in range(2000)]
    elsewhere = [f"other/{i:05d}" for i in range(1000)]
    old_objects = ([o for p in active_old + stale for o in full_key(p)]
                   + [f"{p}archive-{'c' * 64}.tar.zst" for p in orphaned] + malformed + elsewhere)
    put_all(client, bucket, old_objects)
    time.sleep(2.5)  # LastModified has one-second resolution
    boundary = datetime.now(timezone.utc)
    time.sleep(1.5)
    recent_objects = [o for p in recent for o in full_key(p)] + [f"{p}last-use.json" for p in orphaned]
    put_all(client, bucket, recent_objects)
    assert len(old_objects) + len(recent_objects) == 25_000
    before = all_keys(client, bucket)
    assert len(before) == 25_000

    now = datetime.now(timezone.utc)
    aws = PrunerAws(client, StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active_old})}), bucket)
    emitted = []
    rules = settings(retention=now - boundary, orphan_age=now - boundary)
    summary = run(aws, rules, lambda: now, emitted.append)

    expected_gone = {o for p in stale for o in full_key(p)} | {f"{p}archive-{'c' * 64}.tar.zst" for p in orphaned}
    after = all_keys(client, bucket)
    assert before - after == expected_gone
    assert summary.deleted_objects == 12_500 and summary.deleted_keys == 4000 and summary.orphans_deleted == 500
    assert summary.kept_active == 1000 and summary.kept_recent == 2000  # + 500 kept keys cleaned of orphans
    assert len(summary.malformed) == 2000 and summary.scanned == 24_000
    assert emitted[-1]["event"] == "pruned" and emitted[-1]["deleted_objects"] == 12_500

    second = run(aws, rules, lambda: now, emitted.append)
    assert second.deleted_objects == 0 and all_keys(client, bucket) == after
    # An active key is never deleted, whatever its age.
    far_future = run(aws, rules, lambda: now + timedelta(days=3650), emitted.append)
    assert {o for p in active_old for o in full_key(p)} <= all_keys(client, bucket)
    assert far_future.kept_active == 1000


def _small_world(client, bucket, keys_per_group=40):
    active = [key("active", i) for i in range(keys_per_group)]
    stale = [key("stale", i) for i in range(keys_per_group)]
    put_all(client, bucket, [o for p in active + stale for o in full_key(p)])
    return active, stale


@pytest.mark.parametrize("parameters", [{}, {PARAMETER: "{not json"}, {PARAMETER: '{"version": 1, "keys": 3}'}])
def test_missing_or_unreadable_active_set_deletes_nothing(s3_server, parameters):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    _small_world(client, bucket)
    before = all_keys(client, bucket)
    emitted = []
    with pytest.raises(ActiveSetUnavailable):
        run(PrunerAws(client, StandInSsm(parameters), bucket), settings(timedelta(0), timedelta(0)),
            lambda: datetime.now(timezone.utc) + timedelta(days=30), emitted.append)
    assert all_keys(client, bucket) == before
    assert emitted == [emitted[0]] and emitted[0]["event"] == "active-set-unavailable"


def test_dry_run_counts_but_deletes_nothing(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket)
    before = all_keys(client, bucket)
    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
    summary = run(PrunerAws(client, ssm, bucket), settings(timedelta(0), timedelta(0), dry_run=True),
                  lambda: datetime.now(timezone.utc) + timedelta(days=30), lambda r: None)
    assert summary.deleted_objects == 3 * len(stale) and all_keys(client, bucket) == before


def test_cap_limits_a_run_and_the_next_run_continues(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket)
    aws = PrunerAws(client, StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})}), bucket)
    later = datetime.now(timezone.utc) + timedelta(days=30)
    first = run(aws, settings(timedelta(days=14), timedelta(days=1), max_deletions=30), lambda: later, lambda r: None)
    assert first.deleted_objects == 30 and first.deferred_objects > 0
    second = run(aws, settings(timedelta(days=14), timedelta(days=1)), lambda: later, lambda r: None)
    assert second.deleted_objects == 3 * len(stale) - 30
    assert all_keys(client, bucket) == {o for p in active for o in full_key(p)}


def test_stale_multipart_uploads_are_aborted(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    upload = client.create_multipart_upload(Bucket=bucket, Key=key("stale", 1) + f"archive-{'d' * 64}.tar.zst")
    aws = PrunerAws(client, StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": []})}), bucket)
    summary = run(aws, settings(timedelta(days=14), timedelta(0)), lambda: datetime.now(timezone.utc) + timedelta(
        minutes=1), lambda r: None)
    assert summary.aborted_uploads == 1
    remaining = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert upload["UploadId"] not in [u["UploadId"] for u in remaining]


def test_server_lost_mid_run_fails_cleanly_and_the_next_run_completes(tmp_path):
    server = SeaweedS3(tmp_path / "s3").start()
    try:
        client, bucket = fast_client(server), server.new_bucket()
        active, stale = _small_world(client, bucket, keys_per_group=700)  # 2,100 stale objects: 3 batches
        ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
        later = datetime.now(timezone.utc) + timedelta(days=30)

        class DyingAfterOneBatch(PrunerAws):
            def _delete_batch(self, keys):
                done = super()._delete_batch(keys)
                server.kill()
                return done

        with pytest.raises(Exception):
            run(DyingAfterOneBatch(fast_client(server), ssm, bucket), settings(timedelta(days=14), timedelta(days=1)),
                lambda: later, lambda r: None)
        server.start()
        remaining = all_keys(client, bucket)
        assert {o for p in active for o in full_key(p)} <= remaining
        assert len(remaining) == 2 * 2100 - 1000
        summary = run(PrunerAws(client, ssm, bucket), settings(timedelta(days=14), timedelta(days=1)),
                      lambda: later, lambda r: None)
        assert summary.deleted_objects == 1100
        assert all_keys(client, bucket) == {o for p in active for o in full_key(p)}
    finally:
        server.stop()
