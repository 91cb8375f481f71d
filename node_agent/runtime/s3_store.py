"""The one module that talks to S3 (boto3). Everything else gets a `CacheStore`."""

from __future__ import annotations

import base64
import builtins
import errno
import gzip
import hashlib
import itertools
import json
import mmap
import os
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import botocore.loaders
import botocore.session
from awscrt import checksums
from botocore.config import Config
from botocore.exceptions import ClientError

from node_agent.runtime.fs import DirectIoAlignment, allocate, direct_io_alignment
from node_agent.runtime.untrusted import Refused, parse_json, relative_key

MISSING = {"404", "NoSuchKey", "NotFound"}
# The small JSON objects the agent reads (manifests, last-use records): a few kB each.
JSON_MAX_BYTES = 2**20
DENIED = {"403", "AccessDenied", "Forbidden"}
# A compile archive's ranges are read into a per-thread buffer of this size and written from it.
DOWNLOAD_CHUNK_BYTES = 2**20
PAUSE_POLL_SECONDS = 1.0
# 412: another writer created the key first; 409 ConditionalRequestConflict: one is creating it right now.
PRECONDITION_FAILED = {"412", "PreconditionFailed", "409", "ConditionalRequestConflict"}


# Every call ends: a connection within 5 s, then no more than 20 s between bytes (a 64 MiB range streams far
# faster; a silent endpoint is given up), 4 attempts: under two minutes per call with the retries' backoff. An S3
# endpoint that accepts connections and never answers blocked one call for 367 s with boto3's defaults.
CONNECT_TIMEOUT_SECONDS = 5
READ_TIMEOUT_SECONDS = 20
ATTEMPTS = 4


def s3_client(region: str, *, connections: int, attempts: int = ATTEMPTS, **endpoint):
    """The agent's S3 client: bounded calls (above), adaptive retries, a connection per download stream.

    botocore's own session (what boto3.client wraps, the same credential chain: EKS Pod Identity's container
    credentials): boto3 would also import s3transfer, 0.2 s of the agent's start on 2 cores for nothing it uses."""
    session = botocore.session.get_session()
    session.register_component("data_loader", S3OnlyLoader.for_session(session))
    # The agent reads no time from S3; botocore would parse every one (dateutil, about 0.4 ms of CPU each: a GET's
    # Last-Modified, 1000 per listing page). They stay the strings S3 sent.
    session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=_as_sent)
    return session.create_client(
        "s3",
        region_name=region,
        config=Config(
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            read_timeout=READ_TIMEOUT_SECONDS,
            retries={"mode": "adaptive", "total_max_attempts": attempts},  # the first request included
            max_pool_connections=connections,
            # botocore would ask every GET for S3's checksum and CRC the whole body again: the agent checks what
            # it downloads itself (weights against S3's checksums, archives and manifests against the SHA-256
            # their publisher recorded), so it asks only where it reads the checksum (ChecksumMode="ENABLED").
            response_checksum_validation="when_required",
            s3={"addressing_style": "path"} if endpoint else None,
        ),
        **endpoint,
    )


class PlainJSONFileLoader(botocore.loaders.JSONFileLoader):
    """botocore's model files read into plain dicts, in one piece.

    botocore parses each file with an OrderedDict hook (a Python call per JSON object) and reads its gzip in
    chunks: the three files an S3 client loads (endpoints, S3's model, its endpoint rules; 3.5 MB of JSON) took
    35 ms to parse on 2 cores, 19 ms as plain dicts, which keep the files' order as well (the client's creation:
    45-50 ms, then 31-35 ms)."""

    def load_file(self, file_path):
        for extension, read in ((".json", Path.read_bytes), (".json.gz", lambda p: gzip.decompress(p.read_bytes()))):
            path = Path(file_path + extension)
            if path.is_file():
                return json.loads(read(path))
        return None


class S3OnlyLoader(botocore.loaders.Loader):
    """botocore's model loader, told that the agent's only service is S3.

    Before loading a model botocore checks that the service exists by listing every service's folders in its
    data: about 900 directory reads, 0.05-0.09 s of the agent's start on 2 cores, for ~400 services it never
    uses. This one looks in S3's folders alone, with the same test (a folder holding a file of that type)."""

    SERVICES = ("s3",)
    FILE_LOADER_CLASS = PlainJSONFileLoader

    @classmethod
    def for_session(cls, session) -> S3OnlyLoader:
        # What botocore's own factory would build: its search paths plus AWS_DATA_PATH's.
        data_path = session.get_config_variable("data_path")
        extra = [os.path.expanduser(os.path.expandvars(p)) for p in data_path.split(os.pathsep)] if data_path else []
        return cls(extra_search_paths=extra)

    def list_available_services(self, type_name: str) -> list[str]:
        return sorted(
            service
            for service in self.SERVICES
            if any(
                self.file_loader.exists(os.path.join(folder, version, type_name))
                for folder in self._potential_locations(service, must_exist=True, is_dir=True)
                for version in os.listdir(folder)
            )
        )


def _as_sent(value: str) -> str:
    return value


def pwrite_all(descriptor: int, data, offset: int) -> None:
    """pwrite may write less than asked (a filling disk); the retry then raises ENOSPC."""
    view = memoryview(data)
    while view:
        written = os.pwrite(descriptor, view, offset)
        if written == 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view, offset = view[written:], offset + written


# A buffer goes to the page cache in writes of this size. ext4 sizes a new page-cache folio by the write that
# creates it (Linux 6.17, docs/upstream-facts.md): 2 GiB in 4 MiB writes cost 6-7.5 s of system time here, in
# 32-256 KiB writes 0.6-2.5 s (2 cores, Linux 6.18, 2026-12-02). Up to 32 KiB a folio comes from the per-CPU page
# lists; on a VM whose host had taken its freed memory back, the agent's download of 2.1 GB cost 3.95 s of CPU in
# 64 KiB writes and 2.58 s in 32 KiB ones (medians of 9 interleaved runs, 2026-12-03).
WRITE_SLICE_BYTES = 32 * 2**10


def write_slices(buffer: memoryview) -> list[memoryview]:
    """The buffer cut once into views of WRITE_SLICE_BYTES (the last may be shorter), reused by every flush."""
    return [buffer[at : at + WRITE_SLICE_BYTES] for at in range(0, len(buffer), WRITE_SLICE_BYTES)]


def write_from_slices(descriptor: int, slices: list[memoryview], filled: int, offset: int) -> None:
    """The first `filled` bytes of the buffer cut by write_slices, written at `offset`, a slice per write.

    One pwrite per slice and no new view unless a write falls short. The generic loop (pwrite_all per slice) built
    three views and made two calls per 32 KiB: the agent's 2.1 GB download took 2.71 and 2.82 s of CPU with it,
    2.51 and 2.67 s with this one (two A/Bs of 9 interleaved runs, 2 cores, 2026-12-03)."""
    pwrite, size = os.pwrite, WRITE_SLICE_BYTES  # looked up once: this loop runs 32 times per MiB
    for piece in slices:
        if filled < size:  # the last piece: part of a slice, or all of the buffer's shorter last one
            if filled > 0:
                pwrite_all(descriptor, piece[:filled], offset)
            return
        written = pwrite(descriptor, piece, offset)
        if written != size:
            pwrite_all(descriptor, piece[written:], offset + written)
        offset += size
        filled -= size


def _code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


class MissingObject(IOError):
    """An object that should be there is not (a manifest naming a deleted archive)."""


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
        code = _code(error)
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
            if _code(error) in PRECONDITION_FAILED:
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
                    if _code(error) in PRECONDITION_FAILED:
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
            if _code(error) in PRECONDITION_FAILED:
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
                    read_into = _zero_copy_reader(body)
                    while count := read_into(buffer[: min(len(buffer), end + 1 - offset)]):
                        pwrite_all(descriptor, buffer[:count], offset)
                        offset += count
                    _end_of_range(body, read_into, key, start, end, offset)
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
                        hashed = _hash_from_file(descriptor, hashed, written.pop(hashed), digest, hash_buffer)
            if total != size:
                raise OSError(f"downloaded {total} of {size} bytes of {key}")
        finally:
            os.close(descriptor)


# ---- Model weights: listing, and downloads where every byte is checked against S3's own checksums ----


class Unverifiable(ValueError):
    """S3 gives no checksum for the object and its ETag is not an MD5: its bytes cannot be checked."""


class ObjectChanged(IOError):
    """The object changed in S3 while it was being downloaded (its ETag no longer matches the listing)."""


@dataclass(frozen=True)
class ListedObject:
    key: str
    size: int
    etag: str


@dataclass(frozen=True)
class _Check:
    """How one object's bytes are verified, and the byte ranges that verification needs."""

    kind: str  # "crc" (full object), "composite-crc", "md5", "multipart-md5"
    algorithm: str | None  # CRC64NVME | CRC32C | CRC32
    expected: str
    parts: list[tuple[int, int]]  # the upload's part boundaries (composite and multipart kinds)


_CRC = {
    "CRC64NVME": (checksums.crc64nvme, checksums.combine_crc64nvme, 8),
    "CRC32C": (checksums.crc32c, checksums.combine_crc32c, 4),
    "CRC32": (checksums.crc32, checksums.combine_crc32, 4),
}


def _crc_bytes(value: int, width: int) -> bytes:
    return value.to_bytes(width, "big")


# An O_DIRECT transfer starts and ends on a multiple of the file's direct-I/O alignment and sits in memory on the
# device's DMA alignment (open(2), "O_DIRECT"). Linux >= 6.1 reports both (statx, STATX_DIOALIGN: 512 on this VM's
# ext4); where it does not, writes are aligned to 4096, the largest logical block of NVMe drives and of md arrays
# built on them, and a refusal (EINVAL) sends the file through the page cache.
DIRECT_ALIGN = 4096
# The download threads' buffers are anonymous mappings: aligned to a page, no more.
PAGE_BYTES = mmap.PAGESIZE


def open_direct(path: Path) -> int | None:
    """A second, write-only descriptor of `path` whose writes bypass the page cache (O_DIRECT); None where the
    filesystem refuses the flag (EINVAL): that file is then written through the page cache alone."""
    try:
        return os.open(path, os.O_WRONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.EINVAL:
            return None
        raise


def direct_alignment(reported: DirectIoAlignment | None, buffer_bytes: int) -> int | None:
    """The boundary the agent's direct writes keep to, or None where they cannot be made: the filesystem says it
    does no direct I/O for the file (ext4 with data=journal, inline data, fs-verity), wants memory aligned beyond a
    page, or an offset alignment that the threads' buffers are not a multiple of."""
    if reported is None:  # not reported (Linux < 6.1, or the filesystem keeps it to itself): try the safe one
        return DIRECT_ALIGN
    if not reported.offset or not reported.memory or reported.memory > PAGE_BYTES:
        return None
    align = max(DIRECT_ALIGN, reported.offset)
    return align if buffer_bytes % align == 0 else None


class FileWriter:
    """One downloaded file's writes: whole blocks straight to the disk, the rest through the page cache.

    A buffered write allocates a page-cache page, copies into it and leaves it to be written back, and in the agent's
    1 GiB container every page it writes is charged to it, so a model of hundreds of GB is reclaimed from its own
    limit all the way down (docs/upstream-facts.md). Written with O_DIRECT, whole blocks go from the thread's buffer
    to the device as they arrive, and the sync after publication has only the files' tails, the extents' conversion
    and the device's cache left to flush. What is not a whole block at a block boundary (a file's tail; the head of
    a range that starts between blocks, an upload part of odd size) is a buffered write. One thread writes a file at
    a time: a buffered writer waiting for the inode's lock spins on a CPU, a Python lock's waiters sleep; aligned
    direct writes take that lock shared (ext4 since 6.3, xfs), and letting them overlap gained nothing here
    (3.63 s against 3.41 s for 2.1 GB, 5 runs each)."""

    def __init__(self, descriptor: int, direct: int | None, align: int = DIRECT_ALIGN) -> None:
        self.descriptor, self.direct, self.align = descriptor, direct, align
        self.lock = threading.Lock()
        self.page_cache_bytes = 0  # written through the page cache: the whole file where direct writes are refused

    @classmethod
    def create(cls, path: Path, size: int, buffer_bytes: int) -> FileWriter:
        """`path` made `size` bytes long, blocks allocated (fs.allocate), and opened for both kinds of write."""
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)  # RDWR: MD5 reads back
        try:
            allocate(descriptor, size)
            align = direct_alignment(direct_io_alignment(descriptor), buffer_bytes)
            direct = open_direct(path) if align is not None and size >= align else None
            return cls(descriptor, direct, align or DIRECT_ALIGN)
        except BaseException:
            os.close(descriptor)
            raise

    def head_bytes(self, start: int) -> int:
        """How much of a range starting at `start` goes before the first block boundary (0: none)."""
        return (-start) % self.align if self.direct is not None else 0

    def write(self, buffer: memoryview, slices: list[memoryview], filled: int, offset: int) -> None:
        """The first `filled` bytes of `buffer` (page-aligned, cut by write_slices) written at `offset`."""
        with self.lock:
            aligned = self.direct is not None and offset % self.align == 0
            whole = filled - filled % self.align if aligned else 0
            if whole and not self._write_direct(buffer[:whole], offset):
                whole = 0
            if not whole:
                write_from_slices(self.descriptor, slices, filled, offset)
            elif filled > whole:
                pwrite_all(self.descriptor, buffer[whole:filled], offset + whole)
            self.page_cache_bytes += filled - whole

    def _write_direct(self, data: memoryview, offset: int) -> bool:
        """False where the device refuses the transfer (EINVAL: its logical blocks are larger than the alignment, or
        a write fell short of a block and the rest is misaligned); from then on this file goes through the page
        cache, from `offset` again (what went directly is written again, the same bytes)."""
        direct = self.direct
        assert direct is not None  # write() asks only while there is one
        try:
            pwrite_all(direct, data, offset)
        except OSError as error:
            if error.errno != errno.EINVAL:
                raise
            self.direct = None
            os.close(direct)
            return False
        return True

    def close(self) -> None:
        direct, self.direct = self.direct, None
        try:
            os.close(self.descriptor)
        finally:
            if direct is not None:
                os.close(direct)


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

    def _check(self, item: ListedObject) -> _Check:
        try:
            head = self._s3.head_object(Bucket=self.bucket, Key=item.key, IfMatch=item.etag, ChecksumMode="ENABLED")
        except ClientError as error:
            if _code(error) in PRECONDITION_FAILED:
                raise ObjectChanged(f"{item.key} changed since it was listed") from error
            raise
        return self._check_from(head, item)

    def _check_from(self, response: dict, item: ListedObject) -> _Check:
        """The verification a HEAD or whole-object GET response allows (checksum headers, ETag)."""
        if response["ContentLength"] != item.size:
            raise ObjectChanged(f"{item.key} is {response['ContentLength']} bytes, listed as {item.size}")
        for algorithm in _CRC:
            value = response.get(f"Checksum{algorithm}")
            if value:
                if response.get("ChecksumType") == "COMPOSITE" or "-" in value:
                    parts = self._part_ranges(item, int(value.rsplit("-", 1)[1]))
                    return _Check("composite-crc", algorithm, value, parts)
                return _Check("crc", algorithm, value, [])
        encrypted_with_kms = response.get("ServerSideEncryption") == "aws:kms" or "SSECustomerAlgorithm" in response
        if not encrypted_with_kms and re.fullmatch(r"[0-9a-f]{32}", item.etag):
            return _Check("md5", None, item.etag, [])
        if not encrypted_with_kms and re.fullmatch(r"[0-9a-f]{32}-\d+", item.etag):
            return _Check("multipart-md5", None, item.etag, self._part_ranges(item, int(item.etag.split("-")[1])))
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
            if _code(error) in PRECONDITION_FAILED:
                raise ObjectChanged(f"{item.key} changed during the download") from error
            raise
        check = self._check_from(response, item) if whole else checks[item]
        # What can be hashed in one pass here; the rest is read back from the file (see _verify).
        crc_function = (
            _CRC[check.algorithm][0] if check.kind == "crc" or (check.kind == "composite-crc" and not whole) else None
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
            read_into = _zero_copy_reader(body)
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
            _end_of_range(body, read_into, item.key, start, end, offset)
        digest = md5.digest() if md5 else (crc if crc_function else None)
        return check, digest

    def _verify(self, item: ListedObject, check: _Check, ranges: builtins.list, descriptor: int) -> None:
        """Compares what the download computed, or what is read back from the file where it could not compute it
        while streaming, with what S3 says. Read-backs go through one small buffer: an object is never held in
        memory whole (a 5 GB single-PUT object in a 1 GiB container)."""
        if check.kind == "crc":
            _, combine, width = _CRC[str(check.algorithm)]  # crc kinds always name their algorithm
            total = 0
            for start, end, crc in ranges:
                total = combine(total, crc, end + 1 - start)
            actual = base64.b64encode(_crc_bytes(total, width)).decode()
        elif check.kind == "composite-crc":
            function, _, width = _CRC[str(check.algorithm)]
            part_crcs = (
                [crc for _, _, crc in ranges]
                if ranges[0][2] is not None
                else [d.value for d in _digests_from_file(descriptor, check.parts, lambda: _CrcDigest(function))]
            )
            joined = b"".join(_crc_bytes(crc, width) for crc in part_crcs)
            actual = f"{base64.b64encode(_crc_bytes(function(joined), width)).decode()}-{len(part_crcs)}"
        elif check.kind == "multipart-md5":
            digests = (
                [d for _, _, d in ranges]
                if ranges[0][2] is not None
                else [d.digest() for d in _digests_from_file(descriptor, check.parts, hashlib.md5)]
            )
            actual = f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"
        elif ranges and ranges[0][2] is not None:  # single-part MD5, hashed while streaming
            actual = ranges[0][2].hex()
        else:  # single-part MD5 of a large object fetched in parallel ranges: hash the complete file
            (digest,) = _digests_from_file(descriptor, [(0, item.size - 1)], hashlib.md5)
            actual = digest.hexdigest()
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


def _http_layers(body) -> tuple[object, object]:
    """The urllib3 response and the http.client response under a body: botocore's StreamingBody, or the urllib3
    response that StreamingBody's `with` gives."""
    response = getattr(body, "_raw_stream", body)
    return response, getattr(response, "_fp", None)


def _zero_copy_reader(body) -> Callable:
    """readinto straight from the HTTP response (socket into our buffer).

    urllib3's own readinto reads into a new bytes object and copies it: one allocation and one extra copy
    per buffer, a quarter of the agent's CPU per GB. The http.client response under it fills the buffer in
    place. Falls back to the public path if the layering differs (another HTTP stack).
    """
    _, raw = _http_layers(body)
    return raw.readinto if raw is not None and hasattr(raw, "readinto") else body.readinto


def _end_of_range(body, read_into: Callable, key: str, start: int, end: int, offset: int) -> None:
    """After a range's reads, which never go past it: more bytes from the server (it ignored the range) or fewer
    are refused; a complete body's connection goes back to the pool (a short body's is not one to reuse)."""
    if offset != end + 1:
        raise OSError(f"short read of {key} bytes {start}-{end}: got {offset - start}")
    if read_into(bytearray(1)):
        raise OSError(f"{key}: more bytes than asked for in {start}-{end}")
    _keep_connection(body)


def _keep_connection(body) -> None:
    """After a zero-copy read to the end, the connection goes back to urllib3's pool, as its own read would do;
    otherwise the body's close drops it and every request opens a new connection (a TLS handshake on S3)."""
    response, raw = _http_layers(body)
    isclosed = getattr(raw, "isclosed", None)
    if isclosed is not None and isclosed() and hasattr(response, "release_conn"):
        response.release_conn()


def _hash_from_file(descriptor: int, start: int, length: int, digest, buffer: memoryview) -> int:
    """`length` bytes of the file from `start` fed to `digest` through `buffer`; returns where they end."""
    offset, end = start, start + length
    while offset < end:
        count = os.preadv(descriptor, [buffer[: min(len(buffer), end - offset)]], offset)
        if not count:
            raise OSError(f"file shorter than expected at {offset}")
        digest.update(buffer[:count])
        offset += count
    return end


class _CrcDigest:
    """A running CRC with hashlib's `update`, so a file range can be fed to it through a buffer."""

    def __init__(self, function: Callable) -> None:
        self.function, self.value = function, 0

    def update(self, data) -> None:
        self.value = self.function(data, self.value)


def _digests_from_file(descriptor: int, ranges: list[tuple[int, int]], new_digest: Callable) -> list:
    """A fresh digest per (start, end) range, fed that range of the file through one reused buffer."""
    buffer = memoryview(bytearray(DOWNLOAD_CHUNK_BYTES))
    digests = []
    for start, end in ranges:
        digest = new_digest()
        _hash_from_file(descriptor, start, end + 1 - start, digest, buffer)
        digests.append(digest)
    return digests
