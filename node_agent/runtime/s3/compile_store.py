"""The compile-cache store: manifests, archives and last-use records in the compile bucket, read and written
with conditional, atomic uploads."""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from botocore.exceptions import ClientError

from node_agent.runtime.direct_io import pwrite_all
from node_agent.runtime.fs import allocate
from node_agent.runtime.s3.checksums import hash_from_file
from node_agent.runtime.s3.client import (
    DENIED,
    DOWNLOAD_CHUNK_BYTES,
    JSON_MAX_BYTES,
    MISSING,
    PRECONDITION_FAILED,
    MissingObject,
    ObjectChanged,
    end_of_range,
    error_code,
    zero_copy_reader,
)
from node_agent.runtime.untrusted import Refused, parse_json


class CacheStore:
    def __init__(self, client, bucket: str, *, part_bytes: int = 64 * 2**20, threads: int = 8) -> None:
        self._s3 = client
        self.bucket = bucket
        self.part_bytes = part_bytes
        self.threads = threads
        self._local = threading.local()

    def _missing(self, error: ClientError, key: str) -> bool:
        """Whether a failed GET/HEAD means the object is absent. S3 answers 404 only to a caller allowed to
        list the bucket, 403 otherwise (S3 API reference, GetObject and HeadObject, "Permissions"); the agent's
        ListBucket is conditioned on s3:prefix, which a GET does not carry. So a 403 is checked with a listing
        of exactly that key (which carries the prefix): absent there means absent, anything else stays denied."""
        code = error_code(error)
        if code in MISSING:
            return True
        if code not in DENIED:
            return False
        listed = self._s3.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1).get("Contents", [])
        return not any(item["Key"] == key for item in listed)

    def get_json(self, key: str, *, max_bytes: int = JSON_MAX_BYTES) -> dict | None:
        return self.get_json_tagged(key, max_bytes=max_bytes)[0]

    def get_json_tagged(self, key: str, *, max_bytes: int = JSON_MAX_BYTES) -> tuple[dict | None, str | None]:
        """The document and its ETag, for a later write or delete conditional on it being unchanged. Any node may
        have written it: over `max_bytes`, not JSON or not an object, it is Refused (never read whole)."""
        try:
            response = self._s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            if self._missing(error, key):
                return None, None
            raise
        with response["Body"] as body:
            if response.get("ContentLength", 0) > max_bytes:
                raise Refused(f"{response['ContentLength']} bytes, more than the {max_bytes} allowed")
            data = body.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise Refused(f"more than the {max_bytes} bytes allowed")
        document = parse_json(data)
        if not isinstance(document, dict):
            raise Refused("not a JSON object")
        return document, response["ETag"]

    def exists(self, key: str) -> bool:
        try:
            self._s3.head_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            if self._missing(error, key):
                return False
            raise
        return True

    def put_json(self, key: str, document: dict, **condition) -> None:
        self._s3.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=json.dumps(document, sort_keys=True).encode(),
            ContentType="application/json",
            **condition,
        )

    def put_json_if_absent(self, key: str, document: dict) -> bool:
        """Conditional create (If-None-Match: *): False when another writer got there first."""
        try:
            self.put_json(key, document, IfNoneMatch="*")
        except ClientError as error:
            if error_code(error) in PRECONDITION_FAILED:
                return False
            raise
        return True

    def list_keys(self, prefix: str, *, limit: int | None = None) -> list[str]:
        """The keys under `prefix`, at most `limit` of them (the listing stops there)."""
        keys: list[str] = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            keys += [item["Key"] for item in page.get("Contents", [])]
            if limit is not None and len(keys) >= limit:
                return keys[:limit]
        return keys

    def upload_file_if_absent(self, path: Path, key: str) -> bool:
        """Create-only upload (If-None-Match: *, which the bucket policy requires for archives): one PUT up to a
        part, else a parallel multipart upload whose completion carries the condition (the parts cannot: S3
        exempts them through s3:ObjectCreationOperation). boto3's upload_file cannot send the condition.
        False when the key exists."""
        size = path.stat().st_size
        if size <= self.part_bytes:
            with open(path, "rb") as body:
                try:
                    self._s3.put_object(Bucket=self.bucket, Key=key, Body=body, IfNoneMatch="*")
                except ClientError as error:
                    if error_code(error) in PRECONDITION_FAILED:
                        return False
                    raise
            return True
        upload_id = self._s3.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
        try:

            def part(number: int) -> dict:
                offset = (number - 1) * self.part_bytes
                with open(path, "rb") as handle:
                    handle.seek(offset)
                    data = handle.read(self.part_bytes)
                answer = self._s3.upload_part(
                    Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=data
                )
                return {"PartNumber": number, "ETag": answer["ETag"]}

            count = (size + self.part_bytes - 1) // self.part_bytes
            with ThreadPoolExecutor(max_workers=min(self.threads, count)) as pool:
                parts = list(pool.map(part, range(1, count + 1)))
            self._s3.complete_multipart_upload(
                Bucket=self.bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts}, IfNoneMatch="*"
            )
        except ClientError as error:
            self._abort(key, upload_id)
            if error_code(error) in PRECONDITION_FAILED:
                return False
            raise
        except Exception:
            self._abort(key, upload_id)
            raise
        return True

    def _abort(self, key: str, upload_id: str) -> None:
        """Best effort: the bucket's lifecycle rule removes whatever upload this leaves."""
        try:
            self._s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except ClientError:
            pass

    def open_object(self, key: str, size: int):
        """The object's body as a stream (a small archive unpacked as it arrives); MissingObject if absent, and
        ObjectChanged, before a byte is read, if it is not `size` bytes (what its manifest says)."""
        try:
            response = self._s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            if self._missing(error, key):
                raise MissingObject(f"{key} is not in the bucket") from error
            raise
        if response["ContentLength"] != size:
            response["Body"].close()
            raise ObjectChanged(f"{key} is {response['ContentLength']} bytes, not the {size} its manifest says")
        return response["Body"]

    def download(
        self,
        key: str,
        destination: Path,
        size: int,
        on_part: Callable[[int], None] | None = None,
        digest=None,
    ) -> None:
        """Parallel ranged GETs written in place (pwrite); raises on any short or failed part.

        The ranges are made as they are fetched (at most two per thread waiting), so memory does not grow with
        the size the caller was told. The file is a temporary one: the caller verifies its checksum before
        using it and deletes it after, so it needs no fsync. `digest` (a hashlib object): fed the file's bytes in
        order, read back from the file as each range completes the written prefix, while later ranges still
        download (hashing after the download read the whole file once more: a fifth of a 500 MB restore).
        """
        descriptor = os.open(destination, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            allocate(descriptor, size)

            def fetch(start: int) -> tuple[int, int]:
                end = min(start + self.part_bytes, size) - 1
                try:
                    response = self._s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end}")
                except ClientError as error:
                    if self._missing(error, key):
                        raise MissingObject(f"{key} is not in the bucket") from error
                    raise
                offset = start
                buffer = getattr(self._local, "buffer", None)
                if buffer is None:  # one per thread, reused: no allocation per chunk
                    buffer = self._local.buffer = memoryview(bytearray(DOWNLOAD_CHUNK_BYTES))
                with response["Body"] as body:
                    read_into = zero_copy_reader(body)
                    while count := read_into(buffer[: min(len(buffer), end + 1 - offset)]):
                        pwrite_all(descriptor, buffer[:count], offset)
                        offset += count
                    end_of_range(body, read_into, key, start, end, offset)
                if on_part:
                    on_part(end + 1 - start)
                return start, end + 1 - start

            total, written, hashed = 0, {}, 0
            hash_buffer = memoryview(bytearray(DOWNLOAD_CHUNK_BYTES if digest is not None else 0))
            starts = iter(range(0, size, self.part_bytes))
            with ThreadPoolExecutor(max_workers=self.threads) as pool:
                pending = {pool.submit(fetch, start) for start in itertools.islice(starts, 2 * self.threads)}
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in finished:
                        start, length = future.result()
                        total += length
                        if digest is not None:
                            written[start] = length
                        for start in itertools.islice(starts, 1):
                            pending.add(pool.submit(fetch, start))
                    # The written prefix grew: its new bytes are hashed here while the pool downloads the next ranges.
                    while digest is not None and hashed in written:
                        hashed = hash_from_file(descriptor, hashed, written.pop(hashed), digest, hash_buffer)
            if total != size:
                raise OSError(f"downloaded {total} of {size} bytes of {key}")
        finally:
            os.close(descriptor)
