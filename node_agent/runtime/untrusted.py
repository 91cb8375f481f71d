"""Reading what a workload, another node or S3 wrote: never trusted, never fatal, never a path.

A pod can put anything in a folder it writes: a link to /dev/zero or to another node file, a FIFO that blocks a
reader, a file of many gigabytes, JSON nested a million deep or of the wrong types. Every such file is opened
without following links and without blocking, checked to be a regular file under a size cap before one byte is
read, parsed as JSON (any parser failure, recursion included, is a refusal) and then validated against a strict
typed schema. A refusal is an exception the caller logs, counts and skips; it never stops a loop.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from typing import Any

# Names the agent accepts from a listing it does not control (a pod's record folder, a vLLM hash folder):
# one plain path component, no dot-only names, nothing a path could be built out of.
SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# Kubernetes pod UIDs (RFC 4122 text form, as the API server generates them).
POD_UID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Refused(ValueError):
    """An untrusted input the agent will not use; `reason` is short and safe to log (no input echoed)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def safe_name(name: object) -> str:
    if not isinstance(name, str) or not SAFE_NAME.fullmatch(name):
        raise Refused("not a plain file name")
    return name


def read_capped(name: str, *, dir_fd: int | None = None, max_bytes: int) -> bytes:
    """The bytes of a regular file (not a link, FIFO, device or folder) of at most `max_bytes`."""
    try:
        descriptor = os.open(name, _OPEN_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        raise Refused(f"cannot open: {os.strerror(error.errno or 0) or type(error).__name__}") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise Refused("not a regular file")
        if info.st_size > max_bytes:
            raise Refused(f"{info.st_size} bytes, more than the {max_bytes} allowed")
        chunks, left = [], max_bytes + 1
        while left > 0:
            chunk = os.read(descriptor, min(left, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:  # it grew after the fstat
            raise Refused(f"more than the {max_bytes} bytes allowed")
        return data
    finally:
        os.close(descriptor)


def parse_json(data: bytes) -> Any:
    """JSON with finite numbers only; any parser failure (bad UTF-8, syntax, nesting too deep) is a refusal."""

    def no_constant(name: str) -> float:
        raise ValueError(f"{name} is not a number")

    try:
        return json.loads(data, parse_constant=no_constant)
    except (ValueError, RecursionError, UnicodeDecodeError, TypeError) as error:
        raise Refused(f"not JSON ({type(error).__name__})") from None


def read_json(name: str, *, dir_fd: int | None = None, max_bytes: int) -> Any:
    return parse_json(read_capped(name, dir_fd=dir_fd, max_bytes=max_bytes))


def finite(value: object) -> float | None:
    """A finite number (not a bool, NaN or infinity), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def open_folder(name: str, *, dir_fd: int | None = None) -> int:
    """A descriptor on a real folder (a link to one is refused)."""
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as error:
        raise Refused(f"not a folder: {os.strerror(error.errno or 0)}") from None


def read_json_beneath(root: str, parts: list[str], *, max_bytes: int) -> Any:
    """A JSON file `root/parts...`, every folder on the way opened without following a link (a pod that
    owns a folder on the way can point nothing elsewhere)."""
    folder = open_folder(root)
    try:
        for part in parts[:-1]:
            inner = open_folder(safe_name(part), dir_fd=folder)
            os.close(folder)
            folder = inner
        return read_json(safe_name(parts[-1]), dir_fd=folder, max_bytes=max_bytes)
    finally:
        os.close(folder)


def beneath_folder_names(root: str, parts: list[str], *, limit: int = 1024) -> list[str]:
    """The plain-named real folders in `root/parts...` (links and odd names left out, at most `limit`), every folder
    on the way opened without following a link; none when the path is not there."""
    try:
        folder = open_folder(root)
    except Refused:
        return []
    try:
        for part in parts:
            inner = open_folder(safe_name(part), dir_fd=folder)
            os.close(folder)
            folder = inner
        names: list[str] = []
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False) and SAFE_NAME.fullmatch(entry.name):
                    names.append(entry.name)
                    if len(names) >= limit:
                        break
        return sorted(names)
    except Refused:
        return []
    finally:
        os.close(folder)


_KEY_PART = re.compile(r"^[^\x00-\x1f\x7f]{1,255}$")


def relative_key(key: str, prefix: str) -> str:
    """An S3 `key` below `prefix`, as a relative file path that stays inside the folder it is copied to."""
    relative = key[len(prefix) :] if key.startswith(prefix) else ""
    parts = relative.split("/") if relative else []
    unsafe = any(part in ("", ".", "..") or not _KEY_PART.fullmatch(part) for part in parts)
    if not parts or len(relative) > 1024 or unsafe:
        raise Refused(f"the object key {key[:200]!r} is no file path below the model's prefix")
    return relative
