"""Restore and publish against a real S3-compatible server (SeaweedFS), with the faults that matter."""

from __future__ import annotations

import threading


from agent.compile_cache import MANIFEST_VERSION, publish, restore
from agent.s3_store import CacheStore
from tests.agent.conftest import FACTORS, H100_KEY, L40S_KEY, fill_compile_cache, node_layout, read_tree
from tests.s3_server import SeaweedS3

FINGERPRINT = FACTORS.fingerprint()
MODEL = FACTORS.model


def _publish(store, layout, clock, log, key=H100_KEY, node="node-a"):
    return publish(store=store, layout=layout, key=key, model=MODEL, fingerprint=FINGERPRINT, node=node, clock=clock, log=log)


def _restore(store, layout, clock, log, key=H100_KEY, node="node-b"):
    return restore(store=store, layout=layout, key=key, model=MODEL, fingerprint=FINGERPRINT, node=node, clock=clock, log=log)


def _objects(store: CacheStore) -> list[str]:
    listed = store._s3.list_objects_v2(Bucket=store.bucket)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def _assert_nothing_partial(layout):
    assert not layout.model_dir(MODEL, FINGERPRINT).exists()
    temp = layout.state / "tmp"
    assert not temp.exists() or list(temp.iterdir()) == []


def test_publish_on_one_node_restore_on_another_is_byte_equal(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    written = fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT))
    published = _publish(store, node_a, clock, log)
    assert published.status == "published" and published.bytes > 0
    restored = _restore(store, node_b, clock, log)
    assert restored.status == "restored"
    assert read_tree(node_b.model_dir(MODEL, FINGERPRINT)) == written
    assert node_b.origin(MODEL, FINGERPRINT)["origin"] == "restored"
    assert node_a.origin(MODEL, FINGERPRINT)["origin"] == "published"
    manifest = store.get_json(H100_KEY.manifest_key)
    assert manifest["version"] == MANIFEST_VERSION and manifest["factors"] == H100_KEY.factors
    assert manifest["archive"] == H100_KEY.archive_key(manifest["sha256"])
    assert store.get_json(H100_KEY.last_use_key)["node"] == "node-b"
    assert _objects(store) == sorted([H100_KEY.manifest_key, H100_KEY.last_use_key, manifest["archive"]])
    assert list((node_b.state / "tmp").iterdir()) == []


def test_second_publish_of_a_key_is_a_no_op(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1)
    fill_compile_cache(node_b.model_dir(MODEL, FINGERPRINT), seed=2)
    assert _publish(store, node_a, clock, log).status == "published"
    assert _publish(store, node_b, clock, log, node="node-b").status == "exists"
    assert store.get_json(H100_KEY.manifest_key)["published_by"] == "node-a"


def test_restore_leaves_an_existing_local_cache_alone(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1)
    _publish(store, node_a, clock, log)
    local = fill_compile_cache(node_b.model_dir(MODEL, FINGERPRINT), seed=2)
    assert _restore(store, node_b, clock, log).status == "present"
    assert read_tree(node_b.model_dir(MODEL, FINGERPRINT)) == local


def test_missing_key_is_a_miss_and_writes_nothing(tmp_path, store, clock, log):
    layout = node_layout(tmp_path, "b")
    outcome = _restore(store, layout, clock, log)
    assert outcome.status == "miss"
    _assert_nothing_partial(layout)


def test_key_of_another_gpu_type_is_never_restored(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT))
    _publish(store, node_a, clock, log, key=H100_KEY)
    assert L40S_KEY.prefix != H100_KEY.prefix
    assert _restore(store, node_b, clock, log, key=L40S_KEY).status == "miss"
    _assert_nothing_partial(node_b)


def test_manifest_copied_under_another_key_is_refused(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT))
    _publish(store, node_a, clock, log, key=H100_KEY)
    store.put_json(L40S_KEY.manifest_key, store.get_json(H100_KEY.manifest_key))
    outcome = _restore(store, node_b, clock, log, key=L40S_KEY)
    assert outcome.status == "failed" and "another configuration" in outcome.reason
    _assert_nothing_partial(node_b)


def _published_archive(store, tmp_path, clock, log) -> tuple[str, bytes]:
    node_a = node_layout(tmp_path, "a")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), large_bytes=200_000)
    _publish(store, node_a, clock, log)
    archive = store.get_json(H100_KEY.manifest_key)["archive"]
    return archive, store._s3.get_object(Bucket=store.bucket, Key=archive)["Body"].read()


def test_truncated_archive_is_never_used(tmp_path, store, clock, log):
    archive, content = _published_archive(store, tmp_path, clock, log)
    store._s3.put_object(Bucket=store.bucket, Key=archive, Body=content[: len(content) // 2])
    layout = node_layout(tmp_path, "b")
    outcome = _restore(store, layout, clock, log)
    assert outcome.status == "failed"
    _assert_nothing_partial(layout)


def test_tampered_archive_is_never_used(tmp_path, store, clock, log):
    archive, content = _published_archive(store, tmp_path, clock, log)
    tampered = bytearray(content)
    tampered[len(tampered) // 2] ^= 0xFF
    store._s3.put_object(Bucket=store.bucket, Key=archive, Body=bytes(tampered))
    layout = node_layout(tmp_path, "b")
    outcome = _restore(store, layout, clock, log)
    assert outcome.status == "failed" and "checksum mismatch" in outcome.reason
    _assert_nothing_partial(layout)


def test_unreachable_server_fails_cleanly(tmp_path, clock, log):
    dead = CacheStore(SeaweedS3(tmp_path / "never-started").client(), "no-bucket")
    layout = node_layout(tmp_path, "b")
    outcome = _restore(dead, layout, clock, log)
    assert outcome.status == "failed" and "manifest unreadable" in outcome.reason
    _assert_nothing_partial(layout)


def test_server_stopped_mid_download_leaves_nothing(tmp_path, clock, log):
    server = SeaweedS3(tmp_path / "doomed").start()
    try:
        bucket = server.new_bucket()
        node_a = node_layout(tmp_path, "a")
        fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), large_bytes=24 * 2**20)
        store = CacheStore(server.client(), bucket, part_bytes=5 * 2**20, threads=1)
        assert _publish(store, node_a, clock, log).status == "published"

        class DyingServerStore(CacheStore):
            def download(self, key, destination, size, on_part=None):
                return super().download(key, destination, size, on_part=lambda _: server.kill())

        layout = node_layout(tmp_path, "b")
        outcome = _restore(DyingServerStore(server.client(), bucket, part_bytes=5 * 2**20, threads=1), layout, clock, log)
        assert outcome.status == "failed"
        _assert_nothing_partial(layout)
    finally:
        server.stop()


def test_disk_full_during_restore_leaves_nothing(tmp_path, store, clock, log, small_disk):
    node_a = node_layout(tmp_path, "a")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), large_bytes=6 * 2**20)  # larger than the disk
    assert _publish(store, node_a, clock, log).status == "published"
    from agent.layout import NodeCacheLayout

    layout = NodeCacheLayout(small_disk / "compile-cache")
    outcome = _restore(store, layout, clock, log)
    assert outcome.status == "failed" and "No space left" in outcome.reason
    _assert_nothing_partial(layout)


def test_two_publishers_racing_leave_one_consistent_cache(tmp_path, store, clock, log):
    node_a, node_b, node_c = (node_layout(tmp_path, n) for n in "abc")
    trees = {
        "node-a": fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1),
        "node-b": fill_compile_cache(node_b.model_dir(MODEL, FINGERPRINT), seed=2),
    }
    both_uploaded = threading.Barrier(2, timeout=30)

    class LockstepStore(CacheStore):
        def upload_file(self, path, key):
            super().upload_file(path, key)
            both_uploaded.wait()  # both archives are up before either writes its manifest

    racing = LockstepStore(store._s3, store.bucket, part_bytes=store.part_bytes, threads=store.threads)
    results = {}

    def run(node, layout):
        results[node] = publish(store=racing, layout=layout, key=H100_KEY, model=MODEL, fingerprint=FINGERPRINT,
                                node=node, clock=clock, log=log)

    threads = [threading.Thread(target=run, args=args) for args in (("node-a", node_a), ("node-b", node_b))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.status for r in results.values()) == ["lost-race", "published"]
    winner = store.get_json(H100_KEY.manifest_key)["published_by"]
    assert results[winner].status == "published"
    archives = [k for k in _objects(store) if "/archive-" in k]
    assert archives == [store.get_json(H100_KEY.manifest_key)["archive"]]  # the loser removed its own
    assert _restore(store, node_c, clock, log, node="node-c").status == "restored"
    assert read_tree(node_c.model_dir(MODEL, FINGERPRINT)) == trees[winner]


def test_publish_of_an_empty_folder_uploads_nothing(tmp_path, store, clock, log):
    layout = node_layout(tmp_path, "a")
    layout.model_dir(MODEL, FINGERPRINT).mkdir(parents=True)
    assert _publish(store, layout, clock, log).status == "empty"
    assert _objects(store) == []


def test_read_only_credentials_cannot_publish(tmp_path, s3_server, bucket, clock, log):
    layout = node_layout(tmp_path, "a")
    fill_compile_cache(layout.model_dir(MODEL, FINGERPRINT))
    reader = CacheStore(s3_server.client(reader=True), bucket)
    outcome = _publish(reader, layout, clock, log)
    assert outcome.status == "failed" and "AccessDenied" in outcome.reason
    assert layout.origin(MODEL, FINGERPRINT) is None  # it will try again later
