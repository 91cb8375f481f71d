"""A node-copy world shared by the agent's tests and the hostile ones: a model in a bucket, and a copy caught
at each step of its life."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from boto3.s3.transfer import TransferConfig

from node_agent.runtime import weights as weights_module
from node_agent.runtime.s3.weights_download import WeightsSource
from node_agent.runtime.weights import NodeCopies, WeightsLayout
from tests.s3_server import SeaweedS3

PREFIX = "llama/"
MODEL = "llama"
S3_URI = "s3://models/llama/"
MULTIPART = TransferConfig(multipart_threshold=5 * 2**20, multipart_chunksize=5 * 2**20)


def upload_model(server: SeaweedS3, bucket: str, *, seed: int = 1, big_mb: int = 12) -> dict[str, bytes]:
    """Large files with each kind of integrity data S3 can hold, and many small ones."""
    rng = random.Random(seed)
    with_checksums, plain = server.client(), server.client(default_checksums=False)
    files: dict[str, bytes] = {}

    def put(name: str, data: bytes, *, algorithm: str | None, multipart: bool) -> None:
        files[name] = data
        key = PREFIX + name
        extra = {"ChecksumAlgorithm": algorithm} if algorithm else {}
        client = with_checksums if algorithm else plain
        if multipart:
            path = Path(os.environ.get("TMPDIR", "/tmp")) / f"upload-{os.getpid()}-{rng.random()}"
            path.write_bytes(data)
            try:
                client.upload_file(str(path), bucket, key, ExtraArgs=extra, Config=MULTIPART)
            finally:
                path.unlink()
        else:
            client.put_object(Bucket=bucket, Key=key, Body=data, **extra)

    put("model-00001.safetensors", rng.randbytes(big_mb * 2**20 + 123), algorithm="CRC64NVME", multipart=True)
    put("model-00002.safetensors", rng.randbytes(big_mb * 2**20 + 7), algorithm="CRC32C", multipart=True)
    put("model-00003.safetensors", rng.randbytes(big_mb * 2**20), algorithm=None, multipart=True)
    put("model-00004.safetensors", rng.randbytes(3 * 2**20), algorithm=None, multipart=False)
    put("config.json", b'{"architectures": ["LlamaForCausalLM"]}', algorithm="CRC32", multipart=False)
    put("empty.txt", b"", algorithm=None, multipart=False)
    for index in range(40):
        put(
            f"tokenizer/part-{index:02d}.json",
            rng.randbytes(rng.randint(100, 20_000)),
            algorithm="CRC64NVME",
            multipart=False,
        )
    return files


@pytest.fixture
def model_bucket(s3_server):
    bucket = s3_server.new_bucket()
    return bucket, upload_model(s3_server, bucket)


def never_in_use(model, key):
    return False


# -- published from the page cache, then made durable --


def _cache_in_boot(root: Path, client, bucket, clock, log, boot_id: str | None) -> NodeCopies:
    source = WeightsSource(client, bucket, part_bytes=4 * 2**20, threads=4, buffer_bytes=2**20)
    return NodeCopies(source=source, layout=WeightsLayout(root, boot_id=boot_id), clock=clock, log=log, reserve_bytes=0)


def _published_never_synced(root: Path, s3_server, bucket, clock, log, monkeypatch) -> tuple[NodeCopies, str]:
    """A copy as an agent leaves it that published it and died before its sync: `<key>.published` (naming
    boot-a, as the agent wrote it) and no `<key>.complete`."""
    monkeypatch.setattr(weights_module, "syncfs", lambda descriptor: None)
    cache = _cache_in_boot(root, s3_server.client(), bucket, clock, log, "boot-a")
    key = cache.sync(MODEL, S3_URI, PREFIX, never_in_use).key
    complete = cache.layout.complete_marker(MODEL, key)
    assert json.loads(complete.read_text())["boot_id"] == "boot-a"
    cache.layout.published_marker(MODEL, key).write_text(complete.read_text())
    complete.unlink()
    return cache, key
