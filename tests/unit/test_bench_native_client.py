"""The prefetch benchmark's native-client reference (awscrt's S3Client) against the real S3 server: it must copy the
same bytes the agent does, or its time would be a ceiling for a different job."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from awscrt.s3 import S3ResponseError

from bench.native_client_worker import NativeClient, listed_keys, relative_path
from tests.s3_server import ACCESS_KEY, SECRET_KEY


@pytest.fixture
def credentials(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)


def _objects() -> dict[str, bytes]:
    rng = random.Random(3)
    # Larger than the client's parts (8 MiB): fetched as ranges, reassembled by the client in the file.
    objects = {"model/weights.safetensors": rng.randbytes(20 * 2**20 + 12345)}
    objects |= {f"model/extras/file-{index}.json": rng.randbytes(rng.randint(1, 5000)) for index in range(5)}
    objects["model/odd name+plus%percent.json"] = b"{}"
    return objects


def test_the_worker_copies_every_object_byte_for_byte_and_leaves_other_prefixes(
    s3_server, bucket, credentials, tmp_path
):
    client = s3_server.client()
    for key, data in _objects().items():
        client.put_object(Bucket=bucket, Key=key, Body=data)
    client.put_object(Bucket=bucket, Key="model-other/not-this.json", Body=b"x")

    folder = tmp_path / "copy"
    result = subprocess.run(
        [sys.executable, "-m", "bench.native_client_worker", s3_server.endpoint, bucket, "model/", str(folder)],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ | {"AWS_REGION": "us-east-1"},
    )

    assert json.loads(result.stdout.strip().splitlines()[-1])["objects"] == len(_objects())
    copied = {f"model/{path.relative_to(folder)}": path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    assert copied == _objects()


def test_the_listing_follows_every_page(s3_server, bucket, credentials):
    client = s3_server.client()
    keys = [f"model/f{index}" for index in range(7)]
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=b"x")

    assert sorted(NativeClient(s3_server.endpoint, "us-east-1").list(bucket, "model/", page_keys=2)) == keys


def test_a_failed_download_raises(s3_server, bucket, credentials, tmp_path):
    with pytest.raises(S3ResponseError) as raised:
        NativeClient(s3_server.endpoint, "us-east-1").download_all(bucket, ["model/absent"], "model/", tmp_path)
    assert raised.value.status_code == 404


def test_a_page_without_a_next_token_is_the_last():
    xmlns = "http://s3.amazonaws.com/doc/2006-03-01/"
    page = f'<ListBucketResult xmlns="{xmlns}"><IsTruncated>false</IsTruncated><Contents><Key>a</Key></Contents>'
    assert listed_keys(f"{page}</ListBucketResult>".encode()) == (["a"], None)
    truncated = page.replace("false", "true") + "<NextContinuationToken>t1</NextContinuationToken>"
    assert listed_keys(f"{truncated}</ListBucketResult>".encode()) == (["a"], "t1")


@pytest.mark.parametrize("key", ["model/../escape", "model/", "model//x", "model/./x", "other/x", "model//etc/passwd"])
def test_a_key_that_is_no_path_below_the_folder_is_refused(key):
    with pytest.raises(ValueError, match="no file path below"):
        relative_path(key, "model/")


def test_a_nested_key_keeps_its_folders():
    assert str(relative_path("model/a/b.json", "model/")) == "a/b.json"
