"""Filesystem steps that must be atomic on the node's NVMe."""

from __future__ import annotations

import ctypes
import errno
import os
import resource
import stat
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_libc = ctypes.CDLL(None, use_errno=True)


def rename_no_replace(source: Path, target: Path) -> bool:
    """Atomically move `source` to `target` unless `target` exists; False when it does.

    renameat2(RENAME_NOREPLACE) makes "absent -> complete" one step: a pod that created the folder in the
    meantime keeps its own files, and nothing half-written is ever visible under `target`.
    """
    result = _libc.renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(target), _RENAME_NOREPLACE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.EEXIST:
        return False
    raise OSError(code, os.strerror(code), str(target))


def write_atomic(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write to a sibling temp file, fsync (unless `durable` is False: what only this boot may trust), then rename
    over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            if durable:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def is_non_empty_dir(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


_FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def remove_tree(path: Path) -> None:
    """Deletes `path` and everything under it, best effort, without following a link and without recursion.

    Pods write some of the trees the agent deletes (an old configuration's compile folder, a gone pod's record
    folder): a tree thousands of levels deep made shutil.rmtree raise RecursionError (Python <= 3.12), which
    ignore_errors does not cover, on every cleanup round. Here each folder's subfolders are moved up into the top
    folder (a rename, on the same filesystem) and its files unlinked, so at most two folders are open at a time
    and the depth of the tree costs nothing. A link is removed, never followed."""
    try:
        top = os.open(path, _FOLDER_FLAGS)
    except FileNotFoundError:
        return
    except OSError:  # a link or a file: remove the entry itself
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    try:
        while True:
            try:
                with os.scandir(top) as entries:
                    names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
            except OSError:
                break
            if not names:
                break
            for name, is_folder in names:
                if not is_folder:
                    _unlink(name, top)
                    continue
                _flatten(name, top)
    finally:
        os.close(top)
    try:
        os.rmdir(path)
    except OSError:
        pass


def _unlink(name: str, folder: int) -> None:
    try:
        os.unlink(name, dir_fd=folder)
    except OSError:
        pass


def _flatten(name: str, top: int) -> None:
    """Empties the folder `name` of `top` (its subfolders moved up into `top`, its files unlinked), then removes it."""
    try:
        inner = os.open(name, _FOLDER_FLAGS, dir_fd=top)
    except OSError:
        _unlink(name, top)
        return
    try:
        with os.scandir(inner) as entries:
            children = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
        for child, is_folder in children:
            if is_folder:
                try:
                    os.rename(child, f".flattened-{uuid.uuid4().hex}", src_dir_fd=inner, dst_dir_fd=top)
                except OSError:
                    pass
            else:
                _unlink(child, inner)
    except OSError:
        pass
    finally:
        os.close(inner)
    try:
        os.rmdir(name, dir_fd=top)
    except OSError:
        pass


def syncfs(descriptor: int) -> None:
    """syncfs(2) on the filesystem of an open descriptor: every file in one call, one journal commit instead of one
    per file. It raises for a writeback error of that filesystem since
    the descriptor was opened (Linux >= 5.8; docs/upstream-facts.md), so open it before the writes it must vouch for."""
    if _libc.syncfs(descriptor) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def allocate(descriptor: int, size: int) -> None:
    """The open file made `size` bytes long with its blocks allocated up front (fallocate(2), mode 0).

    Buffered writes into allocated blocks skip the filesystem's delayed allocation, which reserves space page by
    page under locks every writing thread shares: 8 threads writing 2 GiB in 64 KiB slices spent 0.7 s of CPU
    against 3.5 s into a sparse file (ext4, docs/upstream-facts.md). A full disk fails here, at once, instead of
    at writeback, where only the sync would see it. Where the filesystem cannot allocate (EOPNOTSUPP), the file
    is made sparse instead (ftruncate); glibc's posix_fallocate would write a zero byte every 4 KiB."""
    if size > 0:
        if _libc.fallocate(descriptor, 0, ctypes.c_int64(0), ctypes.c_int64(size)) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.EOPNOTSUPP, errno.ENOSYS):
            raise OSError(code, os.strerror(code))
    os.ftruncate(descriptor, size)


BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def current_boot_id(path: str = BOOT_ID_PATH) -> str | None:
    """The running kernel's boot id: a random UUID drawn at each boot, the same in every container of the node
    (docs/upstream-facts.md). Data written but not yet synced is good for as long as it stays the same. None where
    it cannot be read (a sandboxed runtime): then nothing unsynced is trusted."""
    try:
        with open(path) as handle:
            return handle.read(64).strip() or None
    except OSError:
        return None


@dataclass(frozen=True)
class DirectIoAlignment:
    """What a file asks of O_DIRECT transfers: their offset and length a multiple of `offset`, their memory of
    `memory` (bytes); 0 and 0: no direct I/O for this file."""

    offset: int
    memory: int


_AT_EMPTY_PATH = 0x1000
_STATX_DIOALIGN = 0x2000
# struct statx (include/uapi/linux/stat.h): stx_mask at 0, stx_dio_mem_align and stx_dio_offset_align at 152 and 156.
_STATX_BYTES = 256


def direct_io_alignment(descriptor: int) -> DirectIoAlignment | None:
    """The open file's direct-I/O alignment as the kernel reports it (statx, STATX_DIOALIGN, Linux >= 6.1); None
    where it does not (an older kernel or C library, or a filesystem that keeps it to itself, as tmpfs does)."""
    statx = getattr(_libc, "statx", None)
    if statx is None:
        return None
    answer = ctypes.create_string_buffer(_STATX_BYTES)
    if statx(descriptor, b"", _AT_EMPTY_PATH, _STATX_DIOALIGN, answer) != 0:
        return None
    (mask,) = struct.unpack_from("=I", answer.raw, 0)
    if not mask & _STATX_DIOALIGN:
        return None
    memory, offset = struct.unpack_from("=II", answer.raw, 152)
    return DirectIoAlignment(offset=offset, memory=memory)


def raise_open_files_limit() -> tuple[int, int]:
    """The process's soft limit on open descriptors raised to its hard limit; returns (before, after).

    A weights download holds two descriptors per file of its listing (FileWriter), up to `max_objects` files, all
    open at once. Since containerd 2.0 its service unit no longer raises the limit, so containers start with the
    system's soft 1024 under a hard 524288; Go programs raise theirs at start (Go >= 1.19), Python does not."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def keep_root_owned(folders: list[Path]) -> dict[str, str]:
    """Makes each of warmstart's node folders (the cache roots) owned by root and writable by its owner only, and
    says what it did to each it found otherwise: "fixed", or why it could not (the agent runs without CAP_CHOWN
    and CAP_FOWNER, so a folder another user owns stays as it is; the agent goes on). A container that reads a
    parent of them through `readOnly` (not recursively) and cannot become root is then kept out by the permissions
    alone (node_agent/host_path_policy.py admits such a mount).
    A link is left alone (kubelet's hostPath made the folders; the agent never follows one)."""
    changed: dict[str, str] = {}
    for folder in folders:
        try:
            descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # absent, or a link
        try:
            status = os.fstat(descriptor)
            if status.st_uid != 0 or status.st_gid != 0 or status.st_mode & 0o022:
                try:
                    os.fchown(descriptor, 0, 0)
                    os.fchmod(descriptor, stat.S_IMODE(status.st_mode) & ~0o022)
                    changed[str(folder)] = "fixed"
                except OSError as error:
                    changed[str(folder)] = f"not fixed: {error.strerror}"
        finally:
            os.close(descriptor)
    return changed
