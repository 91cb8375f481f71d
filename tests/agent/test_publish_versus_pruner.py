"""The pruner and the agent's publish/restore on one real S3 server (SeaweedFS): what they do to each other.
No manifest may ever name a missing archive, and archives no manifest names are collected."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from node_agent.runtime.s3.compile_store import CacheStore
from pruner.runtime.aws import PrunerAws
from pruner.runtime.pruner import Settings, run
from tests.agent.compile_world import (
    FACTORS,
    H100_KEY,
    fill_compile_cache,
    node_layout,
    pruner_deletes,
    publish_as,
    restore_as,
)
from tests.lambdas.helpers import PARAMETER, StandInSsm, all_keys, assert_no_manifest_without_archive

FINGERPRINT = FACTORS.fingerprint()
MODEL = FACTORS.model
AGE = timedelta(seconds=1.5)  # LastModified has one-second resolution


def _pruner(store: CacheStore, active: list[str]) -> PrunerAws:
    return PrunerAws(store._s3, StandInSsm({PARAMETER: json.dumps({"version": 1, "keys": active})}), store.bucket)


def _settings() -> Settings:
    return Settings(
        active_set_parameters=(PARAMETER,), retention=AGE, orphan_age=AGE, max_deletions=1000, dry_run=False
    )


def test_a_publish_paused_between_archive_and_manifest_keeps_its_archive(tmp_path, store, clock, log):
    # The key was used long ago: only its last-use record is left, and it is in no active set.
    store.put_json(H100_KEY.last_use_key, {"node": "gone", "time": 0})
    time.sleep(2.5)
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT))
    summaries = []

    class PrunerRunsMeanwhile(CacheStore):
        def put_json_if_absent(self, key, document):
            summaries.append(run(_pruner(self, []), _settings(), lambda: datetime.now(UTC), lambda r: None))
            return super().put_json_if_absent(key, document)

    paused = PrunerRunsMeanwhile(store._s3, store.bucket, part_bytes=store.part_bytes, threads=store.threads)
    outcome = publish_as(paused, node_a, clock, log)
    assert outcome.status == "published"
    assert summaries[0].kept_recent == 1 and summaries[0].deleted_objects == 0  # the fresh archive is a use
    assert_no_manifest_without_archive(store._s3, store.bucket)
    assert restore_as(store, node_b, clock, log).status == "restored"


@pytest.mark.parametrize("active", [False, True])
def test_an_archive_no_manifest_names_is_collected_and_the_named_one_stays(tmp_path, store, clock, log, active):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT))
    publish_as(store, node_a, clock, log)
    (name,) = store.list_keys(H100_KEY.manifest_prefix)
    named = store.get_json(name)["archive"]
    crashed_loser = H100_KEY.archive_key("c" * 64, "00000000deadbeef")  # a publisher that died after uploading
    store._s3.put_object(Bucket=store.bucket, Key=crashed_loser, Body=b"not referenced")
    time.sleep(2.5)
    store.put_json(H100_KEY.last_use_key, {"node": "node-a", "time": 1})  # in use: only orphans may go
    summary = run(
        _pruner(store, [H100_KEY.prefix] if active else []),
        _settings(),
        lambda: datetime.now(UTC),
        lambda r: None,
    )
    assert summary.orphans_deleted == 1
    remaining = all_keys(store._s3, store.bucket)
    assert crashed_loser not in remaining and named in remaining
    assert restore_as(store, node_b, clock, log).status == "restored"


def test_a_manifest_whose_archive_is_gone_is_removed_by_the_pruner(tmp_path, store, clock, log):
    node_a = node_layout(tmp_path, "a")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT))
    publish_as(store, node_a, clock, log)
    (name,) = store.list_keys(H100_KEY.manifest_prefix)
    pruner_deletes(store, store.get_json(name)["archive"])  # what the old pruner left behind
    time.sleep(2.5)
    store.put_json(H100_KEY.last_use_key, {"node": "node-a", "time": 1})
    summary = run(_pruner(store, [H100_KEY.prefix]), _settings(), lambda: datetime.now(UTC), lambda r: None)
    assert summary.repaired_manifests == 1
    assert all_keys(store._s3, store.bucket) == {H100_KEY.last_use_key}
