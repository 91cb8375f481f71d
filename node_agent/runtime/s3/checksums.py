"""S3's full-object checksums (CRC32, CRC32C, CRC64NVME, SHA-1, SHA-256) computed from the bytes on disk, so that
a download is verified before it is used."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass

from awscrt import checksums

from node_agent.runtime.s3.client import DOWNLOAD_CHUNK_BYTES

# ---- Model weights: listing, and downloads where every byte is checked against S3's own checksums ----


class Unverifiable(ValueError):
    """S3 gives no checksum for the object and its ETag is not an MD5: its bytes cannot be checked."""


@dataclass(frozen=True)
class Check:
    """How one object's bytes are verified, and the byte ranges that verification needs."""

    kind: str  # "crc" (full object), "composite-crc", "md5", "multipart-md5"
    algorithm: str | None  # CRC64NVME | CRC32C | CRC32
    expected: str
    parts: list[tuple[int, int]]  # the upload's part boundaries (composite and multipart kinds)


CRC_ALGORITHMS = {
    "CRC64NVME": (checksums.crc64nvme, checksums.combine_crc64nvme, 8),
    "CRC32C": (checksums.crc32c, checksums.combine_crc32c, 4),
    "CRC32": (checksums.crc32, checksums.combine_crc32, 4),
}


def crc_bytes(value: int, width: int) -> bytes:
    return value.to_bytes(width, "big")


def hash_from_file(descriptor: int, start: int, length: int, digest, buffer: memoryview) -> int:
    """`length` bytes of the file from `start` fed to `digest` through `buffer`; returns where they end."""
    offset, end = start, start + length
    while offset < end:
        count = os.preadv(descriptor, [buffer[: min(len(buffer), end - offset)]], offset)
        if not count:
            raise OSError(f"file shorter than expected at {offset}")
        digest.update(buffer[:count])
        offset += count
    return end


class CrcDigest:
    """A running CRC with hashlib's `update`, so a file range can be fed to it through a buffer."""

    def __init__(self, function: Callable) -> None:
        self.function, self.value = function, 0

    def update(self, data) -> None:
        self.value = self.function(data, self.value)


def digests_from_file(descriptor: int, ranges: list[tuple[int, int]], new_digest: Callable) -> list:
    """A fresh digest per (start, end) range, fed that range of the file through one reused buffer."""
    buffer = memoryview(bytearray(DOWNLOAD_CHUNK_BYTES))
    digests = []
    for start, end in ranges:
        digest = new_digest()
        hash_from_file(descriptor, start, end + 1 - start, digest, buffer)
        digests.append(digest)
    return digests


def computed_checksum(check: Check, ranges: list, descriptor: int, size: int) -> str:
    """The object's checksum as S3 writes it, from what the download computed per range (start, end, value), or read
    back from the file where it could not compute it while streaming. Read-backs go through one small buffer: an
    object is never held in memory whole (a 5 GB single-PUT object in a 1 GiB container)."""
    if check.kind == "crc":
        _, combine, width = CRC_ALGORITHMS[str(check.algorithm)]  # crc kinds always name their algorithm
        total = 0
        for start, end, crc in ranges:
            total = combine(total, crc, end + 1 - start)
        return base64.b64encode(crc_bytes(total, width)).decode()
    if check.kind == "composite-crc":
        function, _, width = CRC_ALGORITHMS[str(check.algorithm)]
        part_crcs = (
            [crc for _, _, crc in ranges]
            if ranges[0][2] is not None
            else [d.value for d in digests_from_file(descriptor, check.parts, lambda: CrcDigest(function))]
        )
        joined = b"".join(crc_bytes(crc, width) for crc in part_crcs)
        return f"{base64.b64encode(crc_bytes(function(joined), width)).decode()}-{len(part_crcs)}"
    if check.kind == "multipart-md5":
        digests = (
            [d for _, _, d in ranges]
            if ranges[0][2] is not None
            else [d.digest() for d in digests_from_file(descriptor, check.parts, hashlib.md5)]
        )
        return f"{hashlib.md5(b''.join(digests)).hexdigest()}-{len(digests)}"
    if ranges and ranges[0][2] is not None:  # single-part MD5, hashed while streaming
        return ranges[0][2].hex()
    # single-part MD5 of a large object fetched in parallel ranges: hash the complete file
    (digest,) = digests_from_file(descriptor, [(0, size - 1)], hashlib.md5)
    return digest.hexdigest()
