"""The prefetch benchmark's native-client reference (awscrt's S3Client) against the real S3 server: it must copy the
same bytes the agent does, or its time would be a reference for a different job."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest
from awscrt.s3 import S3ResponseError

from bench import native_client_worker
from bench.native_client_worker import NativeClient, direct_io_fallbacks, listed_keys
from node_agent.runtime.direct_io import open_direct
from tests.s3_server import ACCESS_KEY, SECRET_KEY


@pytest.fixture
def credentials(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)


PREFIX = "my model+1/"  # characters a query string must encode


def _objects() -> dict[str, bytes]:
    rng = random.Random(3)
    # Larger than the client's parts (8 MiB): fetched as ranges, reassembled by the client in the file; the first
    # has whole pages only, which the client writes with O_DIRECT.
    objects = {f"{PREFIX}aligned.safetensors": rng.randbytes(16 * 2**20)}
    objects[f"{PREFIX}weights.safetensors"] = rng.randbytes(20 * 2**20 + 12345)
    objects |= {f"{PREFIX}extras/file-{index}.json": rng.randbytes(rng.randint(1, 5000)) for index in range(5)}
    objects[f"{PREFIX}odd name+plus%percent.json"] = b"{}"
    return objects


def test_the_worker_copies_every_object_byte_for_byte_and_leaves_other_prefixes(
    s3_server, bucket, credentials, tmp_path
):
    client = s3_server.client()
    for key, data in _objects().items():
        client.put_object(Bucket=bucket, Key=key, Body=data)
    client.put_object(Bucket=bucket, Key=f"{PREFIX}extras/", Body=b"")  # a folder placeholder: no file
    client.put_object(Bucket=bucket, Key="my model+1-other/not-this.json", Body=b"x")

    folder = tmp_path / "copy"
    result = subprocess.run(
        [sys.executable, "-m", "bench.native_client_worker", s3_server.endpoint, bucket, PREFIX, str(folder)],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ | {"AWS_REGION": "us-east-1"},
        timeout=120,
    )

    assert json.loads(result.stdout.strip().splitlines()[-1])["objects"] == len(_objects())
    copied = {f"{PREFIX}{path.relative_to(folder)}": path.read_bytes() for path in folder.rglob("*") if path.is_file()}
    assert copied == _objects()
    # Straight to the disk where the filesystem takes O_DIRECT, but for bodies that are not whole pages (each small
    # object, the odd object's last part): the client writes those through the page cache and says so.
    unaligned = sum(1 for data in _objects().values() if len(data) % 4096)
    assert direct_io_fallbacks(result.stderr) == (unaligned if direct_io_works(tmp_path) else len(_objects()))


def test_the_listing_follows_every_page(s3_server, bucket, credentials):
    client = s3_server.client()
    keys = [f"model/f{index}" for index in range(7)]
    for key in keys:
        client.put_object(Bucket=bucket, Key=key, Body=b"x")

    assert sorted(NativeClient(s3_server.endpoint, "us-east-1").list(bucket, "model/", page_keys=2)) == keys


def test_a_continuation_token_handed_out_twice_ends_the_listing_with_an_error(
    s3_server, bucket, credentials, monkeypatch
):
    pages = []

    def same_token_again(document: bytes) -> tuple[list[str], str]:
        pages.append(document)
        if len(pages) > 3:  # without the check the listing would go on for ever: the test fails instead
            raise AssertionError("the listing asked for the same page again")
        return ["model/a"], "the-same-token"

    monkeypatch.setattr(native_client_worker, "listed_keys", same_token_again)
    with pytest.raises(ValueError, match="twice"):
        NativeClient(s3_server.endpoint, "us-east-1").list(bucket, "model/")


def test_a_failed_download_raises(s3_server, bucket, credentials, tmp_path):
    with pytest.raises(S3ResponseError) as raised:
        NativeClient(s3_server.endpoint, "us-east-1").download_all(bucket, ["model/absent"], "model/", tmp_path)
    assert raised.value.status_code == 404


def test_a_page_without_a_next_token_is_the_last():
    xmlns = "http://s3.amazonaws.com/doc/2006-03-01/"
    page = f'<ListBucketResult xmlns="{xmlns}"><IsTruncated>false</IsTruncated><Contents><Key>a</Key></Contents>'
    assert listed_keys(f"{page}</ListBucketResult>".encode()) == (["a"], None)
    truncated = page.replace("false", "true")
    with_token = f"{truncated}<NextContinuationToken>t1</NextContinuationToken></ListBucketResult>"
    assert listed_keys(with_token.encode()) == (["a"], "t1")
    with pytest.raises(ValueError, match="without a NextContinuationToken"):
        listed_keys(f"{truncated}</ListBucketResult>".encode())


def test_the_fallbacks_counted_are_the_client_s_own_warnings_of_buffered_writes():
    log = "\n".join(
        [
            "[WARN] [2026-12-03T15:00:00Z] [S3MetaRequest] - id=0x1: Could not open /x with O_DIRECT. aws-error:"
            "AWS_ERROR_INVALID_ARGUMENT. Falling back to buffered I/O.",
            "[WARN] [2026-12-03T15:00:00Z] [S3MetaRequest] - id=0x1 Failed writing to file with O_DIRECT. aws-error:"
            "AWS_IO_FILE_VALIDATION_FAILURE. Writing this body buffered.",
            "[WARN] [2026-12-03T15:00:00Z] [S3Client] - id=0x2 something else",
        ]
    )
    assert direct_io_fallbacks(log) == 2
    assert direct_io_fallbacks("") == 0


def direct_io_works(folder) -> bool:
    """Whether the filesystem under `folder` takes O_DIRECT (tmpfs before 6.6 does not), asked as the agent asks."""
    probe = folder / "probe"
    probe.touch()
    descriptor = open_direct(probe)
    if descriptor is not None:
        os.close(descriptor)
    return descriptor is not None
