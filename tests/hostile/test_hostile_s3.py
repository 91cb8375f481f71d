"""What any node or the owner of a bucket may have written to S3, in hostile shapes, against the real agent:
everything is bounded by what the config allows before one byte is allocated for it, and a call to an S3
endpoint that never answers ends."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import tarfile
import threading
import time

import pytest
import zstandard

from node_agent.runtime import untrusted
from node_agent.runtime.compile_manifest import MANIFEST_VERSION
from node_agent.runtime.liveness import STALL_SECONDS
from node_agent.runtime.s3 import client as s3c
from node_agent.runtime.s3.client import s3_client
from node_agent.runtime.s3.compile_store import CacheStore
from node_agent.runtime.s3.weights_download import WeightsSource
from tests.agent.cluster_world import MODEL, PREFIX
from tests.hostile.hostile_world import peak_memory


def _key_of(hostile):
    hostile.node.agent.start()
    return hostile.node.agent.models[MODEL].key


def _publish_manifest(hostile, key, **fields) -> None:
    """A manifest as any node may create it (create-only is all the bucket policy asks)."""
    hash_dirs = ["torch_compile_cache/0123456789"]
    sha = fields.pop("sha256", "a" * 64)
    document = {
        "version": MANIFEST_VERSION,
        "digest": key.digest,
        "factors": key.factors,
        "archive": key.archive_key(sha, "0" * 16),
        "sha256": sha,
        "size": 1,
        "files": 1,
        "hash_dirs": hash_dirs,
        "published_at": 1.0,
        **fields,
    }
    store = CacheStore(hostile.world.client, hostile.world.config.buckets.compile_cache)
    store.put_json(key.manifest_key(hash_dirs), document)


def _restore_again(hostile):
    """A new node of the same configuration: the restore it runs at start."""
    node = hostile.world.node("node-b")
    return node, node.agent.start()[MODEL]


def test_a_manifest_claiming_an_absurd_size_is_refused_before_any_allocation(hostile):
    """The P1: a manifest claiming 2**58 bytes made the restore build its list of ranges first and run out of
    memory. The claim is checked against the compile cache's NVMe reserve, and ranges are made as fetched."""
    key = _key_of(hostile)
    _publish_manifest(hostile, key, size=2**58)
    holder = {}
    peak = peak_memory(lambda: holder.update(outcome=_restore_again(hostile)))
    node, outcome = holder["outcome"]
    assert outcome.status == "miss" and peak < 32 * 2**20
    (refused,) = [e for e in node.log.events if e["event"] == "manifest-refused"]
    assert "outside 1.." in refused["reason"]


def test_manifests_of_wrong_shapes_are_refused(hostile):
    key = _key_of(hostile)
    for fields in (
        {"size": True},
        {"size": -1},
        {"files": 10**9},
        {"published_at": "yesterday"},
        {"hash_dirs": ["../../etc"]},
        {"version": True},
    ):
        _publish_manifest(hostile, key, **fields)
    store = CacheStore(hostile.world.client, hostile.world.config.buckets.compile_cache)
    huge = key.manifest_prefix + "0000000000000000.json"
    store._s3.put_object(Bucket=store.bucket, Key=huge, Body=b'{"pad": "' + b"x" * (3 * 2**20) + b'"}')
    node, outcome = _restore_again(hostile)
    assert outcome.status == "miss"
    reasons = [e["reason"] for e in node.log.events if e["event"] == "manifest-refused"]
    assert any("more than the" in r for r in reasons)  # the 3 MiB manifest, never read whole
    assert len(reasons) >= 2


def test_a_compression_bomb_is_refused_while_it_unpacks(hostile):
    """An archive of a few kB that unpacks to more than the compile cache's reserve."""
    key = _key_of(hostile)
    limit = hostile.node.agent.limits.max_archive_bytes
    raw = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(raw, closefd=False) as compressed:
        with tarfile.open(fileobj=compressed, mode="w|") as tar:
            member = tarfile.TarInfo("vllm/torch_compile_cache/0123456789/zeros")
            member.size = limit + 2**20

            class Zeros:
                left = member.size

                def read(self, size: int = -1) -> bytes:
                    count = self.left if size < 0 else min(size, self.left)
                    self.left -= count
                    return bytes(count)

            tar.addfile(member, Zeros())
    body = raw.getvalue()
    assert len(body) < limit
    sha = hashlib.sha256(body).hexdigest()
    store = CacheStore(hostile.world.client, hostile.world.config.buckets.compile_cache)
    store._s3.put_object(Bucket=store.bucket, Key=key.archive_key(sha, "0" * 16), Body=body)
    _publish_manifest(hostile, key, sha256=sha, size=len(body))
    node, outcome = _restore_again(hostile)
    assert outcome.status == "failed" and "unsafe archive" in outcome.reason
    assert not node.layout.model_dir(MODEL, node.agent.models[MODEL].model.compile_cache.fingerprint).exists()


def test_an_object_key_that_is_no_file_below_the_copy_is_refused(hostile, sentinels):
    """A key with a control character (SeaweedFS stores it as S3 does): the listing is refused, nothing written."""
    before = sentinels()
    bucket = hostile.world.config.buckets.models.name
    hostile.world.client.put_object(Bucket=bucket, Key=f"{PREFIX}\x01weights", Body=b"{}", ChecksumAlgorithm="CRC32")
    assert hostile.node.agent.weights_tick()[MODEL] == "failed"
    assert sentinels() == before and hostile.node.weights.layout.read_pointer(MODEL) is None


def test_an_object_key_that_climbs_out_of_the_copy_is_refused(tmp_path):
    """S3 accepts `..` in a key (SeaweedFS refuses to store one, so S3's listing is stubbed with botocore's own
    Stubber): such a key is refused before any file is opened."""
    import boto3
    import pytest
    from botocore.stub import Stubber

    from node_agent.runtime.untrusted import Refused

    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    listing = {"Contents": [{"Key": "m/../../outside/victim.json", "Size": 2, "ETag": '"x"'}], "IsTruncated": False}
    with Stubber(client) as stub:
        stub.add_response("list_objects_v2", listing, {"Bucket": "b", "Prefix": "m/"})
        with pytest.raises(Refused, match="no file path below"):
            WeightsSource(client, "b").list("m/")
    for key in ("m/a/../b", "m/./a", "m//a", "m/", "other/a", "m/" + "a" * 300):
        with pytest.raises(Refused):
            untrusted.relative_key(key, "m/")
    assert untrusted.relative_key("m/shards/model-00001.safetensors", "m/") == "shards/model-00001.safetensors"


def test_a_prefix_larger_than_the_config_allows_is_not_copied(hostile):
    settings = hostile.node.agent.settings
    (model,) = settings.weights_models
    small = model.model_copy(update={"weights": model.weights_cache.model_copy(update={"max_bytes": 1000})})
    hostile.node.agent.settings = settings.model_copy(update={"models": [small]})
    outcome = hostile.node.agent.weights_tick()
    assert outcome[MODEL] == "failed"
    (sync,) = [e for e in hostile.node.log.events if e["event"] == "weights-sync"]
    assert "fix size_gb" in sync["reason"]


def test_a_silent_s3_endpoint_ends_each_call_within_its_bound(monkeypatch):
    """The P2: an endpoint that accepts connections and never answers blocked one agent call for 367 s. With
    the agent's client (connect 5 s, 20 s between bytes, 4 attempts) one attempt ends in about 20 s, and every
    call within the liveness bound."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted = []
    threading.Thread(target=lambda: [accepted.append(listener.accept()) for _ in range(8)], daemon=True).start()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{listener.getsockname()[1]}")
    client = s3_client("us-east-1", connections=4, attempts=1)
    started = time.monotonic()
    try:
        client.list_objects_v2(Bucket="b", Prefix="p")
    except Exception as error:  # a read timeout, as botocore names it
        assert "timeout" in type(error).__name__.lower() or "timed out" in str(error).lower(), error
    elapsed = time.monotonic() - started
    assert s3c.READ_TIMEOUT_SECONDS - 1 <= elapsed < s3c.READ_TIMEOUT_SECONDS + 10
    worst = s3c.ATTEMPTS * (s3c.CONNECT_TIMEOUT_SECONDS + s3c.READ_TIMEOUT_SECONDS) + 30  # + backoff
    assert worst < STALL_SECONDS
    listener.close()


def test_an_oversized_last_use_record_is_no_reason_to_stop(hostile):
    key = _key_of(hostile)
    store = CacheStore(hostile.world.client, hostile.world.config.buckets.compile_cache)
    store._s3.put_object(Bucket=store.bucket, Key=key.last_use_key, Body=json.dumps({"x": "y" * 3 * 2**20}).encode())
    hostile.node.agent.tick()  # touches last use (a write): the oversized object is never read


def _gnu_header(name: str, kind: bytes, size: int) -> bytes:
    """One ustar/GNU header block claiming `size` bytes of what follows."""
    block = bytearray(512)
    block[0 : len(name)] = name.encode()
    block[100:108] = b"0000644\0"
    block[124:136] = f"{size:011o}\0".encode()
    block[148:156] = b" " * 8
    block[156:157] = kind
    block[257:265] = b"ustar  \0"
    block[148:155] = f"{sum(block):06o}\0".encode()
    return bytes(block)


@pytest.mark.parametrize("kind", [b"x", b"L", b"S"], ids=["pax-header", "gnu-long-name", "gnu-sparse"])
def test_an_archive_whose_extended_header_claims_gigabytes_is_refused_before_it_is_read(tmp_path, kind):
    """tarfile reads a pax or GNU long-name header whole before any member: a few kB of zstd claiming 4 GB there
    made the agent hold all that follows in memory. Headers over 1 MiB and sparse members are refused first."""
    from node_agent.runtime.archive import UnsafeArchive, unpack_stream

    tar = _gnu_header("././@Header", kind, 4 * 2**30) + bytes(32 * 2**20)  # zeros: 32 MiB in about 1 kB
    body = zstandard.ZstdCompressor().compress(tar)
    assert len(body) < 8 * 2**10
    outcome = {}

    def unpack() -> None:
        try:
            unpack_stream(io.BytesIO(body), tmp_path / "out", max_bytes=2**30, max_files=100)
        except UnsafeArchive as error:
            outcome["refused"] = str(error)

    peak = peak_memory(unpack)
    assert "refused" in outcome and peak < 8 * 2**20
    assert not any((tmp_path / "out").iterdir())
