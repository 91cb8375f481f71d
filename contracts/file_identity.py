"""The identity of each file of a verified weights copy, as the agent records it when it has verified every byte,
and the check the pods' endpoint and plugin make before they serve or stream a file.

A file's identity is its inode, size, modification and change times (nanoseconds) and link count. A same-size
rewrite in place changes its times (the change time cannot be set back by anyone), a replacement its inode, a
hard link its link count; a file is opened one path component at a time without following a link, so no folder
on the way may be swapped for a link either. The device is not compared: the array's device number may differ
after a reboot, and opening below the copy's own folder without following links stays on its filesystem unless
something is mounted there (root on the node).

Standard library only: the serving image runs it from the pod's ConfigMap, beside the endpoint and the plugin.
"""

from __future__ import annotations

import os
import re
import stat

# Per file: inode, size, mtime_ns, ctime_ns, nlink.
Identity = tuple[int, int, int, int, int]
# A relative path of plain parts (what the agent writes: S3 keys checked the same way before download).
_PART = re.compile(r"^[^/\x00-\x1f]+$")
MAX_FILES = 20_000  # the agent's listing cap for a model prefix
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def identity_of(status: os.stat_result) -> Identity:
    return (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_nlink)


def record_identities(folder: str, *, strict: bool = True) -> dict[str, list[int]]:
    """Every regular file under `folder` (links not followed), by its relative path: what the agent writes into the
    marker once it has verified the copy. Anything else than a folder or a regular file fails the record (left out
    where not `strict`)."""
    table: dict[str, list[int]] = {}
    for root, folders, names in os.walk(folder):
        for name in [*folders, *names]:
            status = os.lstat(os.path.join(root, name))
            if stat.S_ISDIR(status.st_mode):
                continue
            if not stat.S_ISREG(status.st_mode):
                if not strict:
                    continue
                raise OSError(f"{os.path.join(root, name)}: not a regular file in a copy the agent wrote")
            table[os.path.relpath(os.path.join(root, name), folder)] = list(identity_of(status))
    return table


def identities(marker: dict) -> dict[str, Identity] | None:
    """The marker's identity table, or None where it has none or one of another shape (a marker of an earlier
    version, or a damaged one: the copy is then not served)."""
    table = marker.get("identity")
    if not isinstance(table, dict) or not 0 < len(table) <= MAX_FILES:
        return None
    checked = {}
    for path, values in table.items():
        parts = path.split("/") if isinstance(path, str) else []
        if not parts or any(not _PART.match(p) or p in (".", "..") for p in parts):
            return None
        if not isinstance(values, list) or len(values) != 5:
            return None
        if any(type(v) is not int or v < 0 for v in values):
            return None
        checked[path] = tuple(values)
    return checked


def open_verified(folder: str, relative: str, expected: Identity) -> int | None:
    """A descriptor of `folder/relative` when it is the file the agent verified (no link on the way, the same
    identity); None otherwise. The caller closes it."""
    try:
        current = os.open(folder, _OPEN | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        parts = relative.split("/")
        for part in parts[:-1]:
            following = os.open(part, _OPEN | os.O_DIRECTORY, dir_fd=current)
            os.close(current)
            current = following
        descriptor = os.open(parts[-1], _OPEN, dir_fd=current)
    except OSError:
        return None
    finally:
        os.close(current)
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode) or identity_of(status) != expected:
        os.close(descriptor)
        return None
    return descriptor


def holds_only(folder: str, table: dict[str, Identity]) -> bool:
    """The copy holds exactly the verified files, each the same file: nothing added (a pad file beside a shard
    swapped for a link), nothing replaced or rewritten. The walk stats every entry without following it and refuses
    any link below the copy; the copy's own folder must not be one either."""
    try:
        if stat.S_ISLNK(os.lstat(folder).st_mode):
            return False
        found = record_identities(folder)
    except OSError:
        return False
    return {relative: tuple(values) for relative, values in found.items()} == table
