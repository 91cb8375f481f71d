"""Restore and publish against a real S3-compatible server (SeaweedFS), with the faults that matter."""

from __future__ import annotations

import json
import threading

import pytest

from node_agent.runtime.archive import REDACTED
from node_agent.runtime.compile_cache import needs_publish, publish
from node_agent.runtime.compile_manifest import MANIFEST_VERSION, local_hash_dirs
from node_agent.runtime.s3.compile_store import CacheStore
from tests.agent.compile_world import (
    FINGERPRINT,
    H100_KEY,
    L40S_KEY,
    MODEL,
    fill_compile_cache,
    node_layout,
    pruner_deletes,
    publish_as,
    read_tree,
    restore_as,
)
from tests.s3_server import SeaweedS3

_publish, _restore = publish_as, restore_as


def _manifests(store: CacheStore, key=H100_KEY) -> list[dict | None]:
    return [store.get_json(name) for name in store.list_keys(key.manifest_prefix)]


def _manifest(store: CacheStore, key=H100_KEY) -> dict:
    (manifest,) = _manifests(store, key)
    assert manifest is not None
    return manifest


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
    manifest = _manifest(store)
    assert manifest["version"] == MANIFEST_VERSION and manifest["factors"] == H100_KEY.factors
    assert H100_KEY.names_archive(manifest["archive"], manifest["sha256"])
    assert manifest["hash_dirs"] == ["torch_compile_cache/00000001"]
    assert store.get_json(H100_KEY.last_use_key)["node"] == "node-b"
    manifest_name = H100_KEY.manifest_key(manifest["hash_dirs"])
    assert _objects(store) == sorted([manifest_name, H100_KEY.last_use_key, manifest["archive"]])
    assert list((node_b.state / "tmp").iterdir()) == []


def test_second_publish_of_a_key_is_a_no_op(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1)
    fill_compile_cache(node_b.model_dir(MODEL, FINGERPRINT), seed=2, vllm_hash=1)
    assert _publish(store, node_a, clock, log).status == "published"
    assert _publish(store, node_b, clock, log, node="node-b").status == "exists"
    assert _manifest(store)["published_by"] == "node-a"


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
    copied = _manifest(store)
    store.put_json(L40S_KEY.manifest_key(copied["hash_dirs"], copied["content"]), copied)
    outcome = _restore(store, node_b, clock, log, key=L40S_KEY)
    assert outcome.status == "miss" and log.counters["manifest-refused"] == 1  # never used, and said why
    _assert_nothing_partial(node_b)


def _published_archive(store, tmp_path, clock, log) -> tuple[str, bytes]:
    node_a = node_layout(tmp_path, "a")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), large_bytes=200_000)
    _publish(store, node_a, clock, log)
    archive = _manifest(store)["archive"]
    return archive, store._s3.get_object(Bucket=store.bucket, Key=archive)["Body"].read()


def test_truncated_archive_is_never_used(tmp_path, store, clock, log):
    archive, content = _published_archive(store, tmp_path, clock, log)
    store._s3.put_object(Bucket=store.bucket, Key=archive, Body=content[: len(content) // 2])
    layout = node_layout(tmp_path, "b")
    outcome = _restore(store, layout, clock, log)
    # Refused on its size before a byte is unpacked.
    assert outcome.status == "failed" and f"not the {len(content)} its manifest says" in outcome.reason
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
    assert outcome.status == "failed" and "manifests unreadable" in outcome.reason
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
            def download(self, key, destination, size, on_part=None, digest=None):
                return super().download(key, destination, size, on_part=lambda _: server.kill(), digest=digest)

        layout = node_layout(tmp_path, "b")
        outcome = _restore(
            DyingServerStore(server.client(), bucket, part_bytes=5 * 2**20, threads=1), layout, clock, log
        )
        assert outcome.status == "failed"
        _assert_nothing_partial(layout)
    finally:
        server.stop()


def test_disk_full_during_restore_leaves_nothing(tmp_path, store, clock, log, small_disk):
    node_a = node_layout(tmp_path, "a")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), large_bytes=6 * 2**20)  # larger than the disk
    assert _publish(store, node_a, clock, log).status == "published"
    from node_agent.runtime.layout import NodeCacheLayout

    layout = NodeCacheLayout(small_disk / "compile-cache")
    outcome = _restore(store, layout, clock, log)
    assert outcome.status == "failed" and "No space left" in outcome.reason
    _assert_nothing_partial(layout)


def test_two_publishers_racing_leave_one_consistent_cache(tmp_path, store, clock, log):
    node_a, node_b, node_c = (node_layout(tmp_path, n) for n in "abc")
    trees = {
        "node-a": fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1),
        "node-b": fill_compile_cache(node_b.model_dir(MODEL, FINGERPRINT), seed=2, vllm_hash=1),
    }
    both_uploaded = threading.Barrier(2, timeout=30)

    class LockstepStore(CacheStore):
        def upload_file_if_absent(self, path, key):
            uploaded = super().upload_file_if_absent(path, key)
            both_uploaded.wait()  # both archives are up before either writes its manifest
            return uploaded

    racing = LockstepStore(store._s3, store.bucket, part_bytes=store.part_bytes, threads=store.threads)
    results = {}

    def run(node, layout):
        results[node] = publish(
            store=racing,
            layout=layout,
            key=H100_KEY,
            model=MODEL,
            fingerprint=FINGERPRINT,
            node=node,
            clock=clock,
            log=log,
        )

    threads = [threading.Thread(target=run, args=args) for args in (("node-a", node_a), ("node-b", node_b))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.status for r in results.values()) == ["lost-race", "published"]
    winner = _manifest(store)["published_by"]
    assert results[winner].status == "published"
    archives = [k for k in _objects(store) if "/archive-" in k]
    # Nodes never delete: the loser's archive stays for the pruner to collect as unnamed.
    assert len(archives) == 2 and _manifest(store)["archive"] in archives
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


# ---- manifests that name a missing archive: never left behind, repaired when found ----


def test_a_manifest_whose_archive_is_gone_is_a_miss_until_the_pruner_removes_it(tmp_path, store, clock, log):
    node_a, node_b, node_c = (node_layout(tmp_path, n) for n in "abc")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT))
    _publish(store, node_a, clock, log)
    manifest = _manifest(store)
    pruner_deletes(store, manifest["archive"])  # what an old pruner bug left behind
    outcome = _restore(store, node_b, clock, log)
    assert outcome.status == "miss" and "gone" in outcome.reason  # a miss, never a failure forever
    _assert_nothing_partial(node_b)
    fill_compile_cache(node_b.model_dir(MODEL, FINGERPRINT), seed=1)
    # Nodes never overwrite a manifest: B's goes beside the broken one, under its files' digest.
    assert _publish(store, node_b, clock, log, node="node-b").status == "republished"
    assert H100_KEY.manifest_key(manifest["hash_dirs"]) in store.list_keys(H100_KEY.manifest_prefix)
    assert _restore(store, node_c, clock, log, node="node-c").status == "restored"  # past the broken one
    node_d = node_layout(tmp_path, "d")
    fill_compile_cache(node_d.model_dir(MODEL, FINGERPRINT), seed=1)
    blocked = _publish(store, node_d, clock, log, node="node-d")
    assert blocked.status == "exists"  # B's covers it


def test_an_archive_removed_between_upload_and_manifest_is_put_back(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT))

    class PrunedMeanwhile(CacheStore):
        def put_json_if_absent(self, key, document):
            pruner_deletes(self, document["archive"])  # a pruner run between the two writes
            return super().put_json_if_absent(key, document)

    racing = PrunedMeanwhile(store._s3, store.bucket, part_bytes=store.part_bytes, threads=store.threads)
    assert _publish(racing, node_a, clock, log).status == "published"
    assert log.counters["archive-restored-after-manifest"] == 1
    assert _restore(store, node_b, clock, log).status == "restored"


def test_a_node_with_more_hash_folders_adds_a_manifest_and_restores_take_the_largest(tmp_path, store, clock, log):
    node_a, node_b, node_c = (node_layout(tmp_path, n) for n in "abc")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1)
    _publish(store, node_a, clock, log)
    assert _restore(store, node_b, clock, log).status == "restored"
    fill_compile_cache(node_b.model_dir(MODEL, FINGERPRINT), seed=2)  # vLLM computed another hash here
    assert _publish(store, node_b, clock, log, node="node-b").status == "republished"
    assert sorted(len(m["hash_dirs"]) for m in _manifests(store)) == [1, 2]  # added, nothing replaced
    assert _publish(store, node_a, clock, log).status == "exists"  # covered by the larger one
    assert _restore(store, node_c, clock, log, node="node-c").status == "restored"
    assert local_hash_dirs(node_c, MODEL, FINGERPRINT) == [
        "torch_compile_cache/00000001",
        "torch_compile_cache/00000002",
    ]


def test_node_specific_files_stay_home_and_secrets_are_redacted(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    folder = node_a.model_dir(MODEL, FINGERPRINT)
    fill_compile_cache(folder)
    (folder / "vllm" / "gpu_p2p_access_cache_for_0,1.json").write_text('{"0->1": true}')
    factors = folder / "vllm" / "torch_compile_cache" / "00000001" / "rank_0_0" / "backbone" / "cache_key_factors.json"
    factors.write_text('{"config_hash": "abc", "env": {"VLLM_API_KEY": "sk-live-123", "VLLM_USE_V1": "1"}}')
    _publish(store, node_a, clock, log)
    _restore(store, node_b, clock, log)
    restored = node_b.model_dir(MODEL, FINGERPRINT) / "vllm"
    assert not (restored / "gpu_p2p_access_cache_for_0,1.json").exists()
    record = json.loads((restored / factors.relative_to(folder / "vllm")).read_text())
    assert record == {"config_hash": "abc", "env": {"VLLM_API_KEY": REDACTED, "VLLM_USE_V1": "1"}}


class WithoutListBucket:
    """A client as S3 answers a caller without s3:ListBucket for the request: a missing key is 403, not 404
    (S3 API reference, GetObject/HeadObject "Permissions"). Listings, which carry s3:prefix, are allowed."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        method = getattr(self._client, name)
        if name not in ("get_object", "head_object", "delete_object"):
            return method

        def denied_instead_of_missing(**kwargs):
            from botocore.exceptions import ClientError

            try:
                return method(**kwargs)
            except ClientError as error:
                if error.response["Error"]["Code"] in (
                    "404",
                    "NoSuchKey",
                    "NotFound",
                    "PreconditionFailed",
                ) and not self._client.list_objects_v2(Bucket=kwargs["Bucket"], Prefix=kwargs["Key"]).get("Contents"):
                    raise ClientError(
                        {
                            "Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                            "ResponseMetadata": {"HTTPStatusCode": 403},
                        },
                        name,
                    ) from error
                raise

        return denied_instead_of_missing


def test_a_missing_key_answered_403_is_still_a_miss(tmp_path, store, clock, log):
    denied = CacheStore(WithoutListBucket(store._s3), store.bucket, part_bytes=store.part_bytes, threads=store.threads)
    node_a, node_b, node_c = (node_layout(tmp_path, n) for n in "abc")
    assert _restore(denied, node_b, clock, log).status == "miss"  # no manifest yet: a miss, not a failure
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT))
    assert _publish(denied, node_a, clock, log).status == "published"
    pruner_deletes(store, _manifest(store)["archive"])
    outcome = _restore(denied, node_c, clock, log, node="node-c")
    assert outcome.status == "miss" and "gone" in outcome.reason


def test_a_real_denial_is_not_taken_for_a_missing_key(s3_server, bucket):
    from botocore.exceptions import ClientError

    store = CacheStore(s3_server.client(), bucket)
    name = H100_KEY.manifest_key(["x"])
    store.put_json(name, {"version": 2})
    reader = CacheStore(s3_server.client(reader=True), bucket)  # may read and list, not write
    with pytest.raises(ClientError, match="AccessDenied"):
        reader.put_json_if_absent(H100_KEY.manifest_key(["y"]), {"version": 2})  # denied, not "someone was first"
    assert store.get_json(name) == {"version": 2}


def test_an_unpacked_member_is_written_in_large_writes(tmp_path, monkeypatch):
    """tarfile copies a member 16 KiB at a time by default (64 write calls per MiB of a compiled kernel); the
    unpacker asks for 1 MiB copies, and the files still come out byte-equal."""
    import tarfile

    from node_agent.runtime import archive

    source = tmp_path / "cache"
    (source / "inductor").mkdir(parents=True)
    payload = bytes(range(256)) * (3 * 2**12 + 7)  # 3 MiB and a bit
    (source / "inductor" / "kernel.bin").write_bytes(payload)
    packed = archive.pack(source, tmp_path / "cache.tar.zst")
    copies = []
    real_copy = tarfile.copyfileobj

    def recording_copy(src, dst, length=None, exception=OSError, bufsize=None):
        copies.append(bufsize)
        return real_copy(src, dst, length, exception, bufsize)

    monkeypatch.setattr(tarfile, "copyfileobj", recording_copy)
    assert archive.unpack(packed.path, tmp_path / "out") == 1
    assert (tmp_path / "out" / "inductor" / "kernel.bin").read_bytes() == payload
    assert copies == [archive.COPY_BYTES] and archive.COPY_BYTES >= 2**20


def test_an_unpacked_archive_is_synced_through_a_descriptor_opened_before_its_first_write(tmp_path, monkeypatch):
    """syncfs reports a writeback error recorded since its descriptor was opened: one opened after the writes would
    miss an error another process's sync saw first (docs/upstream-facts.md)."""
    import os
    import tarfile

    from node_agent.runtime import archive

    source = tmp_path / "cache"
    (source / "inductor").mkdir(parents=True)
    (source / "inductor" / "kernel.bin").write_bytes(b"k" * 5000)
    packed = archive.pack(source, tmp_path / "cache.tar.zst")
    open_at_first_write, synced = [], []
    real_copy = tarfile.copyfileobj

    def recording_copy(*args, **kwargs):
        if not open_at_first_write:
            for name in os.listdir("/proc/self/fd"):
                try:
                    open_at_first_write.append((name, os.readlink(f"/proc/self/fd/{name}")))
                except OSError:  # the listing's own descriptor, closed by now
                    pass
        return real_copy(*args, **kwargs)

    def syncfs(descriptor):
        synced.append((str(descriptor), os.readlink(f"/proc/self/fd/{descriptor}")))

    monkeypatch.setattr(tarfile, "copyfileobj", recording_copy)
    monkeypatch.setattr(archive, "syncfs", syncfs)
    assert archive.unpack(packed.path, tmp_path / "out") == 1
    assert synced == [(synced[0][0], str(tmp_path / "out"))] and synced[0] in open_at_first_write


def test_an_unpack_whose_sync_fails_raises(tmp_path, monkeypatch):
    from node_agent.runtime import archive

    source = tmp_path / "cache"
    source.mkdir()
    (source / "kernel.bin").write_bytes(b"k")
    packed = archive.pack(source, tmp_path / "cache.tar.zst")

    def failing(descriptor):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(archive, "syncfs", failing)
    with pytest.raises(OSError, match="Input/output error"):
        archive.unpack(packed.path, tmp_path / "out")


@pytest.mark.parametrize("flipped_at", [0.1, 0.5, 0.95])
def test_a_tampered_archive_fetched_in_ranges_is_never_used(tmp_path, s3_server, bucket, clock, log, flipped_at):
    """An archive larger than a part is fetched in parallel ranges and hashed in order as they land: one flipped
    byte anywhere is a checksum mismatch, and nothing is left behind."""
    store = CacheStore(s3_server.client(), bucket, part_bytes=5 * 2**20, threads=4)
    node_a = node_layout(tmp_path, "a")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), large_bytes=6 * 2**20)
    assert _publish(store, node_a, clock, log).status == "published"
    archive = _manifest(store)["archive"]
    content = bytearray(store._s3.get_object(Bucket=store.bucket, Key=archive)["Body"].read())
    assert len(content) > 4 * 2**20  # several of the ranges below
    content[int(len(content) * flipped_at)] ^= 0xFF
    store._s3.put_object(Bucket=store.bucket, Key=archive, Body=bytes(content))
    ranged = CacheStore(s3_server.client(), bucket, part_bytes=2**20, threads=4)
    layout = node_layout(tmp_path, "b")
    outcome = _restore(ranged, layout, clock, log)
    assert outcome.status == "failed" and "checksum mismatch" in outcome.reason
    _assert_nothing_partial(layout)


# ---- archives that become complete: files, not folder names ----


def _add_files(folder, *names: str) -> None:
    for name in names:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode() * 10)


def test_an_archive_taken_before_vllm_finished_is_followed_by_a_fuller_one(tmp_path, store, clock, log):
    """vLLM may write into its folder after the pod is Ready: the same hash folders with more files are worth a
    new manifest, which restores then prefer; the node does not publish again while nothing is added."""
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    folder = node_a.model_dir(MODEL, FINGERPRINT)
    fill_compile_cache(folder, seed=1)
    assert _publish(store, node_a, clock, log).status == "published"
    assert not needs_publish(node_a, MODEL, FINGERPRINT, max_files=1000)
    _add_files(folder, "vllm/torch_compile_cache/00000001/rank_1_0/backbone/computation_graph.py", "inductor/z/k.py")
    assert needs_publish(node_a, MODEL, FINGERPRINT, max_files=1000)
    assert _publish(store, node_a, clock, log).status == "republished"
    assert not needs_publish(node_a, MODEL, FINGERPRINT, max_files=1000)
    assert sorted(m["files"] for m in _manifests(store)) == [5, 7]  # added beside the first, nothing replaced
    assert _restore(store, node_b, clock, log, node="node-b").status == "restored"
    assert read_tree(node_b.model_dir(MODEL, FINGERPRINT)) == read_tree(folder)
    assert node_b.origin(MODEL, FINGERPRINT)["files"] == 7


def test_a_restored_node_that_compiled_what_the_archive_lacked_contributes_it(tmp_path, store, clock, log):
    node_a, node_b, node_c = (node_layout(tmp_path, n) for n in "abc")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1)
    _publish(store, node_a, clock, log)
    assert _restore(store, node_b, clock, log, node="node-b").status == "restored"
    assert not needs_publish(node_b, MODEL, FINGERPRINT, max_files=1000)  # restored as published: nothing to add
    # vLLM compiled it here, into the hash folder (its Inductor cache lives there from 0.21.0 on)
    _add_files(node_b.model_dir(MODEL, FINGERPRINT), "vllm/torch_compile_cache/00000001/inductor_cache/aq/entry")
    assert needs_publish(node_b, MODEL, FINGERPRINT, max_files=1000)
    assert _publish(store, node_b, clock, log, node="node-b").status == "republished"
    assert _publish(store, node_a, clock, log).status == "exists"  # covered: same folders, more files
    assert _restore(store, node_c, clock, log, node="node-c").status == "restored"
    assert (node_c.model_dir(MODEL, FINGERPRINT) / "vllm/torch_compile_cache/00000001/inductor_cache/aq/entry").exists()


def test_a_node_with_fewer_files_never_publishes_over_a_fuller_archive(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1)
    _add_files(node_a.model_dir(MODEL, FINGERPRINT), "vllm/torch_compile_cache/00000001/rank_1_0/extra.py")
    _publish(store, node_a, clock, log)
    fill_compile_cache(node_b.model_dir(MODEL, FINGERPRINT), seed=1)  # the same folders, one file less
    assert _publish(store, node_b, clock, log, node="node-b").status == "exists"
    assert len(_manifests(store)) == 1


def test_a_manifest_with_a_malformed_file_digest_is_refused(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1)
    _publish(store, node_a, clock, log)
    (name,) = store.list_keys(H100_KEY.manifest_prefix)
    forged = {**store.get_json(name), "content": "../../etc"}
    pruner_deletes(store, name)
    store.put_json(H100_KEY.manifest_key(forged["hash_dirs"], forged["content"]), forged)
    assert _restore(store, node_b, clock, log, node="node-b").status == "miss"
    assert any(e.get("reason") == "manifest has no valid file digest" for e in log.events)


def test_files_outside_the_hash_folders_make_no_archive_fuller(tmp_path, store, clock, log):
    """Triton's cache and the engine's kernel caches grow with traffic: they travel in the archives, but a node
    whose only new files are in caches the archive holds publishes nothing (an upload per new kernel would never
    end). A cache the archive lacks altogether (DeepGEMM's kernels, JIT-compiled on this node) is worth one fuller
    archive, which restores then take, and the next node has the kernels."""
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    folder = node_a.model_dir(MODEL, FINGERPRINT)
    fill_compile_cache(folder, seed=1)
    _publish(store, node_a, clock, log)
    _add_files(folder, "triton/NEW/kernel.json", "inductor/fx/zz/new.py")
    assert not needs_publish(node_a, MODEL, FINGERPRINT, max_files=1000)
    _add_files(folder, "vllm/deep_gemm/cache/kernel.so")
    assert needs_publish(node_a, MODEL, FINGERPRINT, max_files=1000)
    assert _publish(store, node_a, clock, log).status == "republished"
    assert sorted(m["engine_caches"] for m in _manifests(store)) == [
        ["deep_gemm", "inductor", "triton"],
        ["inductor", "triton"],
    ]
    _add_files(folder, "vllm/deep_gemm/cache/another.so")
    assert not needs_publish(node_a, MODEL, FINGERPRINT, max_files=1000)
    assert _restore(store, node_b, clock, log, node="node-b").status == "restored"
    assert (node_b.model_dir(MODEL, FINGERPRINT) / "vllm/deep_gemm/cache/kernel.so").exists()
    assert node_b.origin(MODEL, FINGERPRINT)["engine_caches"] == ["deep_gemm", "inductor", "triton"]
    assert not needs_publish(node_b, MODEL, FINGERPRINT, max_files=1000)


def test_a_node_restored_from_an_archive_of_before_the_engine_caches_publishes_them_once(tmp_path, store, clock, log):
    """An archive published before manifests named the engine's caches (an agent upgrade): the first node that
    has them publishes a fuller archive; the others find it covers theirs."""
    node_a, node_b, node_c = (node_layout(tmp_path, n) for n in "abc")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1)
    _publish(store, node_a, clock, log)
    (name,) = store.list_keys(H100_KEY.manifest_prefix)
    old = {k: v for k, v in store.get_json(name).items() if k != "engine_caches"}
    pruner_deletes(store, name)
    store.put_json(name, old)
    for name_, node in (("node-b", node_b), ("node-c", node_c)):
        assert _restore(store, node, clock, log, node=name_).status == "restored"
        _add_files(node.model_dir(MODEL, FINGERPRINT), "vllm/startup_plan/startup_plan_0123456789abcdef.json")
        assert needs_publish(node, MODEL, FINGERPRINT, max_files=1000)
    assert _publish(store, node_b, clock, log, node="node-b").status == "republished"
    assert _publish(store, node_c, clock, log, node="node-c").status == "exists"
    assert not needs_publish(node_c, MODEL, FINGERPRINT, max_files=1000)


def test_a_manifest_that_claims_engine_caches_its_archive_lacks_is_refused(tmp_path, store, clock, log):
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    fill_compile_cache(node_a.model_dir(MODEL, FINGERPRINT), seed=1)
    _publish(store, node_a, clock, log)
    (name,) = store.list_keys(H100_KEY.manifest_prefix)
    claimed = {**store.get_json(name), "engine_caches": ["deep_gemm", "inductor", "startup_plan", "triton"]}
    pruner_deletes(store, name)
    store.put_json(name, claimed)
    assert _restore(store, node_b, clock, log, node="node-b").status == "failed"
    assert [e["reason"] for e in log.events if e["event"] == "archive-rejected"] == [
        "the archive's engine caches are not those its manifest names"
    ]


def test_an_archive_that_does_not_hold_what_its_manifest_says_is_skipped_for_the_next(tmp_path, store, clock, log):
    """A manifest's file count decides which archive restores take first: one that claims more than its archive
    holds is refused after the download, and the next manifest restores."""
    node_a, node_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")
    folder = node_a.model_dir(MODEL, FINGERPRINT)
    fill_compile_cache(folder, seed=1)
    _publish(store, node_a, clock, log)
    (genuine,) = _manifests(store)
    claimed = {**genuine, "files": genuine["files"] + 50, "counts": {d: n + 50 for d, n in genuine["counts"].items()}}
    claimed["content"] = "f" * 16
    store.put_json(H100_KEY.manifest_key(claimed["hash_dirs"], claimed["content"]), claimed)
    assert _restore(store, node_b, clock, log, node="node-b").status == "restored"
    assert [e["reason"] for e in log.events if e["event"] == "archive-rejected"] == [
        f"the archive holds {genuine['files']} files, not the {genuine['files'] + 50} its manifest names"
    ]
    assert read_tree(node_b.model_dir(MODEL, FINGERPRINT)) == read_tree(folder)
