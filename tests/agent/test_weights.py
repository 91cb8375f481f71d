"""Weights cache against a real S3-compatible server (SeaweedFS): complete or absent, updates detected."""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import random
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig

from node_agent.runtime import direct_io as direct_io_module
from node_agent.runtime import weights as weights_module
from node_agent.runtime.direct_io import (
    DIRECT_ALIGN,
    WRITE_SLICE_BYTES,
    FileWriter,
    direct_alignment,
    open_direct,
    write_from_slices,
    write_slices,
)
from node_agent.runtime.fs import DirectIoAlignment
from node_agent.runtime.s3.checksums import Unverifiable
from node_agent.runtime.s3.compile_store import CacheStore
from node_agent.runtime.s3.weights_download import WeightsSource
from node_agent.runtime.weights import NodeCopies, WeightsLayout, weights_key
from tests.agent.weights_world import (
    MODEL,
    PREFIX,
    S3_URI,
    _cache_in_boot,
    _published_never_synced,
    never_in_use,
    upload_model,
)
from tests.s3_server import SeaweedS3


def read_tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def download_copy(tmp_path: Path, client, bucket: str, *, part_bytes: int, threads: int) -> tuple[Path, int]:
    """The model's prefix downloaded by a WeightsSource (1 MiB buffers) into a new folder `copy`: the folder, and
    the bytes that went through the page cache."""
    source = WeightsSource(client, bucket, part_bytes=part_bytes, threads=threads, buffer_bytes=2**20)
    destination = tmp_path / "copy"
    destination.mkdir()
    return destination, source.download_all(source.list(PREFIX), destination, PREFIX)


def make_cache(root: Path, client, bucket, clock, log, **kwargs) -> NodeCopies:
    source = WeightsSource(client, bucket, part_bytes=4 * 2**20, threads=4, buffer_bytes=2**20)
    return NodeCopies(source=source, layout=WeightsLayout(root), clock=clock, log=log, reserve_bytes=0, **kwargs)


def assert_nothing_partial(cache: NodeCopies, key: str | None = None):
    layout = cache.layout
    assert not layout.temp_root().exists() or list(layout.temp_root().iterdir()) == []
    if key:
        assert not layout.complete_marker(MODEL, key).exists()
    assert layout.read_pointer(MODEL) is None


def test_prefix_is_downloaded_byte_equal_and_marked_complete(tmp_path, s3_server, model_bucket, clock, log):
    bucket, files = model_bucket
    cache = make_cache(tmp_path / "weights", s3_server.client(), bucket, clock, log)
    outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert outcome.status == "downloaded" and outcome.bytes == sum(len(d) for d in files.values())
    assert read_tree(cache.layout.key_dir(MODEL, outcome.key)) == files
    # The sync's event says how much went through the page cache: the small files and the large ones' tails here.
    (event,) = [e for e in log.events if e["event"] == "weights-sync"]
    small = sum(len(d) for d in files.values() if len(d) < DIRECT_ALIGN)
    assert small <= event["page_cache_bytes"] < small + len(files) * DIRECT_ALIGN
    marker = json.loads(cache.layout.complete_marker(MODEL, outcome.key).read_text())
    assert marker["files"] == len(files) and marker["bytes"] == outcome.bytes
    assert cache.layout.read_pointer(MODEL) == {"key": outcome.key, "s3_uri": S3_URI, "checked_at": clock()}
    clock.advance(30)
    again = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert (again.status, again.key) == ("ready", outcome.key)
    assert cache.layout.read_pointer(MODEL)["checked_at"] == clock()  # freshness confirmed


def test_every_integrity_kind_is_recognized(s3_server, model_bucket):
    bucket, _ = model_bucket
    source = WeightsSource(s3_server.client(), bucket)
    kinds = {item.key.removeprefix(PREFIX): source._check(item).kind for item in source.list(PREFIX)}
    assert kinds["model-00001.safetensors"] == "crc"  # CRC64NVME is a full-object checksum even multipart
    assert kinds["model-00002.safetensors"] == "composite-crc"
    assert kinds["model-00003.safetensors"] == "multipart-md5"
    assert kinds["model-00004.safetensors"] == "md5"
    assert kinds["config.json"] == "crc"


def test_update_at_the_same_path_is_a_new_key_and_the_old_copy_goes_after_the_switch(
    tmp_path, s3_server, model_bucket, clock, log
):
    bucket, files = model_bucket
    client = s3_server.client()
    cache = make_cache(tmp_path / "weights", client, bucket, clock, log)
    old = cache.sync(MODEL, S3_URI, PREFIX, never_in_use).key
    client.put_object(Bucket=bucket, Key=PREFIX + "config.json", Body=b'{"architectures": ["Updated"]}')
    clock.advance(60)
    pods_on_old_copy = {(MODEL, old)}
    new = cache.sync(MODEL, S3_URI, PREFIX, lambda m, k: (m, k) in pods_on_old_copy)
    assert new.status == "downloaded" and new.key != old
    assert cache.layout.read_pointer(MODEL)["key"] == new.key
    assert read_tree(cache.layout.key_dir(MODEL, new.key))["config.json"] == b'{"architectures": ["Updated"]}'
    assert cache.evict(lambda m, k: (m, k) in pods_on_old_copy) == []  # a pod still reads the old copy
    assert cache.layout.is_complete(MODEL, old)
    pods_on_old_copy.clear()  # the Deployment rolled
    assert cache.evict(never_in_use) == [(MODEL, old)]
    assert not cache.layout.key_dir(MODEL, old).exists() and cache.layout.is_complete(MODEL, new.key)


def test_new_pods_stream_from_s3_while_the_new_copy_downloads(tmp_path, s3_server, model_bucket, clock, log):
    bucket, _ = model_bucket
    client = s3_server.client()
    seen = {}

    class Watching(WeightsSource):
        def download_all(self, items, destination, prefix, on_bytes=None, pause=None):
            seen["pointer during download"] = cache.layout.read_pointer(MODEL)
            return super().download_all(items, destination, prefix, on_bytes, pause)

    cache = make_cache(tmp_path / "weights", client, bucket, clock, log)
    cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    client.put_object(Bucket=bucket, Key=PREFIX + "extra.json", Body=b"{}")
    cache.source = Watching(client, bucket, part_bytes=4 * 2**20, threads=4)
    cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert seen["pointer during download"] is None


def test_server_stopped_mid_download_leaves_nothing(tmp_path, clock, log):
    server = SeaweedS3(tmp_path / "doomed").start()
    try:
        bucket = server.new_bucket()
        upload_model(server, bucket)

        class Dying(WeightsSource):
            def download_all(self, items, destination, prefix, on_bytes=None, pause=None):
                return super().download_all(items, destination, prefix, on_bytes=lambda n: server.kill())

        cache = make_cache(tmp_path / "weights", server.client(), bucket, clock, log)
        cache.source = Dying(server.client(), bucket, part_bytes=4 * 2**20, threads=2)
        outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
        assert outcome.status == "failed"
        assert_nothing_partial(cache, outcome.key)
        assert cache.layout.cached_keys() == []
    finally:
        server.stop()


def test_object_changed_during_the_download_is_refused(tmp_path, s3_server, model_bucket, clock, log):
    bucket, _ = model_bucket
    client = s3_server.client()
    changed = []

    class Racing(WeightsSource):
        def download_all(self, items, destination, prefix, on_bytes=None, pause=None):
            def change_once(count):
                if not changed:
                    changed.append(True)
                    client.put_object(Bucket=bucket, Key=PREFIX + "model-00001.safetensors", Body=b"replaced")

            return super().download_all(items, destination, prefix, on_bytes=change_once)

    cache = make_cache(tmp_path / "weights", client, bucket, clock, log)
    cache.source = Racing(client, bucket, part_bytes=4 * 2**20, threads=1)
    outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert outcome.status == "failed" and "ObjectChanged" in outcome.reason
    assert_nothing_partial(cache, outcome.key)


def test_disk_full_leaves_nothing(s3_server, model_bucket, clock, log, small_disk):
    bucket, _ = model_bucket
    cache = make_cache(
        small_disk / "weights", s3_server.client(), bucket, clock, log, free_bytes=lambda path: 10**12
    )  # the free-space check is fooled: the write fails for real
    outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert outcome.status == "failed" and "No space left" in outcome.reason
    assert_nothing_partial(cache, outcome.key)


def test_free_space_is_checked_before_downloading(tmp_path, s3_server, model_bucket, clock, log):
    bucket, _ = model_bucket
    cache = make_cache(tmp_path / "weights", s3_server.client(), bucket, clock, log, free_bytes=lambda path: 1000)
    outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert outcome.status == "failed" and "short after eviction" in outcome.reason
    assert cache.layout.cached_keys() == []


def test_space_is_made_by_evicting_unused_copies_least_recently_used_first(tmp_path, s3_server, clock, log):
    bucket = s3_server.new_bucket()
    client = s3_server.client()
    for name in "abcd":
        client.put_object(Bucket=bucket, Key=f"{name}/w.bin", Body=os.urandom(1000))
    root = tmp_path / "weights"
    capacity = 3500  # room for three copies of 1000 bytes
    used = lambda: sum(p.stat().st_size for p in root.rglob("*.bin"))  # noqa: E731
    cache = make_cache(root, client, bucket, clock, log, free_bytes=lambda path: capacity - used())
    for name in "abc":
        assert cache.sync(name, f"s3://{bucket}/{name}/", f"{name}/", never_in_use).status == "downloaded"
        clock.advance(10)
    for name in "ab":  # a and b leave the config (b first, so it is the least recently used)...
        cache._retire_current(name)
        clock.advance(-30 if name == "b" else 0)
    b_in_use = lambda m, k: m == "b"  # noqa: E731  ...but a pod still reads b
    assert cache.sync("d", f"s3://{bucket}/d/", "d/", b_in_use).status == "downloaded"
    assert [m for m, _ in cache.layout.cached_keys()] == ["b", "c", "d"]  # a went; b (in use) and c (current) stay


def test_truncated_folder_from_an_earlier_crash_is_never_used(tmp_path, s3_server, model_bucket, clock, log):
    bucket, files = model_bucket
    cache = make_cache(tmp_path / "weights", s3_server.client(), bucket, clock, log)
    key = weights_key(cache.source.list(PREFIX), PREFIX)
    crashed = cache.layout.key_dir(MODEL, key)
    crashed.mkdir(parents=True)
    (crashed / "model-00001.safetensors").write_bytes(b"truncated")  # renamed, but the marker was never written
    leftover = cache.layout.new_temp_dir()
    (leftover / "half.bin").write_bytes(b"x")
    cache.clean_temp()
    assert not cache.layout.is_complete(MODEL, key)
    outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert outcome.status == "downloaded"
    assert read_tree(crashed) == files


def test_empty_prefix_fails_and_retires_the_pointer(tmp_path, s3_server, model_bucket, clock, log):
    bucket, _ = model_bucket
    cache = make_cache(tmp_path / "weights", s3_server.client(), bucket, clock, log)
    cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    outcome = cache.sync(MODEL, "s3://models/nothing/", "nothing/", never_in_use)
    assert outcome.status == "failed" and cache.layout.read_pointer(MODEL) is None


class _HeadOnly:
    """S3 answers for an SSE-KMS object without checksums (SeaweedFS cannot produce one)."""

    def head_object(self, **kwargs):
        return {"ContentLength": 10, "ServerSideEncryption": "aws:kms", "ETag": '"0123456789abcdef0123456789abcdef"'}


def test_an_object_that_cannot_be_verified_is_refused():
    from node_agent.runtime.s3.weights_download import ListedObject

    source = WeightsSource(_HeadOnly(), "bucket")
    with pytest.raises(Unverifiable, match="checksum-algorithm"):
        source._check(ListedObject("m/w.bin", 10, "0123456789abcdef0123456789abcdef"))


def test_weights_key_covers_names_sizes_and_etags():
    from node_agent.runtime.s3.weights_download import ListedObject

    base = [ListedObject("p/a", 1, "e1"), ListedObject("p/b", 2, "e2")]
    assert weights_key(base, "p/") == weights_key(list(reversed(base)), "p/")
    for changed in (
        [ListedObject("p/a", 1, "e9"), base[1]],
        [ListedObject("p/a", 3, "e1"), base[1]],
        [ListedObject("p/c", 1, "e1"), base[1]],
        base[:1],
    ):
        assert weights_key(changed, "p/") != weights_key(base, "p/")
    assert weights_key(base, "p/") == weights_key([ListedObject("q/a", 1, "e1"), ListedObject("q/b", 2, "e2")], "q/")


@pytest.mark.parametrize("part_mib", [1, 4, 64])
def test_every_download_path_verifies_and_reproduces_the_bytes(tmp_path, s3_server, model_bucket, part_mib):
    """part_mib=64: every file is fetched whole (composite CRC and multipart MD5 checked from disk);
    4: large files in part-aligned ranges; 1: a single-part MD5 object larger than a range (hashed back)."""
    bucket, files = model_bucket
    destination, _ = download_copy(tmp_path, s3_server.client(), bucket, part_bytes=part_mib * 2**20, threads=3)
    assert read_tree(destination) == files


@pytest.mark.parametrize(
    "kind, upload",
    [
        ("md5", {"multipart": False}),  # one PUT, larger than a range: the whole file hashed back
        ("multipart-md5", {"multipart": True}),  # fetched whole (one range): its parts hashed back
    ],
)
def test_what_is_hashed_back_from_the_file_is_never_held_in_memory_whole(tmp_path, s3_server, kind, upload):
    """An object S3 vouches for only with an MD5 ETag is read back from the file to be verified: through a small
    buffer, so a 5 GB single-PUT object cannot take a 1 GiB agent down (it was read into one bytes object)."""
    bucket = s3_server.new_bucket()
    data = random.Random(3).randbytes(40 * 2**20 + 5)
    plain = s3_server.client(default_checksums=False)
    if upload["multipart"]:
        path = tmp_path / "upload"
        path.write_bytes(data)
        large_parts = TransferConfig(multipart_threshold=16 * 2**20, multipart_chunksize=16 * 2**20)
        plain.upload_file(str(path), bucket, PREFIX + "w.bin", Config=large_parts)
        part_bytes = 64 * 2**20  # larger than the object: fetched in one GET, its 16 MiB parts checked from disk
    else:
        plain.put_object(Bucket=bucket, Key=PREFIX + "w.bin", Body=data)
        part_bytes = 4 * 2**20
    source = WeightsSource(s3_server.client(), bucket, part_bytes=part_bytes, threads=2, buffer_bytes=2**20)
    (item,) = source.list(PREFIX)
    assert source._check(item).kind == kind
    destination = tmp_path / "out"
    destination.mkdir()
    tracemalloc.start()
    try:
        source.download_all([item], destination, PREFIX)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (destination / "w.bin").read_bytes() == data
    assert peak < 6 * 2**20, f"{peak} bytes allocated at once for a {len(data)}-byte object"


# ---- robustness: crash windows, long downloads, pauses, nodes without instance store ----


def test_a_crash_between_retiring_and_removing_the_pointer_leaves_the_copy_recorded(
    tmp_path, s3_server, model_bucket, clock, log, monkeypatch
):
    bucket, _ = model_bucket
    cache = make_cache(tmp_path / "weights", s3_server.client(), bucket, clock, log)
    key = cache.sync(MODEL, S3_URI, PREFIX, never_in_use).key
    pointer = cache.layout.pointer(MODEL)
    real_unlink = Path.unlink

    def crash(path, *args, **kwargs):
        if path == pointer:
            raise SystemExit("node lost power")
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", crash)
    with pytest.raises(SystemExit):
        cache._retire_current(MODEL)
    monkeypatch.setattr(Path, "unlink", real_unlink)
    # Never neither: the retired record is on disk, the pointer still names the copy, nothing is evictable.
    assert cache.retired_at(MODEL, key) is not None and cache.layout.read_pointer(MODEL)["key"] == key
    assert cache.evict(never_in_use) == []
    assert cache.sync(MODEL, S3_URI, PREFIX, never_in_use).status == "ready"
    assert cache.retired_at(MODEL, key) is None  # current again


def test_other_models_stay_confirmed_while_one_model_downloads_for_long(tmp_path, s3_server, model_bucket, clock, log):
    bucket, _ = model_bucket
    client = s3_server.client()
    client.put_object(Bucket=bucket, Key="small/w.bin", Body=b"w" * 1000)
    cache = make_cache(tmp_path / "weights", client, bucket, clock, log)
    assert cache.sync("small", f"s3://{bucket}/small/", "small/", never_in_use).status == "downloaded"
    release, started = threading.Event(), threading.Event()

    class Slow(WeightsSource):
        def download_all(self, items, destination, prefix, on_bytes=None, pause=None):
            started.set()
            release.wait(30)
            return super().download_all(items, destination, prefix, on_bytes, pause)

    cache.source = Slow(client, bucket, part_bytes=4 * 2**20, threads=4)
    long = threading.Thread(target=cache.sync, args=(MODEL, S3_URI, PREFIX, never_in_use))
    long.start()
    assert started.wait(30)
    clock.advance(600)  # ten minutes into the big download
    assert cache.confirm("small", f"s3://{bucket}/small/", "small/").status == "ready"
    assert cache.layout.read_pointer("small")["checked_at"] == clock()
    assert cache.confirm(MODEL, S3_URI, PREFIX).status == "busy"  # the one being filled is left alone
    release.set()
    long.join(30)
    assert cache.layout.read_pointer(MODEL) is not None


def _copy_then_s3_update(tmp_path, s3_server, model_bucket, clock, log):
    """A complete copy on the node, then a new version of the model in S3. Returns the cache and the old key."""
    bucket, _ = model_bucket
    client = s3_server.client()
    cache = make_cache(tmp_path / "weights", client, bucket, clock, log)
    old = cache.sync(MODEL, S3_URI, PREFIX, never_in_use).key
    client.put_object(Bucket=bucket, Key=PREFIX + "config.json", Body=b'{"new": true}')
    return cache, old


def test_confirm_retires_a_copy_when_s3_moved_on(tmp_path, s3_server, model_bucket, clock, log):
    cache, old = _copy_then_s3_update(tmp_path, s3_server, model_bucket, clock, log)
    assert cache.confirm(MODEL, S3_URI, PREFIX).status == "stale"
    assert cache.layout.read_pointer(MODEL) is None and cache.retired_at(MODEL, old) is not None


def test_a_paused_download_waits_and_then_completes(tmp_path, s3_server, model_bucket, clock, log, monkeypatch):
    from node_agent.runtime.s3 import weights_download

    monkeypatch.setattr(weights_download, "PAUSE_POLL_SECONDS", 0.05)
    bucket, files = model_bucket
    cache = make_cache(tmp_path / "weights", s3_server.client(), bucket, clock, log)
    paused = {"until": time.monotonic() + 1.0, "asked": 0}

    def pause():
        paused["asked"] += 1
        return time.monotonic() < paused["until"]

    started = time.monotonic()
    outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use, pause=pause)
    assert outcome.status == "downloaded" and time.monotonic() - started >= 1.0 and paused["asked"] > 10
    assert read_tree(cache.layout.key_dir(MODEL, outcome.key)) == files


def test_a_node_without_instance_store_is_not_filled(tmp_path, s3_server, model_bucket, clock, log):
    bucket, _ = model_bucket
    reason = "/mnt/k8s-disks/0/warmstart/weights is on /dev/nvme0n1p1 (xfs): no instance store"
    cache = make_cache(tmp_path / "weights", s3_server.client(), bucket, clock, log, storage_problem=lambda: reason)
    outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert (outcome.status, outcome.reason) == ("refused", reason)
    assert cache.layout.cached_keys() == [] and cache.layout.read_pointer(MODEL) is None


def test_eviction_skips_a_model_that_is_being_filled_or_confirmed(tmp_path, s3_server, model_bucket, clock, log):
    cache, old = _copy_then_s3_update(tmp_path, s3_server, model_bucket, clock, log)
    cache.sync(MODEL, S3_URI, PREFIX, never_in_use)  # the old copy is no longer current
    held = threading.Event()
    release = threading.Event()

    def hold():
        with cache._locks[MODEL]:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(30)
    assert cache.evict(never_in_use) == []  # another thread owns the model right now
    assert cache.layout.is_complete(MODEL, old)
    release.set()
    holder.join(30)
    assert cache.evict(never_in_use) == [(MODEL, old)]


def test_ranges_are_read_into_the_buffer_in_place_over_kept_connections(tmp_path, s3_server, model_bucket, monkeypatch):
    """The agent's own client, weights and compile archives alike: each range streams from the socket into the
    thread's buffer (urllib3's readinto, which copies through a new bytes object, is never called) and every
    connection goes back to the pool after its body, as urllib3's own read would do (dropping it costs a TLS
    handshake per range on S3)."""
    import urllib3.response

    def copying_readinto(self, buffer):
        raise AssertionError("urllib3's copying readinto was used")

    monkeypatch.setattr(urllib3.response.BaseHTTPResponse, "readinto", copying_readinto)
    bucket, files = model_bucket
    threads = 3
    client = s3_server.agent_client(connections=threads)
    source = WeightsSource(client, bucket, part_bytes=2**20, threads=threads, buffer_bytes=2**20)
    destination = tmp_path / "out"
    destination.mkdir()
    items = source.list(PREFIX)
    source.download_all(items, destination, PREFIX)
    assert read_tree(destination) == files
    # The compile archive's download (CacheStore) reads its ranges the same way.
    largest = max(items, key=lambda item: item.size)
    archive = tmp_path / "archive"
    CacheStore(client, bucket, part_bytes=2**20, threads=threads).download(largest.key, archive, largest.size)
    assert archive.read_bytes() == files[largest.key.removeprefix(PREFIX)]
    pools = list(client._endpoint.http_session._manager.pools._container.values())
    requests = sum(pool.num_requests for pool in pools)
    opened = sum(pool.num_connections for pool in pools)
    assert requests > len(items)  # a GET per object or range, the HEADs and the listing
    assert opened <= 2 * threads  # the HEADs' pool and the downloads' pool at most


def test_the_agents_client_leaves_times_as_s3_sent_them(s3_server, model_bucket):
    """The agent reads no time from S3: botocore's parsing of each (0.4 ms apiece, 1000 per listing page) is off."""

    bucket, _ = model_bucket
    client = s3_server.agent_client(connections=1)
    listed = client.list_objects_v2(Bucket=bucket, Prefix=PREFIX)["Contents"]
    assert all(isinstance(item["LastModified"], str) for item in listed)
    assert isinstance(client.head_object(Bucket=bucket, Key=listed[0]["Key"])["LastModified"], str)


def test_the_agents_client_looks_in_s3s_model_folder_alone(s3_server, model_bucket, monkeypatch):
    """botocore lists every service's model folder (~900 directory reads) to learn that S3 exists; the agent's
    client looks only in S3's, and still finds every model type it needs (service, paginators, waiters, endpoint
    rules: the calls below use them)."""
    import botocore.loaders

    from node_agent.runtime.s3.client import S3OnlyLoader

    listed_folders = []
    real_listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path=".": listed_folders.append(path) or real_listdir(path))
    client = s3_server.agent_client(connections=1)
    bucket, files = model_bucket
    keys = [
        item["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        for item in page["Contents"]
    ]
    client.get_waiter("object_exists").wait(Bucket=bucket, Key=keys[0])
    assert len(keys) == len(files)
    assert len(listed_folders) < 10, listed_folders
    assert all("/s3" in str(folder) for folder in listed_folders)

    # Asked as botocore asks: S3 for every type S3 has, nothing for a type it lacks, nothing else ever.
    monkeypatch.setattr(os, "listdir", real_listdir)
    ours, botocores = S3OnlyLoader(), botocore.loaders.Loader()
    for type_name in ("service-2", "paginators-1", "waiters-2", "endpoint-rule-set-1", "no-such-type-1"):
        assert ours.list_available_services(type_name) == [
            name for name in botocores.list_available_services(type_name) if name == "s3"
        ]


def test_the_agents_loader_reads_every_model_file_as_botocores_does_into_plain_dicts(tmp_path):
    """The same data, in the same order, from the same files (plain and gzipped), without the OrderedDict hook."""
    import gzip

    import botocore.loaders

    from node_agent.runtime.s3.client import PlainJSONFileLoader, S3OnlyLoader

    ours, botocores = S3OnlyLoader(), botocore.loaders.Loader()
    for name in ("endpoints", "partitions", "sdk-default-configuration", "_retry"):
        assert ours.load_data(name) == botocores.load_data(name)
        assert type(ours.load_data(name)) is dict
    for type_name in ("service-2", "paginators-1", "waiters-2", "endpoint-rule-set-1"):
        theirs = botocores.load_service_model("s3", type_name)
        mine = ours.load_service_model("s3", type_name)
        assert mine == theirs and json.dumps(mine) == json.dumps(theirs)  # the order kept too

    (tmp_path / "plain.json").write_text('{"b": 1, "a": [2]}')
    (tmp_path / "packed.json.gz").write_bytes(gzip.compress(b'{"z": {"y": null}}'))
    loader = PlainJSONFileLoader()
    assert loader.load_file(str(tmp_path / "plain")) == {"b": 1, "a": [2]}
    assert list(loader.load_file(str(tmp_path / "plain"))) == ["b", "a"]
    assert loader.load_file(str(tmp_path / "packed")) == {"z": {"y": None}}
    assert loader.load_file(str(tmp_path / "absent")) is None


def test_the_agents_client_reads_aws_data_path_as_botocore_does(monkeypatch, tmp_path):
    """A model folder given in AWS_DATA_PATH (botocore's own setting) is searched first, as botocore's loader would."""
    import botocore.session

    from node_agent.runtime.s3.client import S3OnlyLoader

    monkeypatch.setenv("AWS_DATA_PATH", f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}")
    loader = S3OnlyLoader.for_session(botocore.session.get_session())
    assert loader.search_paths[:2] == [str(tmp_path / "a"), str(tmp_path / "b")]


def test_a_streamed_archive_is_hashed_once_not_also_crcd_by_botocore(s3_server, model_bucket):
    """A compile archive is checked against its manifest's SHA-256; botocore's own CRC of every GET body (its
    default) would hash the same bytes a second time. The agent's client checks only where it asks for S3's
    checksum (ChecksumMode), which its weights downloads read themselves."""
    from botocore.httpchecksum import StreamingChecksumBody

    bucket, files = model_bucket
    client = s3_server.agent_client(connections=1)
    name, data = next(iter(files.items()))
    body = CacheStore(client, bucket).open_object(f"{PREFIX}{name}", len(data))
    with body:
        assert not isinstance(body, StreamingChecksumBody)
        assert body.read() == data


def test_a_download_hashes_its_file_in_order_while_ranges_land_out_of_order(tmp_path, s3_server, model_bucket):
    """CacheStore.download feeds the digest the file's bytes in order, each range once, whichever range lands
    first (here the first range is held back until every other one is written)."""
    import hashlib

    bucket, files = model_bucket
    name, data = max(files.items(), key=lambda item: len(item[1]))
    client = s3_server.client()
    first_range_may_go = threading.Event()
    real_get = client.get_object

    def get_object(**request):
        if request.get("Range", "").startswith("bytes=0-"):
            assert first_range_may_go.wait(30)
        return real_get(**request)

    client.get_object = get_object
    parts = []
    store = CacheStore(client, bucket, part_bytes=2**18, threads=4)
    count = -(-len(data) // store.part_bytes)
    assert count >= 4

    def on_part(length):
        parts.append(length)
        if len(parts) == count - 1:
            first_range_may_go.set()

    digest = hashlib.sha256()
    store.download(f"{PREFIX}{name}", tmp_path / "file", len(data), on_part=on_part, digest=digest)
    assert digest.hexdigest() == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "file").read_bytes() == data


def test_a_server_that_ignores_the_range_writes_nothing_past_it(tmp_path):
    """A range answered with the whole object (a server that ignores Range) is refused, and not one byte beyond
    the range reaches the file: the neighbouring range may already be there."""
    import io

    from botocore.response import StreamingBody

    from node_agent.runtime.s3.checksums import Check
    from node_agent.runtime.s3.weights_download import ListedObject

    data = bytes(range(256)) * 4096  # 1 MiB
    item = ListedObject("model/a.safetensors", len(data), "etag")

    class WholeObjectClient:
        def get_object(self, **request):
            return {"Body": StreamingBody(io.BytesIO(data), len(data))}

    source = WeightsSource(WholeObjectClient(), "bucket", part_bytes=2**18, threads=1, buffer_bytes=2**16)
    path = tmp_path / "a.safetensors"
    neighbour = b"\xff" * (len(data) - 2**18)
    path.write_bytes(bytes(2**18) + neighbour)
    writer = FileWriter(os.open(path, os.O_RDWR), open_direct(path))
    try:
        check = Check("crc", "CRC64NVME", "unused", [])
        with pytest.raises(OSError, match="more bytes than asked"):
            source._fetch((item, 0, 2**18 - 1, False), {item: check}, {item: writer}, None)
    finally:
        writer.close()
    written = path.read_bytes()
    assert written[: 2**18] == data[: 2**18] and written[2**18 :] == neighbour


def _marker(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.exists() else None


def test_a_copy_is_published_before_the_disk_has_it_and_then_marked_complete(
    tmp_path, s3_server, model_bucket, clock, log, monkeypatch
):
    bucket, files = model_bucket
    cache = _cache_in_boot(tmp_path / "weights", s3_server.client(), bucket, clock, log, "boot-a")
    opened_before_the_writes, seen_at_sync = [], []
    real_download = cache.source.download_all

    def download_all(*args, **kwargs):
        opened_before_the_writes.append(sorted(os.listdir("/proc/self/fd")))
        return real_download(*args, **kwargs)

    def syncfs(descriptor):
        layout = cache.layout
        key = layout.read_pointer(MODEL)["key"]
        seen_at_sync.append(
            (
                str(descriptor) in opened_before_the_writes[0],
                _marker(layout.published_marker(MODEL, key)),
                _marker(layout.complete_marker(MODEL, key)),
            )
        )
        clock.advance(2)  # the disk taking its time

    monkeypatch.setattr(cache.source, "download_all", download_all)
    monkeypatch.setattr(weights_module, "syncfs", syncfs)
    outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert outcome.status == "downloaded" and outcome.published_seconds == 0 and outcome.seconds == 2
    ((opened_before, published, complete),) = seen_at_sync  # one syncfs, after the copy was published
    assert opened_before  # its descriptor was open before the first byte was written
    assert published["boot_id"] == "boot-a" and complete is None
    layout = cache.layout
    final = _marker(layout.complete_marker(MODEL, outcome.key))
    assert (final["files"], final["bytes"]) == (published["files"], published["bytes"]) == (len(files), outcome.bytes)
    assert not layout.published_marker(MODEL, outcome.key).exists()
    assert read_tree(layout.key_dir(MODEL, outcome.key)) == files


def test_a_published_copy_is_trusted_in_its_own_boot_only(tmp_path, s3_server, model_bucket, clock, log, monkeypatch):
    bucket, _ = model_bucket
    root = tmp_path / "weights"
    cache, key = _published_never_synced(root, s3_server, bucket, clock, log, monkeypatch)
    assert cache.layout.is_complete(MODEL, key)  # this boot: the page cache holds every byte
    for other in ("boot-b", None):  # after a reboot, or where no boot id can be read: no copy
        assert not _cache_in_boot(root, s3_server.client(), bucket, clock, log, other).layout.is_complete(MODEL, key)


def test_a_published_copy_an_agent_never_synced_is_filled_again(
    tmp_path, s3_server, model_bucket, clock, log, monkeypatch
):
    """The agent died between publishing and its sync: no descriptor of its own saw the writes, so nothing says
    the bytes reached the disk; the copy is withdrawn and filled again, never marked complete."""
    bucket, files = model_bucket
    cache, key = _published_never_synced(tmp_path / "weights", s3_server, bucket, clock, log, monkeypatch)
    complete = cache.layout.complete_marker(MODEL, key)
    (cache.layout.key_dir(MODEL, key) / "model-00004.safetensors").write_bytes(b"\0" * 10)  # bytes a crash lost
    outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert outcome.status == "downloaded"
    assert read_tree(cache.layout.key_dir(MODEL, key)) == files and complete.exists()


def test_a_failed_sync_withdraws_the_published_copy(tmp_path, s3_server, model_bucket, clock, log, monkeypatch):
    bucket, files = model_bucket
    cache = _cache_in_boot(tmp_path / "weights", s3_server.client(), bucket, clock, log, "boot-a")

    def failing(descriptor):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(weights_module, "syncfs", failing)
    outcome = cache.sync(MODEL, S3_URI, PREFIX, never_in_use)
    assert outcome.status == "failed" and "withdrawn" in outcome.reason and outcome.published_seconds is not None
    assert not cache.layout.complete_marker(MODEL, outcome.key).exists()
    assert not cache.layout.published_marker(MODEL, outcome.key).exists()
    assert cache.layout.read_pointer(MODEL) is None
    assert cache.retired_at(MODEL, outcome.key) is not None  # recorded: a pod that chose it meanwhile is known
    monkeypatch.setattr(weights_module, "syncfs", lambda descriptor: None)
    assert cache.sync(MODEL, S3_URI, PREFIX, never_in_use).status == "downloaded"
    assert read_tree(cache.layout.key_dir(MODEL, outcome.key)) == files


def test_a_marker_left_without_its_folder_never_vouches_for_the_next_fill(
    tmp_path, s3_server, model_bucket, clock, log, monkeypatch
):
    bucket, _ = model_bucket
    cache = _cache_in_boot(tmp_path / "weights", s3_server.client(), bucket, clock, log, "boot-a")
    key = weights_key(cache.source.list(PREFIX), PREFIX)
    stale = cache.layout.complete_marker(MODEL, key)
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"key": key, "files": 1, "bytes": 1}))  # its folder deleted by hand
    at_sync = []
    monkeypatch.setattr(weights_module, "syncfs", lambda descriptor: at_sync.append(stale.exists()))
    assert cache.sync(MODEL, S3_URI, PREFIX, never_in_use).status == "downloaded"
    assert at_sync == [False]  # gone before the new, unsynced folder was in place


IDENTITY = {"config.json": [12, 1, 1_700_000_000_000_000_000, 1_700_000_000_000_000_000, 1]}


@pytest.mark.parametrize(
    "files, trusted",
    [
        ({"complete": {"files": 1, "bytes": 1, "identity": IDENTITY}}, True),  # synced
        ({"complete": {"files": 1, "bytes": 1}}, False),  # an earlier agent's: no identities, filled again
        ({"complete": {"files": 1, "bytes": 1, "identity": IDENTITY}, "published": {"boot_id": "another"}}, True),
        ({"published": {"files": 1, "bytes": 1, "boot_id": "THIS", "identity": IDENTITY}}, True),
        ({"published": {"files": 1, "bytes": 1, "boot_id": "THIS", "identity": {"../x": [1, 1, 1, 1, 1]}}}, False),
        ({"published": {"files": 1, "bytes": 1, "boot_id": "another"}}, False),
        ({"published": {"files": 1, "bytes": 1}}, False),
        ({"published": {"files": 1, "bytes": 1, "boot_id": ["THIS"]}}, False),
        ({"published": [1, 2]}, False),
        ({"complete": "not an object"}, False),
        ({}, False),
    ],
)
def test_the_agent_and_the_pods_plugin_trust_the_same_markers(tmp_path, files, trusted):
    from contracts.file_identity import identities
    from model_workload.runtime.node_copy_loader import copy_marker, current_boot_id

    this_boot = current_boot_id()
    layout = WeightsLayout(tmp_path, boot_id=this_boot)
    layout.key_dir(MODEL, "0123456789abcdef").mkdir(parents=True)
    for kind, document in files.items():
        text = json.dumps(document).replace('"THIS"', json.dumps(this_boot))
        (tmp_path / MODEL / f"0123456789abcdef.{kind}").write_text(text)
    assert layout.is_complete(MODEL, "0123456789abcdef") is trusted
    marker = copy_marker(str(layout.key_dir(MODEL, "0123456789abcdef")))
    assert (marker is not None and identities(marker) is not None) is trusted


def _is_direct(descriptor: int) -> bool:
    import fcntl

    return bool(fcntl.fcntl(descriptor, fcntl.F_GETFL) & os.O_DIRECT)


@pytest.mark.parametrize("part_bytes", [4 * 2**20, 2**20 + 100])
def test_whole_blocks_go_straight_to_the_disk_and_threads_take_the_files_in_turn(
    tmp_path, s3_server, model_bucket, monkeypatch, part_bytes
):
    """Whole blocks are written with O_DIRECT, on block boundaries and in block multiples (what the kernel requires);
    only a file's tail, a range's head up to the next boundary (ranges of an odd part size) and files smaller than a
    block go through the page cache, in slices (WRITE_SLICE_BYTES). One file's writes queue on its inode lock, so the
    first ranges started are of different files (_spread)."""
    bucket, files = model_bucket
    written, real_pwrite = [], os.pwrite

    addresses = []

    def pwrite(descriptor, data, offset):
        written.append((os.readlink(f"/proc/self/fd/{descriptor}"), _is_direct(descriptor), offset, len(data)))
        if _is_direct(descriptor):
            addresses.append(ctypes.addressof(ctypes.c_char.from_buffer(data)))
        return real_pwrite(descriptor, data, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    destination, page_cache_bytes = download_copy(
        tmp_path, s3_server.client(), bucket, part_bytes=part_bytes, threads=1
    )
    assert read_tree(destination) == files
    direct = [(offset, size) for _, is_direct, offset, size in written if is_direct]
    assert direct, "no direct write: does the test's filesystem refuse O_DIRECT?"
    assert all(offset % DIRECT_ALIGN == 0 and size % DIRECT_ALIGN == 0 for offset, size in direct)
    assert all(address % mmap.PAGESIZE == 0 for address in addresses)
    assert max(size for _, is_direct, _, size in written if not is_direct) <= WRITE_SLICE_BYTES
    # Through the page cache: at most a block's worth at each end of each range, and the files under a block.
    ranges = sum(-(-len(data) // part_bytes) for name, data in files.items() if len(data) > part_bytes)
    small = sum(len(data) for data in files.values() if len(data) <= part_bytes)
    buffered = sum(size for _, is_direct, _, size in written if not is_direct)
    assert buffered <= small + 2 * DIRECT_ALIGN * (ranges + 4)  # + 4: the multipart files' own part boundaries
    assert page_cache_bytes == buffered
    large = [Path(name).name for name, _, _, _ in written if name.endswith(".safetensors") and "00004" not in name]
    turns = [name for index, name in enumerate(large) if index == 0 or large[index - 1] != name]
    assert turns[:6] == ["model-00001.safetensors", "model-00002.safetensors", "model-00003.safetensors"] * 2


@pytest.mark.parametrize("refused_at", ["open", "write", "after a short write"])
def test_a_file_the_disk_will_not_take_directly_is_written_through_the_page_cache(
    tmp_path, s3_server, model_bucket, monkeypatch, refused_at
):
    """A filesystem that refuses O_DIRECT (EINVAL at open), a device whose blocks are larger than DIRECT_ALIGN (EINVAL
    at the first write), or one that writes part of a buffer and refuses the rest: the same bytes arrive through the
    page cache (from the buffer's start again), and the file is not asked again."""
    bucket, files = model_bucket
    real_open, real_pwrite = os.open, os.pwrite
    refused, direct_written, short = [], [], set()

    def open_(path, flags, *rest, **named):
        if refused_at == "open" and flags & os.O_DIRECT:
            refused.append(path)
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_open(path, flags, *rest, **named)

    def pwrite(descriptor, data, offset):
        if _is_direct(descriptor):
            name = os.readlink(f"/proc/self/fd/{descriptor}")
            if refused_at == "after a short write" and name not in short and len(data) > DIRECT_ALIGN:
                short.add(name)  # half a buffer written directly, then the rest (misaligned in memory) refused
                return real_pwrite(descriptor, data[: len(data) // 2], offset)
            if refused_at != "open":
                refused.append(name)
                raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
            direct_written.append(descriptor)
        return real_pwrite(descriptor, data, offset)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "pwrite", pwrite)
    destination, page_cache_bytes = download_copy(tmp_path, s3_server.client(), bucket, part_bytes=4 * 2**20, threads=4)
    assert read_tree(destination) == files
    assert direct_written == []
    # All through the page cache but what a short write put on the disk first, and written again.
    assert page_cache_bytes == sum(len(data) for data in files.values())
    # Each file of a block or more asked once, then never again (its writes take turns, so none asks twice).
    at_least_a_block = sorted(str(destination / name) for name, data in files.items() if len(data) >= DIRECT_ALIGN)
    assert sorted(str(path) for path in refused) == at_least_a_block


@pytest.mark.parametrize(
    ("reported", "expected"),
    [
        (None, DIRECT_ALIGN),  # not reported (Linux < 6.1, tmpfs): tried at 4096, a refusal falls back
        (DirectIoAlignment(offset=0, memory=0), None),  # no direct I/O for this file (ext4 data=journal)
        (DirectIoAlignment(offset=512, memory=512), DIRECT_ALIGN),  # finer than 4096: 4096 meets it
        (DirectIoAlignment(offset=8192, memory=512), 8192),
        (DirectIoAlignment(offset=512, memory=2 * mmap.PAGESIZE), None),  # more than a mapping's alignment
        (DirectIoAlignment(offset=3 * 2**20, memory=512), None),  # the buffer is no multiple of it
    ],
)
def test_direct_writes_keep_to_the_alignment_the_file_reports(reported, expected):
    assert direct_alignment(reported, 2**20) == expected


@pytest.mark.parametrize("reported", [DirectIoAlignment(offset=8192, memory=512), DirectIoAlignment(0, 0)])
def test_a_download_keeps_to_the_reported_alignment_or_asks_for_no_direct_write(
    tmp_path, s3_server, model_bucket, monkeypatch, reported
):
    """Ranges of an odd size against a filesystem asking for 8 KiB (offsets and lengths of every direct write kept to
    it), or saying it does no direct I/O for the file (O_DIRECT never asked for, every byte through the page cache)."""
    bucket, files = model_bucket
    real_open, real_pwrite = os.open, os.pwrite
    opened_direct, direct = [], []

    def open_(path, flags, *rest, **named):
        if flags & os.O_DIRECT:
            opened_direct.append(path)
        return real_open(path, flags, *rest, **named)

    def pwrite(descriptor, data, offset):
        if _is_direct(descriptor):
            direct.append((offset, len(data)))
        return real_pwrite(descriptor, data, offset)

    monkeypatch.setattr(direct_io_module, "direct_io_alignment", lambda descriptor: reported)
    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "pwrite", pwrite)
    destination, page_cache_bytes = download_copy(
        tmp_path, s3_server.client(), bucket, part_bytes=2**20 + 100, threads=4
    )
    assert read_tree(destination) == files
    if reported.offset:
        assert direct and all(offset % 8192 == 0 and size % 8192 == 0 for offset, size in direct)
        assert page_cache_bytes == sum(len(data) for data in files.values()) - sum(size for _, size in direct)
        # Only what is not a whole 8 KiB unit: each range's head and tail, and the files under a unit.
        part_bytes = 2**20 + 100
        ranges = sum(-(-len(data) // part_bytes) for data in files.values() if len(data) > part_bytes)
        small = sum(len(data) for data in files.values() if len(data) <= part_bytes)
        assert page_cache_bytes <= small + 2 * 8192 * (ranges + 4)
    else:
        assert opened_direct == [] and direct == []
        assert page_cache_bytes == sum(len(data) for data in files.values())


def test_a_buffer_that_is_no_multiple_of_a_block_is_refused_at_once():
    with pytest.raises(ValueError, match="buffer_bytes must be a positive multiple of 4096"):
        WeightsSource(object(), "bucket", buffer_bytes=2**20 + 1)


@pytest.mark.parametrize("buffer_bytes", [WRITE_SLICE_BYTES, 3 * WRITE_SLICE_BYTES, 2 * WRITE_SLICE_BYTES + 1000])
@pytest.mark.parametrize("short_every", [0, 1, 3])
def test_a_buffer_reaches_its_file_whole_in_slices_even_when_writes_fall_short(
    tmp_path, monkeypatch, buffer_bytes, short_every
):
    """Every length the buffer can hold (nothing, part of a slice, whole slices, the whole buffer, whose last slice
    may be shorter) lands at its offset byte for byte, a write that falls short (a filling disk, a signal) is
    finished, none is larger than a slice, and a write of nothing is a full disk."""
    data = random.Random(buffer_bytes).randbytes(buffer_bytes)
    buffer = memoryview(bytearray(data))
    slices = write_slices(buffer)
    assert b"".join(slices) == data and max(map(len, slices)) <= WRITE_SLICE_BYTES
    calls, real_pwrite = [], os.pwrite

    def pwrite(descriptor, view, offset):
        calls.append(len(view))
        if short_every and len(calls) % short_every == 0 and len(view) > 1:
            view = view[: len(view) // 2]
        return real_pwrite(descriptor, view, offset)

    monkeypatch.setattr(os, "pwrite", pwrite)
    path = tmp_path / "file"
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        lengths = sorted({0, 1, WRITE_SLICE_BYTES - 1, WRITE_SLICE_BYTES, WRITE_SLICE_BYTES + 1, buffer_bytes})
        for filled in (length for length in lengths if length <= buffer_bytes):
            os.ftruncate(descriptor, 0)
            write_from_slices(descriptor, slices, filled, 5)
            assert path.read_bytes() == (b"\0" * 5 + data[:filled] if filled else b"")
        assert max(calls) <= WRITE_SLICE_BYTES
        monkeypatch.setattr(os, "pwrite", lambda descriptor, view, offset: 0)
        with pytest.raises(OSError, match="No space left"):
            write_from_slices(descriptor, slices, buffer_bytes, 0)
    finally:
        os.close(descriptor)


def test_every_file_has_its_blocks_allocated_before_its_first_write(tmp_path, s3_server, model_bucket, monkeypatch):
    """Writes into allocated blocks skip delayed allocation's per-page reservations, and a full disk fails the
    download instead of the writeback after publication (fs.allocate)."""
    bucket, files = model_bucket
    events, real_pwrite, real_allocate = [], os.pwrite, direct_io_module.allocate

    def allocate(descriptor, size):
        events.append(("allocate", os.readlink(f"/proc/self/fd/{descriptor}"), size))
        real_allocate(descriptor, size)

    def pwrite(descriptor, data, offset):
        events.append(("write", os.readlink(f"/proc/self/fd/{descriptor}"), len(data)))
        return real_pwrite(descriptor, data, offset)

    monkeypatch.setattr(direct_io_module, "allocate", allocate)
    monkeypatch.setattr(os, "pwrite", pwrite)
    destination, _ = download_copy(tmp_path, s3_server.client(), bucket, part_bytes=4 * 2**20, threads=4)
    assert read_tree(destination) == files
    allocated, first_write = {}, {}
    for index, (kind, name, size) in enumerate(events):
        if kind == "allocate":
            allocated[name] = (index, size)
        else:
            first_write.setdefault(name, index)
    sizes = {Path(name).relative_to(destination).as_posix(): size for name, (_, size) in allocated.items()}
    assert sizes == {name: len(data) for name, data in files.items()}
    assert first_write and all(allocated[name][0] < index for name, index in first_write.items())


def test_a_full_disk_fails_the_download_at_allocation(tmp_path, s3_server, model_bucket, monkeypatch):
    bucket, _ = model_bucket

    def full(descriptor, size):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(direct_io_module, "allocate", full)
    with pytest.raises(OSError, match="No space left"):
        download_copy(tmp_path, s3_server.client(), bucket, part_bytes=4 * 2**20, threads=2)


def test_one_thread_writes_a_file_at_a_time_while_its_ranges_download_side_by_side(
    tmp_path, s3_server, model_bucket, monkeypatch
):
    """A writer waiting for a file's inode lock in the kernel spins on a CPU while the holder copies (ext4, xfs): the
    agent's threads take turns on a file asleep instead, direct and buffered writes alike, its ranges still in flight
    together."""
    bucket, files = model_bucket
    guard = threading.Lock()
    writing: dict[str, int] = {}
    most_writing: dict[str, int] = {}
    in_flight: dict[str, int] = {}
    most_in_flight: dict[str, int] = {}
    real_pwrite, real_fetch = os.pwrite, WeightsSource._fetch

    def pwrite(descriptor, data, offset):
        name = os.readlink(f"/proc/self/fd/{descriptor}")
        with guard:
            writing[name] = writing.get(name, 0) + 1
            most_writing[name] = max(most_writing.get(name, 0), writing[name])
        time.sleep(0.001)  # a slow disk's write: room for a second writer to arrive
        try:
            return real_pwrite(descriptor, data, offset)
        finally:
            with guard:
                writing[name] -= 1

    def fetch(self, job, *rest):
        key = job[0].key
        with guard:
            in_flight[key] = in_flight.get(key, 0) + 1
            most_in_flight[key] = max(most_in_flight.get(key, 0), in_flight[key])
        try:
            return real_fetch(self, job, *rest)
        finally:
            with guard:
                in_flight[key] -= 1

    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(WeightsSource, "_fetch", fetch)
    destination, _ = download_copy(tmp_path, s3_server.client(), bucket, part_bytes=2**20, threads=6)
    assert read_tree(destination) == files
    assert max(most_in_flight.values()) > 1  # two ranges of one file downloading at once
    assert set(most_writing.values()) == {1}
