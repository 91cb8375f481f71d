"""Pack a cache folder into a zstd-compressed tar and unpack one safely (no links, no escapes)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import zstandard

from contracts.engine_caches import travels
from node_agent.runtime.fs import syncfs

COPY_BYTES = 2**20
ZSTD_LEVEL = 3  # compile artifacts compress well already at low levels; packing stays I/O-bound
# vLLM writes every hashed environment variable's raw value into this file, never reads it back (0.21.0,
# vllm/compilation/backends.py); secrets such as VLLM_API_KEY must not travel to S3 with the archive.
FACTORS_FILE = "cache_key_factors.json"
FACTORS_MAX_BYTES = 2**20  # vLLM writes a few kB; a larger one is left out of the archive (never read whole)
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)
REDACTED = "<redacted by warmstart>"
_READ_UNTRUSTED = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class PackedArchive:
    path: Path
    sha256: str
    size: int
    files: int
    names: list[str] = field(default_factory=list)  # the packed files, relative to the folder

    @property
    def content(self) -> str:
        return content_digest(self.names)


def content_digest(names: list[str]) -> str:
    """What a cache folder holds, by file name (16 hex): two archives of one configuration with the same digest
    hold the same files; a fuller one has more."""
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()[:16]


def packable_files(source: Path, *, max_files: int) -> list[str] | None:
    """The names (relative to `source`, a cache content folder) of the files pack() would take, walked the same way
    (no link followed); None past `max_files` (too many to publish anyway)."""
    found: list[str] = []
    for folder, subfolders, names, folder_fd in os.fwalk(source, follow_symlinks=False):
        subfolders.sort()
        relative = Path(folder).relative_to(source)
        for name in names:
            if not travels(str(relative / name)):
                continue
            try:
                info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISREG(info.st_mode) or (name == FACTORS_FILE and info.st_size > FACTORS_MAX_BYTES):
                continue
            found.append(str(relative / name))
            if len(found) > max_files:
                return None
    return sorted(found)


class _HashingWriter:
    def __init__(self, raw):
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data) -> int:
        self.sha256.update(data)
        self.size += len(data)
        return self._raw.write(data)

    def flush(self) -> None:
        self._raw.flush()


def redact_factors(data: bytes) -> bytes:
    """vLLM's factor record with secret-looking environment values replaced (hashes kept)."""
    try:
        document = json.loads(data)
    except ValueError:
        return data
    env = document.get("env") if isinstance(document, dict) else None
    if isinstance(env, dict):
        document["env"] = {
            k: (REDACTED if _SECRET_NAME.search(k) and v not in (None, "") else v) for k, v in env.items()
        }
    return json.dumps(document, indent=2, sort_keys=True).encode()


class TooLarge(ValueError):
    """The folder or archive is larger (or holds more files) than the compile cache may take."""


def pack(
    source: Path, destination: Path, *, max_bytes: int | None = None, max_files: int | None = None
) -> PackedArchive:
    """Regular files and folders only, in sorted order, so equal folders give equal archives; the node's own
    caches (contracts/engine_caches.py: which GPUs reach each other, the driver's JIT) are left out and vLLM's
    factor records are redacted.

    The folder is the pods' (vLLM writes it): every folder and file is opened relative to its parent without
    following a link and without blocking, and the file read is the one checked to be regular, so a pod that
    swaps a file for a link or a FIFO while the agent packs gets nothing outside the folder into the archive.
    """
    files, total = 0, 0
    packed: list[str] = []
    with open(destination, "wb") as raw:
        hashing = _HashingWriter(raw)
        compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        with compressor.stream_writer(hashing, closefd=False) as compressed:  # type: ignore[arg-type]  # a writer
            with tarfile.open(fileobj=compressed, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for folder, subfolders, names, folder_fd in os.fwalk(source, follow_symlinks=False):
                    subfolders.sort()
                    relative = Path(folder).relative_to(source)
                    for name in sorted(names):
                        if not travels(str(relative / name)):
                            continue
                        try:
                            descriptor = os.open(name, _READ_UNTRUSTED, dir_fd=folder_fd)
                        except OSError:
                            continue  # a link (ELOOP) or gone: not packed
                        with os.fdopen(descriptor, "rb") as handle:
                            info = os.fstat(handle.fileno())
                            if not stat.S_ISREG(info.st_mode):
                                continue
                            if name == FACTORS_FILE and info.st_size > FACTORS_MAX_BYTES:
                                continue  # read whole to redact: only a bounded one is read and packed
                            files, total = files + 1, total + info.st_size
                            packed.append(str(relative / name))
                            if (max_files is not None and files > max_files) or (
                                max_bytes is not None and total > max_bytes
                            ):
                                raise TooLarge(f"more than {max_files} files or {max_bytes} bytes to pack")
                            member = tar.gettarinfo(arcname=str(relative / name), fileobj=handle)
                            member.uid = member.gid = 0
                            member.uname = member.gname = ""
                            member.mtime = int(member.mtime)
                            if name == FACTORS_FILE:
                                data = redact_factors(handle.read(member.size))
                                member.size = len(data)
                                tar.addfile(member, io.BytesIO(data))
                            else:
                                tar.addfile(member, handle)
    return PackedArchive(
        path=destination,
        sha256=hashing.sha256.hexdigest(),
        size=hashing.size,
        files=files,
        names=packed,
    )


class UnsafeArchive(ValueError):
    """The archive holds something other than plain files and folders inside the target."""


# tarfile reads a pax or GNU long-name header whole before the member it describes is seen: a few kB of zstd could
# claim gigabytes there. warmstart's own headers hold a path or two (pack writes PAX_FORMAT).
HEADER_MAX_BYTES = 2**20
_HEADER_TYPES = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses an extended header over HEADER_MAX_BYTES, and GNU sparse members (warmstart writes none), before
    tarfile reads them."""

    def _proc_member(self, tarfile_):
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise UnsafeArchive(f"{self.name!r} is a GNU sparse member")
        if self.type in _HEADER_TYPES and self.size > HEADER_MAX_BYTES:
            raise UnsafeArchive(f"an extended header of {self.size} bytes (at most {HEADER_MAX_BYTES})")
        return super()._proc_member(tarfile_)


def _plain_files_only(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
    if not (member.isfile() or member.isdir()):
        raise UnsafeArchive(f"{member.name!r} is not a regular file or folder")
    return tarfile.data_filter(member, destination)  # rejects absolute paths and '..' escapes


class HashingReader:
    """A byte stream read through: its SHA-256 and size as it passes (an archive unpacked straight from S3 is
    checked against its manifest before the caller uses the folder)."""

    def __init__(self, raw) -> None:
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        self.sha256.update(data)
        self.size += len(data)
        return data

    def readable(self) -> bool:
        return True


def unpack(archive: Path, destination: Path, *, max_bytes: int | None = None, max_files: int | None = None) -> int:
    """Extracts into `destination` (which must be empty or absent); returns the number of files. Any node may
    have published the archive: more than `max_files` members or `max_bytes` unpacked (a compression bomb) is
    refused before it is written.

    The filesystem is synced at the end, so the folder the caller then renames into place is complete on
    disk even if the node crashes right after (a reboot keeps instance-store data).
    """
    with open(archive, "rb") as raw:
        return unpack_stream(raw, destination, max_bytes=max_bytes, max_files=max_files)


def unpack_stream(raw, destination: Path, *, max_bytes: int | None = None, max_files: int | None = None) -> int:
    """unpack() from a readable stream (a file, or an S3 response read through a HashingReader)."""
    destination.mkdir(parents=True, exist_ok=True)
    # Opened before the first write: its syncfs reports a writeback error of these files even when another
    # process's sync saw it first (fs.syncfs).
    errors = os.open(destination, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        files = _extract(raw, destination, max_bytes=max_bytes, max_files=max_files)
        syncfs(errors)
    finally:
        os.close(errors)
    return files


def _extract(raw, destination: Path, *, max_bytes: int | None, max_files: int | None) -> int:
    files, members, total = 0, 0, 0
    decompressor = zstandard.ZstdDecompressor()
    with decompressor.stream_reader(raw, closefd=False) as stream:
        # Members' bytes are copied in 1 MiB writes (tarfile's default, 16 KiB, is 64 write calls per MiB). The
        # stream's own read size stays tarfile's: each read copies what is left of that buffer. (typeshed's
        # overloads of tarfile.open leave out TarFile's copybufsize.)
        with tarfile.open(  # type: ignore[call-overload]
            fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo, copybufsize=COPY_BYTES
        ) as tar:
            for member in tar:
                members, total = members + 1, total + max(0, member.size)
                if (max_files is not None and members > 2 * max_files) or (max_bytes is not None and total > max_bytes):
                    raise UnsafeArchive(f"more than {max_files} files or {max_bytes} bytes unpacked")
                try:
                    tar.extract(member, destination, filter=_plain_files_only)
                except tarfile.FilterError as error:
                    raise UnsafeArchive(str(error)) from error
                files += member.isfile()
    return files
