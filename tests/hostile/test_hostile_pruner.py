"""The pruner's own files, written wrong: a lock it cannot read never stops it for longer than a stale lock would,
and an active set of the wrong shape deletes nothing (SeaweedFS as S3)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from contracts.cache_key import PRUNER_LOCK_KEY
from pruner.runtime.aws import PrunerAws
from pruner.runtime.pruner import LOCK_LIFETIME, ActiveSetUnavailable, run
from tests.lambdas.helpers import PARAMETER, StandInSsm, all_keys, fast_client
from tests.lambdas.pruner_world import _small_world, full_key, settings


@pytest.mark.parametrize(
    "body",
    [
        b"\x00\xffnot json at all",
        json.dumps({"run": "old", "until": "2026-12-01T10:00:00"}).encode(),  # a naive date
        json.dumps({"run": "old", "until": 12}).encode(),
        b"[" * 5000,
    ],
)
def test_a_malformed_lock_is_replaced_after_the_lock_lifetime_with_a_log_line(s3_server, body):
    """The P2: a lock with a garbage body (or a naive date) failed every later run until someone deleted it."""
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket, keys_per_group=3)
    client.put_object(Bucket=bucket, Key=PRUNER_LOCK_KEY, Body=body)
    written = client.head_object(Bucket=bucket, Key=PRUNER_LOCK_KEY)["LastModified"]
    aws = PrunerAws(client, StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})}), bucket)
    emitted: list[dict] = []
    soon = run(
        aws, settings(timedelta(days=0), timedelta(days=0)), lambda: written + timedelta(minutes=1), emitted.append
    )
    assert soon.deleted_objects == 0 and emitted[0]["event"] == "pruner-busy"  # as a live lock would
    emitted.clear()
    later = written + LOCK_LIFETIME + timedelta(minutes=1)
    summary = run(aws, settings(timedelta(days=0), timedelta(days=0)), lambda: later, emitted.append)
    assert summary.deleted_keys == len(stale)
    (taken,) = [e for e in emitted if e["event"] == "pruner-lock-taken-over"]
    assert "no valid expiry" in taken["reason"]
    assert PRUNER_LOCK_KEY not in all_keys(client, bucket)


@pytest.mark.parametrize(
    "document",
    [
        {"version": 1, "keys": [], "parts": True},  # a bool is an int in Python: not a part count
        {"version": True, "keys": []},
        {"version": 1, "keys": [], "parts": 10**6},
    ],
)
def test_an_active_set_of_the_wrong_shape_deletes_nothing(s3_server, document):
    """The P2: `"parts": true` was read as one part."""
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    _, stale = _small_world(client, bucket, keys_per_group=3)
    before = all_keys(client, bucket)
    aws = PrunerAws(client, StandInSsm({PARAMETER: json.dumps(document)}), bucket)
    with pytest.raises(ActiveSetUnavailable):
        run(aws, settings(timedelta(days=0), timedelta(days=0)), lambda: datetime.now(UTC), lambda _: None)
    assert all_keys(client, bucket) == before
    assert {o for p in stale for o in full_key(p)} <= before


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000,  # nested past the parser's depth: RecursionError stopped every run
        b'{"archive": "' + b"a" * (2 * 2**20) + b'"}',  # past MANIFEST_MAX_BYTES: never read
        b"\xff\xfe not json",
    ],
)
def test_a_manifest_any_node_wrote_wrong_keeps_its_key_and_the_run_goes_on(s3_server, body):
    """The P2: a manifest of 100,000 `[` raised RecursionError on every run (nothing was pruned again), and a
    200 MB one was read whole into the function's 512 MB. Now its key is kept as it is, the run goes on, and the
    summary names it."""
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket, keys_per_group=3)
    # Two archives and two manifests: which archive is in use can only be told by reading the manifests.
    hostile = f"{active[0]}manifest-fedcba9876543210.json"
    named = {"archive": f"{active[0]}archive-{'b' * 64}-0001.tar.zst"}  # the world's own manifest, read first
    client.put_object(Bucket=bucket, Key=f"{active[0]}manifest-0123456789abcdef.json", Body=json.dumps(named).encode())
    client.put_object(Bucket=bucket, Key=f"{active[0]}archive-{'c' * 64}-0001.tar.zst", Body=b"x")
    client.put_object(Bucket=bucket, Key=hostile, Body=body)
    kept = {k for k in all_keys(client, bucket) if k.startswith(active[0])}
    aws = PrunerAws(client, StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})}), bucket)
    emitted: list[dict] = []
    later = datetime.now(UTC) + timedelta(days=30)
    summary = run(aws, settings(timedelta(days=0), timedelta(days=0)), lambda: later, emitted.append)
    assert summary.deleted_keys == len(stale)
    assert hostile in summary.unreadable_manifests
    assert {k for k in all_keys(client, bucket) if k.startswith(active[0])} == kept
    (pruned,) = [e for e in emitted if e["event"] == "pruned"]
    assert pruned["unreadable_manifests"] >= 1 and hostile in pruned["unreadable_manifest_examples"]
