"""The pruner against a real S3-compatible server (SeaweedFS): 25,000 objects, faults, idempotence.

SSM has no local server here, so the active-set parameter comes from a one-call stand-in that answers and
fails exactly as SSM's GetParameter does.
"""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta

import pytest

from contracts.cache_key import PRUNER_LOCK_KEY
from pruner.runtime.aws import PrunerAws
from pruner.runtime.pruner import ActiveSetUnavailable, run
from tests.lambdas.helpers import PARAMETER, StandInSsm, all_keys, assert_no_manifest_without_archive, fast_client
from tests.lambdas.pruner_world import _small_world, full_key, key, put_all, settings
from tests.s3_server import SeaweedS3


def test_25000_objects_exactly_the_stale_ones_go_and_a_second_run_deletes_nothing(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active_old = [key("active", i) for i in range(1000)]
    stale = [key("stale", i) for i in range(4000)]
    recent = [key("recent", i) for i in range(2000)]
    orphaned = [key("orphaned", i) for i in range(500)]
    malformed = [f"compile-cache/unexpected/{i:05d}.bin" for i in range(2000)]
    elsewhere = [f"other/{i:05d}" for i in range(1000)]
    old_objects = (
        [o for p in active_old + stale for o in full_key(p)]
        + [f"{p}archive-{'c' * 64}-0001.tar.zst" for p in orphaned]
        + malformed
        + elsewhere
    )
    put_all(client, bucket, old_objects)
    time.sleep(2.5)  # LastModified has one-second resolution
    boundary = datetime.now(UTC)
    time.sleep(1.5)
    recent_objects = [o for p in recent for o in full_key(p)] + [f"{p}last-use.json" for p in orphaned]
    put_all(client, bucket, recent_objects)
    assert len(old_objects) + len(recent_objects) == 25_000
    before = all_keys(client, bucket)
    assert len(before) == 25_000

    now = datetime.now(UTC)
    aws = PrunerAws(client, StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active_old})}), bucket)
    emitted = []
    rules = settings(retention=now - boundary, orphan_age=now - boundary)
    summary = run(aws, rules, lambda: now, emitted.append)

    expected_gone = {o for p in stale for o in full_key(p)} | {f"{p}archive-{'c' * 64}-0001.tar.zst" for p in orphaned}
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


@pytest.mark.parametrize("parameters", [{}, {PARAMETER: "{not json"}, {PARAMETER: '{"version": 1, "keys": 3}'}])
def test_missing_or_unreadable_active_set_deletes_nothing(s3_server, parameters):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    _small_world(client, bucket)
    before = all_keys(client, bucket)
    emitted = []
    with pytest.raises(ActiveSetUnavailable):
        run(
            PrunerAws(client, StandInSsm(parameters), bucket),
            settings(timedelta(0), timedelta(0)),
            lambda: datetime.now(UTC) + timedelta(days=30),
            emitted.append,
        )
    assert all_keys(client, bucket) == before
    assert emitted == [emitted[0]] and emitted[0]["event"] == "active-set-unavailable"


def test_an_active_set_in_parts_keeps_the_keys_of_every_part(s3_server):
    """warmstart.active_set splits a set larger than one SSM parameter; the first part names the count."""
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket)
    half = len(active) // 2
    ssm = StandInSsm(
        {
            PARAMETER: json.dumps({"version": 1, "keys": active[:half], "parts": 2}),
            f"{PARAMETER}-2": json.dumps({"version": 1, "keys": active[half:], "part": 2}),
        }
    )
    run(
        PrunerAws(client, ssm, bucket),
        settings(timedelta(0), timedelta(0)),
        lambda: datetime.now(UTC) + timedelta(days=30),
        lambda r: None,
    )
    assert all_keys(client, bucket) == {o for p in active for o in full_key(p)}


def test_a_missing_part_of_the_active_set_deletes_nothing(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, _ = _small_world(client, bucket)
    before = all_keys(client, bucket)
    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active[:5], "parts": 2})})  # part 2 absent
    emitted = []
    with pytest.raises(ActiveSetUnavailable):
        run(
            PrunerAws(client, ssm, bucket),
            settings(timedelta(0), timedelta(0)),
            lambda: datetime.now(UTC) + timedelta(days=30),
            emitted.append,
        )
    assert all_keys(client, bucket) == before
    assert emitted[0]["event"] == "active-set-unavailable" and emitted[0]["parameter"] == PARAMETER


def test_dry_run_counts_but_deletes_nothing(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket)
    before = all_keys(client, bucket)
    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
    summary = run(
        PrunerAws(client, ssm, bucket),
        settings(timedelta(0), timedelta(0), dry_run=True),
        lambda: datetime.now(UTC) + timedelta(days=30),
        lambda r: None,
    )
    assert summary.deleted_objects == 3 * len(stale) and all_keys(client, bucket) == before


def test_cap_limits_a_run_and_the_next_run_continues(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket)
    aws = PrunerAws(client, StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})}), bucket)
    later = datetime.now(UTC) + timedelta(days=30)
    first = run(aws, settings(timedelta(days=14), timedelta(days=1), max_deletions=30), lambda: later, lambda r: None)
    assert first.deleted_objects == 30 and first.deferred_objects > 0
    second = run(aws, settings(timedelta(days=14), timedelta(days=1)), lambda: later, lambda r: None)
    assert second.deleted_objects == 3 * len(stale) - 30
    assert all_keys(client, bucket) == {o for p in active for o in full_key(p)}


def test_stale_multipart_uploads_are_aborted(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    upload = client.create_multipart_upload(Bucket=bucket, Key=key("stale", 1) + f"archive-{'d' * 64}-0001.tar.zst")
    aws = PrunerAws(client, StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": []})}), bucket)
    summary = run(
        aws,
        settings(timedelta(days=14), timedelta(0)),
        lambda: datetime.now(UTC) + timedelta(minutes=1),
        lambda r: None,
    )
    assert summary.aborted_uploads == 1
    remaining = client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    assert upload["UploadId"] not in [u["UploadId"] for u in remaining]


def test_server_lost_mid_run_never_leaves_a_manifest_without_its_archive(tmp_path):
    server = SeaweedS3(tmp_path / "s3").start()
    try:
        client, bucket = fast_client(server), server.new_bucket()
        active, stale = _small_world(client, bucket, keys_per_group=700)  # 2,100 stale objects: 3 batches
        ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
        later = datetime.now(UTC) + timedelta(days=30)

        class DyingAfterOneBatch(PrunerAws):
            def _delete_batch(self, items, result):
                super()._delete_batch(items, result)
                server.kill()

        with pytest.raises(Exception):
            run(
                DyingAfterOneBatch(fast_client(server), ssm, bucket),
                settings(timedelta(days=14), timedelta(days=1)),
                lambda: later,
                lambda r: None,
            )
        server.start()
        # A restarted SeaweedFS answers listings before all its volumes serve reads again (InternalError meanwhile).
        client = server.client(retries=10, default_checksums=False, read_timeout=60)
        remaining = all_keys(client, bucket) - {PRUNER_LOCK_KEY}  # the dead run's lock stays until it expires
        assert {o for p in active for o in full_key(p)} <= remaining
        assert len(remaining) == 2 * 2100 - 700  # the first batch held the 700 stale manifests, and only them
        assert_no_manifest_without_archive(client, bucket)
        summary = run(
            PrunerAws(client, ssm, bucket),
            settings(timedelta(days=14), timedelta(days=1)),
            lambda: later + timedelta(minutes=21),
            lambda r: None,
        )
        assert summary.deleted_objects == 1400
        assert all_keys(client, bucket) == {o for p in active for o in full_key(p)}
    finally:
        server.stop()


class FailingEntries:
    """A client whose DeleteObjects reports InternalError for some keys on every attempt (as S3 may)."""

    def __init__(self, client, failing):
        self._client = client
        self.failing = failing
        self.batches = []

    def __getattr__(self, name):
        return getattr(self._client, name)

    def delete_objects(self, **kwargs):
        objects = kwargs["Delete"]["Objects"]
        self.batches.append([o["Key"] for o in objects])
        bad = [o for o in objects if self.failing(o["Key"])]
        kept = [o for o in objects if not self.failing(o["Key"])]
        response = (
            self._client.delete_objects(**{**kwargs, "Delete": {**kwargs["Delete"], "Objects": kept}}) if kept else {}
        )
        errors = response.get("Errors", []) + [
            {"Key": o["Key"], "Code": "InternalError", "Message": "injected"} for o in bad
        ]
        return {**response, "Errors": errors}


def test_a_partly_failed_batch_never_deletes_an_archive_before_its_manifest(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket)
    unlucky = set(stale[::3])
    failing = FailingEntries(
        client,
        lambda k: k.endswith("manifest-0123456789abcdef.json")
        and k.removesuffix("manifest-0123456789abcdef.json") in unlucky,
    )
    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
    later = datetime.now(UTC) + timedelta(days=30)
    with pytest.raises(RuntimeError, match="could not be deleted"):
        run(
            PrunerAws(failing, ssm, bucket, sleep=lambda s: None),
            settings(timedelta(days=14), timedelta(days=1)),
            lambda: later,
            lambda r: None,
        )
    assert_no_manifest_without_archive(client, bucket)
    assert {o for p in unlucky for o in full_key(p)} <= all_keys(client, bucket)  # untouched, whole
    assert all(
        all(k.endswith("manifest-0123456789abcdef.json") for k in batch) for batch in failing.batches
    )  # phase 2 never ran
    summary = run(
        PrunerAws(client, ssm, bucket), settings(timedelta(days=14), timedelta(days=1)), lambda: later, lambda r: None
    )
    assert summary.deleted_keys == len(stale)
    assert all_keys(client, bucket) == {o for p in active for o in full_key(p)}


def test_a_key_with_a_control_character_is_deleted_alone_and_the_batch_goes_on(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket)
    odd = f"{stale[0]}archive-{'e' * 64}-\x01.tar.zst"
    client.put_object(Bucket=bucket, Key=odd, Body=b"x")
    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
    later = datetime.now(UTC) + timedelta(days=30)
    summary = run(
        PrunerAws(client, ssm, bucket), settings(timedelta(days=14), timedelta(days=1)), lambda: later, lambda r: None
    )
    assert summary.deleted_keys == len(stale) and summary.deleted_objects == 3 * len(stale) + 1
    assert all_keys(client, bucket) == {o for p in active for o in full_key(p)}


def test_a_use_recorded_after_the_listing_keeps_that_record(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket, keys_per_group=3)
    touched = stale[1] + "last-use.json"

    class TouchBeforeDelete(FailingEntries):
        def delete_objects(self, **kwargs):
            if not any(
                k.endswith("manifest-0123456789abcdef.json") for k in (o["Key"] for o in kwargs["Delete"]["Objects"])
            ):
                self._client.put_object(Bucket=bucket, Key=touched, Body=b'{"node": "n", "time": 1}')
            return super().delete_objects(**kwargs)

    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
    later = datetime.now(UTC) + timedelta(days=30)
    summary = run(
        PrunerAws(TouchBeforeDelete(client, lambda k: False), ssm, bucket),
        settings(timedelta(days=14), timedelta(days=1)),
        lambda: later,
        lambda r: None,
    )
    assert touched in all_keys(client, bucket) and summary.changed_since_listing == 1


def test_runs_never_overlap_and_a_dead_runs_lock_expires(s3_server):
    client, bucket = fast_client(s3_server), s3_server.new_bucket()
    active, stale = _small_world(client, bucket, keys_per_group=5)
    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})})
    later = datetime.now(UTC) + timedelta(days=30)
    aws = PrunerAws(client, ssm, bucket)
    assert aws.take_lock("other-run", later, later + timedelta(minutes=20))  # a run in progress
    emitted = []
    busy = run(aws, settings(timedelta(days=14), timedelta(days=1)), lambda: later, emitted.append, run_id="mine")
    assert busy.deleted_objects == 0 and emitted == [{"event": "pruner-busy", "reason": emitted[0]["reason"]}]
    assert {o for p in stale for o in full_key(p)} <= all_keys(client, bucket)
    # That run died without releasing: once its lock expires, the next run takes over and releases after.
    summary = run(
        aws,
        settings(timedelta(days=14), timedelta(days=1)),
        lambda: later + timedelta(minutes=21),
        lambda r: None,
        run_id="mine",
    )
    assert summary.deleted_keys == len(stale) and PRUNER_LOCK_KEY not in all_keys(client, bucket)


def test_a_key_keeps_its_fullest_archive_and_a_new_node_restores_it(s3_server, tmp_path):
    """Two nodes' archives of one configuration: the second holds every file of the first and more (vLLM wrote
    after the first was taken). Once the fuller one has been there past the orphan age, the lesser manifest and its
    archive go; the fuller one stays and a new node restores it."""
    from node_agent.runtime.log import EventLog
    from node_agent.runtime.s3.compile_store import CacheStore
    from tests.agent.compile_world import (
        FINGERPRINT,
        H100_KEY,
        MODEL,
        fill_compile_cache,
        node_layout,
        publish_as,
        restore_as,
    )

    bucket = s3_server.new_bucket()
    store = CacheStore(s3_server.client(), bucket)
    log = EventLog(time.time, stream=open(os.devnull, "w"))  # noqa: SIM115 - the test's lifetime
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    folder = node_a.model_dir(MODEL, FINGERPRINT)
    fill_compile_cache(folder, seed=1)
    assert publish_as(store, node_a, time.time, log).status == "published"
    late = folder / "vllm" / "torch_compile_cache" / "00000001" / "rank_0_0" / "late.py"
    late.write_text("# written after the first archive\n")
    assert publish_as(store, node_a, time.time, log).status == "republished"
    before = all_keys(store._s3, bucket)
    manifests = sorted(k for k in before if "/manifest-" in k)
    fuller = max(manifests, key=lambda k: store.get_json(k)["files"])
    lesser = next(k for k in manifests if k != fuller)
    ssm = StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": [H100_KEY.prefix]})})
    aws = PrunerAws(fast_client(s3_server), ssm, bucket)
    run(aws, settings(timedelta(days=14), timedelta(days=1)), lambda: datetime.now(UTC), lambda r: None)
    assert all_keys(store._s3, bucket) == before  # the fuller one is too new: restores may still take the lesser
    run(
        aws,
        settings(timedelta(days=14), timedelta(days=1)),
        lambda: datetime.now(UTC) + timedelta(days=2),
        lambda r: None,
    )
    after = all_keys(store._s3, bucket)
    assert lesser not in after and store.get_json(lesser) is None
    assert fuller in after and store.get_json(fuller)["archive"] in after
    assert_no_manifest_without_archive(store._s3, bucket)
    assert restore_as(store, node_b, time.time, log).status == "restored"
    assert (node_b.model_dir(MODEL, FINGERPRINT) / late.relative_to(folder)).exists()
