"""The one module that talks to AWS (boto3): the active sets, the listing, manifests, conditional deletes."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from botocore.exceptions import ClientError

from contracts.cache_key import (
    KEY_PATTERN,
    MANIFEST_MAX_BYTES,
    MAX_CACHE_FILES,
    PRUNER_LOCK_KEY,
    counts_fit,
    manifest_named,
)
from contracts.engine_caches import MAX_LISTED_CACHES, cache_name_ok
from contracts.pruner_report import PRUNER_REPORT_KEY
from pruner.runtime.selection import Listed, ManifestFacts

DELETE_BATCH = 1000  # DeleteObjects' maximum
RETRIES = 5
CHANGED = {"PreconditionFailed", "412"}  # the object was rewritten (or removed) since it was listed
GONE = {"NoSuchKey", "404"}
# DeleteObjects carries keys in XML 1.0, which cannot hold most control characters (S3 answers MalformedXML
# for the whole batch) and normalizes carriage returns (the wrong key would be deleted). S3 guide, "Creating
# object key names", XML related object key constraints. Such keys go one by one (the key is in the URL).
_NOT_XML_SAFE = re.compile("[\x00-\x1f\x7f-\x9f\ufffe\uffff]")


def xml_safe(key: str) -> bool:
    return _NOT_XML_SAFE.search(key) is None


def _whole(value: object, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value <= most


def manifest_facts(name: str, document: dict) -> ManifestFacts:
    """A manifest's archive and completeness; verified only if it is consistent with the key it is stored under
    (the key's digest, a name that its hash folders and file digest give) and its counts are in bounds: only such
    a manifest may make another one superseded. Hash folders, counts or sizes of the wrong shape count as none."""
    hash_dirs, files, size = document.get("hash_dirs"), document.get("files"), document.get("size")
    content, counts = document.get("content"), document.get("counts")
    folders = hash_dirs if isinstance(hash_dirs, list) and all(isinstance(d, str) for d in hash_dirs) else None
    files_ok = _whole(files, MAX_CACHE_FILES)
    counts_ok = folders is not None and files_ok and counts_fit(counts, folders, files)  # type: ignore[arg-type]
    match = KEY_PATTERN.match(name)
    named = folders is not None and manifest_named(name, folders, content)
    verified = bool(
        match and document.get("digest") == match.group("digest") and named and files_ok and _whole(size, 2**50)
    ) and (counts is None or counts_ok)
    listed = document.get("engine_caches")
    engine_caches = (
        frozenset(listed)
        if isinstance(listed, list) and len(listed) <= MAX_LISTED_CACHES and all(cache_name_ok(n) for n in listed)
        else frozenset()
    )
    return ManifestFacts(
        document["archive"],
        frozenset(folders or ()),
        files if files_ok else 0,  # type: ignore[arg-type]
        counts if counts_ok else None,
        size if _whole(size, 2**50) else 0,  # type: ignore[arg-type]
        verified,
        engine_caches,
    )


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


@dataclass
class DeleteResult:
    deleted: set[str] = field(default_factory=set)  # gone now (deleted by us or already absent)
    changed: set[str] = field(default_factory=set)  # rewritten since listed: kept
    single_requests: int = 0


LOCK_MAX_BYTES = 4096


def _lock_document(data: bytes) -> dict:
    try:
        document = json.loads(data) if len(data) <= LOCK_MAX_BYTES else None
    except (ValueError, RecursionError):
        document = None
    return document if isinstance(document, dict) else {}


def lock_until(data: bytes) -> datetime | None:
    """The lock's `until`, when it is an ISO time with a zone; None for garbage, naive times or oversized bodies."""
    until = _lock_document(data).get("until")
    try:
        parsed = datetime.fromisoformat(until) if isinstance(until, str) else None
    except ValueError:
        return None
    return parsed if parsed is not None and parsed.tzinfo is not None else None


def lock_expiry(data: bytes, last_modified: datetime, lifetime: timedelta) -> datetime:
    """When a held lock may be taken over: at its `until` (the run that wrote it said so); a lock without a valid
    `until` expires like a stale one, the lifetime after S3 stored it (its LastModified), so garbage stops the
    pruner for one lifetime at most, never forever."""
    until = lock_until(data)
    return last_modified + lifetime if until is None else until


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
                yield Listed(item["Key"], item["Size"], item["LastModified"], item.get("ETag", ""))

    def manifest_facts(self, manifest: Listed, unreadable: list[str]) -> ManifestFacts | None:
        """The archive a listed manifest names and how complete it is, read only if it is still the listed
        version. Any node can write a manifest: one larger than MANIFEST_MAX_BYTES is never read, one that is no
        JSON object (or nested past the parser's depth) or names no archive is unreadable; either is added to
        `unreadable`, and the caller keeps its key as it is. Hash folders or a file count of the wrong shape
        count as none (such a manifest is never taken for a fuller one)."""
        if manifest.size > MANIFEST_MAX_BYTES:
            unreadable.append(manifest.key)
            return None
        try:
            response = self._s3.get_object(Bucket=self.bucket, Key=manifest.key, IfMatch=manifest.etag)
            body = response["Body"].read(MANIFEST_MAX_BYTES + 1)
            response["Body"].close()
            document = json.loads(body) if len(body) <= MANIFEST_MAX_BYTES else None
        except ClientError as error:
            if _code(error) in CHANGED | GONE:
                return None
            raise
        except (ValueError, RecursionError):
            document = None
        if not isinstance(document, dict) or not isinstance(document.get("archive"), str):
            unreadable.append(manifest.key)
            return None
        return manifest_facts(manifest.key, document)

    def delete(self, objects: Iterable[Listed]) -> DeleteResult:
        """Conditional deletes (each object only if its ETag is still the listed one): DeleteObjects in
        batches of 1,000, keys XML cannot carry one by one; failed entries are retried, changed ones kept."""
        result = DeleteResult()
        batch: list[Listed] = []
        for item in objects:
            if not xml_safe(item.key):
                self._delete_one(item, result)
                continue
            batch.append(item)
            if len(batch) == DELETE_BATCH:
                self._delete_batch(batch, result)
                batch = []
        if batch:
            self._delete_batch(batch, result)
        return result

    @staticmethod
    def _identifier(item: Listed) -> dict:
        return {"Key": item.key, "ETag": item.etag} if item.etag else {"Key": item.key}

    def _delete_batch(self, items: list[Listed], result: DeleteResult) -> None:
        pending = {item.key: item for item in items}
        for attempt in range(RETRIES):
            try:
                response = self._s3.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [self._identifier(i) for i in pending.values()], "Quiet": True},
                )
            except ClientError as error:
                if _code(error) != "MalformedXML":
                    raise
                for item in pending.values():  # a key XML could not carry after all: one request each
                    self._delete_one(item, result)
                return
            retry = {}
            for failure in response.get("Errors", []):
                code, key = failure.get("Code", ""), failure["Key"]
                if code in CHANGED:
                    result.changed.add(key)
                elif code in GONE:
                    result.deleted.add(key)
                else:
                    retry[key] = pending[key]
            result.deleted |= set(pending) - set(retry) - result.changed
            if not retry:
                return
            pending = retry
            self._sleep(min(2**attempt * 0.2, 5))
        raise RuntimeError(f"{len(pending)} objects could not be deleted, e.g. {list(pending)[:3]}")

    def _delete_one(self, item: Listed, result: DeleteResult) -> None:
        for attempt in range(RETRIES):
            result.single_requests += 1
            try:
                self._s3.delete_object(
                    Bucket=self.bucket, Key=item.key, **({"IfMatch": item.etag} if item.etag else {})
                )
                result.deleted.add(item.key)
                return
            except ClientError as error:
                code = _code(error)
                if code in CHANGED:
                    result.changed.add(item.key)
                    return
                if code in GONE:
                    result.deleted.add(item.key)
                    return
                if attempt == RETRIES - 1:
                    raise
            self._sleep(min(2**attempt * 0.2, 5))

    def take_lock(
        self, run_id: str, now: datetime, until: datetime, on_takeover: Callable[[str], None] = lambda _: None
    ) -> bool:
        """One run at a time, without reserved concurrency (which accounts with a low concurrency quota refuse):
        the lock object is created only if absent (If-None-Match); a lock past its expiry (a run that died) is
        removed only if unchanged (If-Match) and taken again."""
        body = json.dumps({"run": run_id, "until": until.isoformat()}).encode()
        for _ in range(2):
            try:
                self._s3.put_object(Bucket=self.bucket, Key=PRUNER_LOCK_KEY, Body=body, IfNoneMatch="*")
                return True
            except ClientError as error:
                if _code(error) not in CHANGED | {"ConditionalRequestConflict", "409"}:
                    raise
            try:
                held = self._s3.get_object(Bucket=self.bucket, Key=PRUNER_LOCK_KEY)
            except ClientError as error:
                if _code(error) in GONE:
                    continue  # released meanwhile: try again
                raise
            held_body = held["Body"].read(LOCK_MAX_BYTES + 1)
            if lock_expiry(held_body, held["LastModified"], until - now) > now:
                return False
            try:
                self._s3.delete_object(Bucket=self.bucket, Key=PRUNER_LOCK_KEY, IfMatch=held["ETag"])
            except ClientError as error:
                if _code(error) not in CHANGED | GONE:
                    raise
                continue
            on_takeover(
                "the lock held no valid expiry (replaced after the lock lifetime)"
                if lock_until(held_body) is None
                else "the run that held it never released it (replaced after its expiry)"
            )
        return False

    def put_report(self, document: dict) -> None:
        """The last run's report, whole (a PUT replaces the object at once)."""
        body = json.dumps(document).encode()
        self._s3.put_object(Bucket=self.bucket, Key=PRUNER_REPORT_KEY, Body=body, ContentType="application/json")

    def release_lock(self, run_id: str) -> None:
        try:
            held = self._s3.get_object(Bucket=self.bucket, Key=PRUNER_LOCK_KEY)
            if _lock_document(held["Body"].read(LOCK_MAX_BYTES + 1)).get("run") == run_id:
                self._s3.delete_object(Bucket=self.bucket, Key=PRUNER_LOCK_KEY, IfMatch=held["ETag"])
        except ClientError as error:
            if _code(error) not in CHANGED | GONE:
                raise

    def stale_uploads(self, prefix: str, older_than: datetime) -> Iterator[tuple[str, str]]:
        for page in self._s3.get_paginator("list_multipart_uploads").paginate(Bucket=self.bucket, Prefix=prefix):
            for upload in page.get("Uploads", []):
                if upload["Initiated"] < older_than:
                    yield upload["Key"], upload["UploadId"]

    def abort(self, key: str, upload_id: str) -> None:
        try:
            self._s3.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except ClientError as error:
            if _code(error) != "NoSuchUpload":  # already gone: idempotent
                raise
