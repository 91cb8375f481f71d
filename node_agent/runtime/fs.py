"""Filesystem steps that must be atomic on the node's NVMe."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import uuid
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


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a sibling temp file, fsync, then rename over `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(temporary, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def is_non_empty_dir(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def sync_filesystem(path: Path) -> None:
    """Flush the filesystem holding `path` in one call (syncfs): one journal commit instead of one per file."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        if _libc.syncfs(descriptor) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(path))
    finally:
        os.close(descriptor)
