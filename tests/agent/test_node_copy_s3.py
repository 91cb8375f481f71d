"""The loopback S3 endpoint that serves a node copy: the calls the Run:ai streamer and vLLM's config pull make
(runai-model-streamer 0.15.9: boto3 ListObjectsV2 + download_file for config files, the AWS SDK for C++ for
ranged GETs of the weights), answered as S3 answers them, and nothing else."""

from __future__ import annotations

import os
import random
from pathlib import Path

import boto3
import pytest
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from model_workload.runtime.node_copy_s3 import serve_in_background


@pytest.fixture
def copy(tmp_path):
    folder = tmp_path / "copy"
    rng = random.Random(3)
    files = {
        "config.json": b'{"a": 1}',
        "tokenizer/vocab.json": rng.randbytes(5000),
        "model-00001.safetensors": rng.randbytes(3 * 2**20 + 17),
        "empty.txt": b"",
    }
    files |= {f"shards/part-{i:04d}.bin": bytes([i % 256]) * 10 for i in range(2500)}
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    (tmp_path / "secret.txt").write_text("outside")
    os.symlink(tmp_path / "secret.txt", folder / "link.txt")
    server = serve_in_background(bucket="models", prefix="llama/", folder=folder)
    yield server, files
    server.shutdown()


def client(server):
    return boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        config=Config(signature_version=UNSIGNED, s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def test_listing_pages_like_s3_and_matches_the_copy(copy):
    server, files = copy
    keys = [
        o["Key"]
        for page in client(server)
        .get_paginator("list_objects_v2")
        .paginate(Bucket="models", Prefix="llama/", PaginationConfig={"PageSize": 700})
        for o in page.get("Contents", [])
    ]
    assert keys == sorted("llama/" + name for name in files)  # the symlink is not served
    top = client(server).list_objects_v2(Bucket="models", Prefix="llama/", Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["llama/shards/", "llama/tokenizer/"]
    assert {o["Key"] for o in top["Contents"]} == {
        "llama/config.json",
        "llama/empty.txt",
        "llama/model-00001.safetensors",
    }


def test_ranged_reads_are_byte_exact(copy):
    server, files = copy
    s3, data = client(server), files["model-00001.safetensors"]
    key = "llama/model-00001.safetensors"
    whole = s3.get_object(Bucket="models", Key=key)
    assert whole["Body"].read() == data and whole["ContentLength"] == len(data)
    part = s3.get_object(Bucket="models", Key=key, Range="bytes=1000-2999999")
    assert part["Body"].read() == data[1000:3000000] and part["ContentRange"] == f"bytes 1000-2999999/{len(data)}"
    assert s3.get_object(Bucket="models", Key=key, Range="bytes=-10")["Body"].read() == data[-10:]
    assert s3.get_object(Bucket="models", Key=key, Range=f"bytes={len(data) - 5}-")["Body"].read() == data[-5:]
    assert s3.head_object(Bucket="models", Key=key)["ContentLength"] == len(data)
    assert s3.get_object(Bucket="models", Key="llama/empty.txt")["Body"].read() == b""
    with pytest.raises(ClientError) as refused:
        s3.get_object(Bucket="models", Key=key, Range=f"bytes={len(data)}-")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416


def test_config_pull_downloads_the_files_vllm_asks_for(copy, tmp_path):
    server, files = copy
    s3 = client(server)
    target = tmp_path / "pulled.json"
    s3.download_file("models", "llama/tokenizer/vocab.json", str(target))
    assert target.read_bytes() == files["tokenizer/vocab.json"]


@pytest.mark.parametrize(
    "bucket, key, code",
    [
        ("models", "llama/missing.json", "NoSuchKey"),
        ("models", "llama/../secret.txt", "NoSuchKey"),
        ("models", "llama/link.txt", "NoSuchKey"),
        ("models", "other/config.json", "NoSuchKey"),
        ("elsewhere", "llama/config.json", "NoSuchBucket"),
    ],
)
def test_nothing_outside_the_copy_is_served(copy, bucket, key, code):
    server, _ = copy
    with pytest.raises(ClientError) as refused:
        client(server).get_object(Bucket=bucket, Key=key)
    assert refused.value.response["Error"]["Code"] == code


def test_writes_are_refused(copy):
    server, _ = copy
    with pytest.raises(ClientError) as refused:
        client(server).put_object(Bucket="models", Key="llama/config.json", Body=b"{}")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"
    with pytest.raises(ClientError):
        client(server).delete_object(Bucket="models", Key="llama/config.json")


def test_it_listens_on_loopback_only(copy):
    server, _ = copy
    assert server.server_address[0] == "127.0.0.1"


def test_the_real_streamer_loads_the_copy_through_the_endpoint(tmp_path, monkeypatch):
    """The pod's loader (Run:ai Model Streamer 0.15.9, what the serving image ships; its C++ S3 client) with the
    environment the entry step sets and the pod's credentials: every tensor arrives byte-equal, and the C++ reader
    signs its requests although RUNAI_STREAMER_S3_UNSIGNED is set (only the boto3 side reads it)."""
    import torch
    from runai_model_streamer import SafetensorsStreamer
    from safetensors.torch import save_file

    from model_workload.runtime.node_copy_s3 import _Handler
    from model_workload.runtime.vllm_entry import NODE_COPY_ENV

    folder = tmp_path / "copy"
    folder.mkdir()
    generator = torch.Generator().manual_seed(7)
    tensors = {f"layer.{i}.weight": torch.randn(256, 1024, generator=generator) for i in range(12)}
    save_file(dict(list(tensors.items())[:6]), str(folder / "model-00001.safetensors"))
    save_file(dict(list(tensors.items())[6:]), str(folder / "model-00002.safetensors"))
    server = serve_in_background(bucket="models", prefix="llama/", folder=folder)
    authorizations = []

    class Recording(_Handler):
        def do_GET(self):
            authorizations.append(self.headers.get("Authorization", ""))
            super().do_GET()

    server.RequestHandlerClass = Recording
    try:
        for name, value in {
            "AWS_ENDPOINT_URL": server.endpoint,
            **NODE_COPY_ENV,
            "AWS_ACCESS_KEY_ID": "AKIAPODIDENTITYEXAMPLE",  # what Pod Identity's credentials resolve to
            "AWS_SECRET_ACCESS_KEY": "pod-identity-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
            "RUNAI_STREAMER_CHUNK_BYTESIZE": str(2**20),
            "RUNAI_STREAMER_CONCURRENCY": "4",
        }.items():
            monkeypatch.setenv(name, value)
        loaded = {}
        with SafetensorsStreamer() as streamer:
            streamer.stream_files([f"s3://models/llama/model-0000{i}.safetensors" for i in (1, 2)])
            for name, tensor in streamer.get_tensors():
                loaded[name] = tensor.clone()
        assert loaded.keys() == tensors.keys()
        assert all(torch.equal(loaded[name], tensors[name]) for name in tensors)
        assert authorizations and all(
            a.startswith("AWS4-HMAC-SHA256 Credential=AKIAPODIDENTITYEXAMPLE/") for a in authorizations
        )
    finally:
        server.shutdown()


def test_a_file_shorter_than_listed_ends_the_connection(tmp_path):
    """The copy is immutable while served; if a file were cut anyway the client must see an error, not
    silently short data."""
    folder = tmp_path / "copy"
    folder.mkdir()
    (folder / "w.bin").write_bytes(b"x" * 100_000)
    server = serve_in_background(bucket="models", prefix="m/", folder=folder)
    try:
        Path(folder / "w.bin").write_bytes(b"x" * 10)
        with pytest.raises(Exception):
            client(server).get_object(Bucket="models", Key="m/w.bin")["Body"].read()
    finally:
        server.shutdown()


def test_many_connections_at_once_are_all_accepted(copy):
    """Every TP rank's streamer opens its connections together; none may wait for a kernel retry."""
    import socket
    import time

    server, _ = copy
    host, port = server.server_address
    sockets = [socket.socket() for _ in range(200)]
    try:
        for s in sockets:
            s.setblocking(False)
            s.connect_ex((host, port))
        started = time.monotonic()
        for s in sockets:
            s.setblocking(True)
            s.settimeout(0.5)
            s.sendall(b"HEAD /models/llama/config.json HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(12).startswith(b"HTTP/1.")
        assert time.monotonic() - started < 10
    finally:
        for s in sockets:
            s.close()


def test_delimited_listing_pages_through_folders_without_repeats_or_gaps(copy):
    server, files = copy
    prefixes, keys = [], []
    for page in (
        client(server)
        .get_paginator("list_objects_v2")
        .paginate(Bucket="models", Prefix="llama/", Delimiter="/", PaginationConfig={"PageSize": 1})
    ):
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        keys += [o["Key"] for o in page.get("Contents", [])]
    assert prefixes == ["llama/shards/", "llama/tokenizer/"]
    assert sorted(keys) == ["llama/config.json", "llama/empty.txt", "llama/model-00001.safetensors"]


def test_a_client_slower_than_the_disk_gets_every_byte(tmp_path):
    """The connection has a timeout, so its descriptor is non-blocking: a sender that does not wait for room
    (a bare os.sendfile) fails with EAGAIN as soon as the client reads slower than the file is read, and the
    streamer sees a failed request. A reader that pauses gets the whole range, intact."""
    import hashlib
    import socket
    import time

    folder = tmp_path / "copy"
    folder.mkdir()
    data = random.Random(5).randbytes(24 * 2**20)
    (folder / "big.safetensors").write_bytes(data)
    server = serve_in_background(bucket="models", prefix="m/", folder=folder)
    try:
        host, port = server.server_address[:2]
        with socket.create_connection((host, port)) as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            client.sendall(b"GET /models/m/big.safetensors HTTP/1.1\r\nHost: x\r\nRange: bytes=0-\r\n\r\n")
            received = b""
            while b"\r\n\r\n" not in received:
                received += client.recv(65536)
            head, body = received.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 206")
            digest, count = hashlib.sha256(body), len(body)
            while count < len(data):
                time.sleep(0.002)  # slower than the disk: the server's socket buffer fills
                chunk = client.recv(1 << 20)
                assert chunk, f"the endpoint closed the connection after {count} bytes"
                digest.update(chunk)
                count += len(chunk)
        assert count == len(data) and digest.hexdigest() == hashlib.sha256(data).hexdigest()
    finally:
        server.shutdown()
