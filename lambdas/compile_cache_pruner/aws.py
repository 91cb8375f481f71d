"""The one module that talks to AWS (boto3): the active sets, the listing, batched deletes."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Iterable, Iterator

from botocore.exceptions import ClientError

from lambdas.compile_cache_pruner.selection import Listed

DELETE_BATCH = 1000  # DeleteObjects' maximum
RETRIES = 5


class PrunerAws:
    def __init__(self, s3, ssm, bucket: str, *, sleep=time.sleep) -> None:
        self._s3 = s3
        self._ssm = ssm
        self.bucket = bucket
        self._sleep = sleep

    def parameter(self, name: str) -> str:
        return self._ssm.get_parameter(Name=name)["Parameter"]["Value"]

    def listing(self, prefix: str) -> Iterator[Listed]:
        """Every object under the prefix, in key order, one page (1,000 keys) at a time."""
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                yield Listed(item["Key"], item["Size"], item["LastModified"])

    def delete(self, objects: Iterable[Listed]) -> int:
        """DeleteObjects in batches of 1,000 (quiet), retrying the keys S3 reports as failed."""
        deleted, batch = 0, []
        for item in objects:
            batch.append(item.key)
            if len(batch) == DELETE_BATCH:
                deleted += self._delete_batch(batch)
                batch = []
        if batch:
            deleted += self._delete_batch(batch)
        return deleted

    def _delete_batch(self, keys: list[str]) -> int:
        pending = keys
        for attempt in range(RETRIES):
            response = self._s3.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in pending], "Quiet": True}
            )
            failed = [error["Key"] for error in response.get("Errors", [])]
            if not failed:
                return len(keys)
            pending = failed
            self._sleep(min(2**attempt * 0.2, 5))
        raise RuntimeError(f"{len(pending)} objects could not be deleted, e.g. {pending[:3]}")

    def stale_uploads(self, prefix: str, older_than: datetime) -> Iterator[tuple[str, str]]:
        for page in self._s3.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=prefix):
            for upload in page.get("Uploads", []):
                if upload["Initiated"] < older_than:
                    yield upload["Key"], upload["UploadId"]

    def abort(self, key: str, upload_id: str) -> None:
        try:
            self._s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "NoSuchUpload":  # already gone: idempotent
                raise
