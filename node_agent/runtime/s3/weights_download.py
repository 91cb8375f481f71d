"""The weights download: an S3 prefix listed, ranges streamed in parallel onto the node's NVMe, each object
verified against its checksum and renamed into place only when whole."""

from __future__ import annotations

import builtins
import hashlib
import itertools
import mmap
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from botocore.exceptions import ClientError

from node_agent.runtime.direct_io import DIRECT_ALIGN, FileWriter, write_slices
from node_agent.runtime.s3.checksums import CRC_ALGORITHMS, Check, Unverifiable, computed_checksum
from node_agent.runtime.s3.client import (
    PRECONDITION_FAILED,
    ObjectChanged,
    end_of_range,
    error_code,
    zero_copy_reader,
)
from node_agent.runtime.untrusted import Refused, relative_key

# How often a paused download looks again whether it may go on.
PAUSE_POLL_SECONDS = 1.0


@dataclass(frozen=True)
class ListedObject:
    key: str
    size: int
    etag: str


class WeightsSource:
    """Reads one model bucket: paginated listings and verified, parallel, in-place downloads."""

    def __init__(
        self, client, bucket: str, *, part_bytes: int = 64 * 2**20, threads: int = 8, buffer_bytes: int = 8 * 2**20
    ) -> None:
        if buffer_bytes <= 0 or buffer_bytes % DIRECT_ALIGN:
            raise ValueError(
                f"buffer_bytes must be a positive multiple of {DIRECT_ALIGN} (direct writes), not {buffer_bytes}"
            )
        self._s3 = client
        self.bucket = bucket
        self.part_bytes = part_bytes
        self.threads = threads
        self.buffer_bytes = buffer_bytes
        self._local = threading.local()

    def list(self, prefix: str, *, max_objects: int | None = None) -> list[ListedObject]:
        """The objects under `prefix`; more than `max_objects` (the listing stops there), or a key that could
        not be a file below the copy's folder (`..`, an empty part, a control character), is Refused."""
        objects = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                if not item["Key"].endswith("/"):  # folder placeholders carry no data
                    relative_key(item["Key"], prefix)
                    objects.append(ListedObject(item["Key"], item["Size"], item["ETag"].strip('"')))
            if max_objects is not None and len(objects) > max_objects:
                raise Refused(f"more than {max_objects} objects under s3://{self.bucket}/{prefix}")
        return sorted(objects, key=lambda o: o.key)

    # -- what S3 says the bytes are --

    def _check(self, item: ListedObject) -> Check:
        try:
            head = self._s3.head_object(Bucket=self.bucket, Key=item.key, IfMatch=item.etag, ChecksumMode="ENABLED")
        except ClientError as error:
            if error_code(error) in PRECONDITION_FAILED:
                raise ObjectChanged(f"{item.key} changed since it was listed") from error
            raise
        return self._check_from(head, item)

    def _check_from(self, response: dict, item: ListedObject) -> Check:
        """The verification a HEAD or whole-object GET response allows (checksum headers, ETag)."""
        if response["ContentLength"] != item.size:
            raise ObjectChanged(f"{item.key} is {response['ContentLength']} bytes, listed as {item.size}")
        for algorithm in CRC_ALGORITHMS:
            value = response.get(f"Checksum{algorithm}")
            if value:
                if response.get("ChecksumType") == "COMPOSITE" or "-" in value:
                    parts = self._part_ranges(item, int(value.rsplit("-", 1)[1]))
                    return Check("composite-crc", algorithm, value, parts)
                return Check("crc", algorithm, value, [])
        encrypted_with_kms = response.get("ServerSideEncryption") == "aws:kms" or "SSECustomerAlgorithm" in response
        if not encrypted_with_kms and re.fullmatch(r"[0-9a-f]{32}", item.etag):
            return Check("md5", None, item.etag, [])
        if not encrypted_with_kms and re.fullmatch(r"[0-9a-f]{32}-\d+", item.etag):
            return Check("multipart-md5", None, item.etag, self._part_ranges(item, int(item.etag.split("-")[1])))
        raise Unverifiable(
            f"{item.key}: no S3 checksum and its ETag is not an MD5; re-upload it with a checksum "
            "(aws s3 cp --checksum-algorithm CRC64NVME) so warmstart can verify it"
        )

    def _part_ranges(self, item: ListedObject, count: int) -> builtins.list[tuple[int, int]]:
        def part(number: int) -> int:
            return self._s3.head_object(Bucket=self.bucket, Key=item.key, PartNumber=number, IfMatch=item.etag)[
                "ContentLength"
            ]

        with ThreadPoolExecutor(max_workers=min(16, count)) as pool:
            sizes = list(pool.map(part, range(1, count + 1)))
        if sum(sizes) != item.size:
            raise ObjectChanged(f"{item.key}: parts add up to {sum(sizes)} bytes, not {item.size}")
        ranges, start = [], 0
        for size in sizes:
            ranges.append((start, start + size - 1))
            start += size
        return ranges

    # -- the download --

    def download_all(
        self,
        items: builtins.list[ListedObject],
        destination: Path,
        prefix: str,
        on_bytes: Callable[[int], None] | None = None,
        pause: Callable[[], bool] | None = None,
    ) -> int:
        """Downloads every object under `destination` (paths relative to `prefix`) and verifies each; returns the
        bytes written through the page cache (FileWriter: all of them where the filesystem refuses direct writes).

        Objects up to one part are fetched whole, their checksum taken from the GET itself; larger ones are
        HEAD-ed first and fetched as ranges (aligned with their upload parts when the checksum needs it).
        All ranges share one thread pool; each is checksummed as it streams through a per-thread buffer and
        written in place, whole blocks straight to the disk (FileWriter). Nothing is synced here: the caller
        publishes the verified folder and then makes it durable (weights.py). Raises on the first failure.
        While `pause()` is true no new range starts (the ones in flight finish): a pod of this node streaming
        from S3 keeps the network to itself.
        """
        large = [item for item in items if item.size > self.part_bytes]
        with ThreadPoolExecutor(max_workers=self.threads) as pool:
            checks = dict(zip(large, pool.map(self._check, large), strict=False))
        files: dict[ListedObject, FileWriter] = {}
        jobs = []
        try:
            for item in items:
                path = destination / relative_key(item.key, prefix)
                path.parent.mkdir(parents=True, exist_ok=True)
                files[item] = FileWriter.create(path, item.size, self.buffer_bytes)
                if item in checks:
                    check = checks[item]
                    ranges = check.parts or [
                        (start, min(start + self.part_bytes, item.size) - 1)
                        for start in range(0, item.size, self.part_bytes)
                    ]
                    jobs += [(item, start, end, False) for start, end in ranges]
                else:
                    jobs.append((item, 0, item.size - 1, True))

            jobs = _spread(jobs)

            def run(job):
                while pause is not None and pause():
                    if on_bytes:
                        on_bytes(0)  # holding back for a pod is progress too (the agent's liveness)
                    time.sleep(PAUSE_POLL_SECONDS)
                return self._fetch(job, checks, files, on_bytes)

            with ThreadPoolExecutor(max_workers=self.threads) as pool:
                fetched = list(pool.map(run, jobs))
            results: dict[ListedObject, list] = {}
            for (item, start, end, _), (check, digest) in zip(jobs, fetched, strict=False):
                checks[item] = check
                results.setdefault(item, []).append((start, end, digest))
            for item, ranges in results.items():
                self._verify(item, checks[item], sorted(ranges), files[item].descriptor)
            return sum(target.page_cache_bytes for target in files.values())
        finally:
            for target in files.values():
                try:
                    target.close()
                except OSError:  # a write's failure surfaces in the write or in the caller's syncfs, never here
                    pass

    def _fetch(self, job, checks, files, on_bytes):
        """One range (or one whole object): returns its check and the digest computed while streaming."""
        item, start, end, whole = job
        request = {"Bucket": self.bucket, "Key": item.key, "IfMatch": item.etag}
        request |= {"ChecksumMode": "ENABLED"} if whole else {"Range": f"bytes={start}-{end}"}
        try:
            response = self._s3.get_object(**request)
        except ClientError as error:
            if error_code(error) in PRECONDITION_FAILED:
                raise ObjectChanged(f"{item.key} changed during the download") from error
            raise
        check = self._check_from(response, item) if whole else checks[item]
        # What can be hashed in one pass here; the rest is read back from the file (see _verify).
        crc_function = (
            CRC_ALGORITHMS[check.algorithm][0]
            if check.kind == "crc" or (check.kind == "composite-crc" and not whole)
            else None
        )
        md5 = (
            hashlib.md5() if (check.kind == "md5" and whole) or (check.kind == "multipart-md5" and not whole) else None
        )
        buffer = getattr(self._local, "buffer", None)
        if buffer is None:  # off the Python heap, page-aligned (O_DIRECT), returned with the download's threads
            buffer = self._local.buffer = memoryview(mmap.mmap(-1, self.buffer_bytes))
            self._local.slices = write_slices(buffer)
        slices = self._local.slices
        target = files[item]
        crc, offset, filled = 0, start, 0
        # A range that starts between two blocks (an upload part of odd size) first fills up to the next block, so
        # that every later buffer is written at a block boundary, straight to the disk.
        limit = target.head_bytes(start) or len(buffer)
        with response["Body"] as body:
            read_into = zero_copy_reader(body)
            while True:
                room = min(limit - filled, end + 1 - offset - filled)  # never past the range asked for
                count = read_into(buffer[filled : filled + room]) if room else 0
                if not count:
                    break
                chunk = buffer[filled : filled + count]
                if crc_function:
                    crc = crc_function(chunk, crc)
                elif md5:
                    md5.update(chunk)
                filled += count
                if on_bytes:
                    on_bytes(count)
                if filled == limit:
                    # Written by this thread before it reads on. A writer thread per stream with two buffers (the
                    # socket drained while the last buffer is written) was no faster: 1 GiB in 8 streams with 1 MiB
                    # direct writes took 1.35 s against 1.30 s and the server 1.52 against 1.53 s/GB of CPU (medians
                    # of 9 interleaved rounds, 2 cores, 2026-12-03).
                    target.write(buffer, slices, filled, offset)
                    offset, filled, limit = offset + filled, 0, len(buffer)
            target.write(buffer, slices, filled, offset)
            offset += filled
            end_of_range(body, read_into, item.key, start, end, offset)
        digest = md5.digest() if md5 else (crc if crc_function else None)
        return check, digest

    def _verify(self, item: ListedObject, check: Check, ranges: builtins.list, descriptor: int) -> None:
        """Compares what the download computed, or what is read back from the file, with what S3 says."""
        actual = computed_checksum(check, ranges, descriptor, item.size)
        if actual != check.expected:
            raise ObjectChanged(
                f"{item.key}: {check.kind} {check.algorithm or 'ETag'} is {actual}, S3 says {check.expected}"
            )


def _spread(jobs: list) -> list:
    """The large objects' ranges taken from each object in turn, and whole small objects spread between them.

    In turn: a buffered write holds its file's inode lock (ext4, xfs), so threads on one file queue behind each other;
    in key order all threads started on the first file (client CPU 6.6 s against 4.3 s for 2.1 GB, 2 cores). Mixed:
    a small object costs the client more CPU per byte (a request's signing and parsing) than the network, a range
    the reverse, so together they keep both busy (side by side with key order: 2.70 s against 2.98 s)."""
    by_object: dict[object, list] = {}
    for job in jobs:
        if not job[3]:
            by_object.setdefault(job[0], []).append(job)
    large = [job for turn in itertools.zip_longest(*by_object.values()) for job in turn if job is not None]
    small = [job for job in jobs if job[3]]
    if not large or not small:
        return large or small
    per = -(-len(small) // len(large))
    merged = []
    for index, job in enumerate(large):
        merged.append(job)
        merged += small[index * per : (index + 1) * per]
    return merged
