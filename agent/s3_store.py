"""The one module that talks to S3 (boto3). Everything else gets a `CacheStore`."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

MISSING = {"404", "NoSuchKey", "NotFound"}
PRECONDITION_FAILED = {"412", "PreconditionFailed", "ConditionalRequestConflict"}


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


class CacheStore:
    def __init__(self, client, bucket: str, *, part_bytes: int = 64 * 2**20, threads: int = 8) -> None:
        self._s3 = client
        self.bucket = bucket
        self.part_bytes = part_bytes
        self.threads = threads

    def get_json(self, key: str) -> dict | None:
        try:
            body = self._s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as error:
            if _code(error) in MISSING:
                return None
            raise
        return json.loads(body)

    def exists(self, key: str) -> bool:
        try:
            self._s3.head_object(Bucket=self.bucket, Key=key)
        except ClientError as error:
            if _code(error) in MISSING:
                return False
            raise
        return True

    def put_json_if_absent(self, key: str, document: dict) -> bool:
        """Conditional create (If-None-Match: *): False when another writer got there first."""
        try:
            self._s3.put_object(
                Bucket=self.bucket,
                Key=key,
                Body=json.dumps(document, sort_keys=True).encode(),
                ContentType="application/json",
                IfNoneMatch="*",
            )
        except ClientError as error:
            if _code(error) in PRECONDITION_FAILED:
                return False
            raise
        return True

    def put_json(self, key: str, document: dict) -> None:
        self._s3.put_object(
            Bucket=self.bucket, Key=key, Body=json.dumps(document, sort_keys=True).encode(), ContentType="application/json"
        )

    def upload_file(self, path: Path, key: str) -> None:
        config = TransferConfig(multipart_threshold=self.part_bytes, multipart_chunksize=self.part_bytes,
                                max_concurrency=self.threads)
        self._s3.upload_file(str(path), self.bucket, key, Config=config)

    def delete(self, key: str) -> None:
        self._s3.delete_object(Bucket=self.bucket, Key=key)

    def download(self, key: str, destination: Path, size: int, on_part: Callable[[int], None] | None = None) -> None:
        """Parallel ranged GETs written in place (pwrite); raises on any short or failed part.

        The file is a temporary one: the caller verifies its checksum before using it and deletes it after,
        so it needs no fsync.
        """
        ranges = [(start, min(start + self.part_bytes, size) - 1) for start in range(0, size, self.part_bytes)]
        descriptor = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(descriptor, size)

            def fetch(byte_range: tuple[int, int]) -> int:
                start, end = byte_range
                response = self._s3.get_object(Bucket=self.bucket, Key=key, Range=f"bytes={start}-{end}")
                offset = start
                for chunk in response["Body"].iter_chunks(chunk_size=1 << 20):
                    offset += os.pwrite(descriptor, chunk, offset)
                if offset != end + 1:
                    raise IOError(f"short read of {key} bytes {start}-{end}: got {offset - start}")
                if on_part:
                    on_part(end + 1 - start)
                return end + 1 - start

            with ThreadPoolExecutor(max_workers=min(self.threads, max(1, len(ranges)))) as pool:
                total = sum(pool.map(fetch, ranges))
            if total != size:
                raise IOError(f"downloaded {total} of {size} bytes of {key}")
        finally:
            os.close(descriptor)
