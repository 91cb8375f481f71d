"""The agent's filesystem allocation (fs.allocate), direct-I/O alignment (fs.direct_io_alignment) and its start-up
collector policy (collector.py)."""

from __future__ import annotations

import ctypes
import errno
import gc
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from node_agent.runtime import fs
from node_agent.runtime.collector import built_then_frozen


class RefusingLibc:
    """libc whose fallocate fails with `code`, as a filesystem without it (or a full one) answers."""

    def __init__(self, code: int) -> None:
        self.code, self.calls = code, 0

    def fallocate(self, *arguments) -> int:
        self.calls += 1
        ctypes.set_errno(self.code)
        return -1


@contextmanager
def new_file(path) -> Iterator[int]:
    """A new, empty file open for reading and writing, closed after the block."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        yield descriptor
    finally:
        os.close(descriptor)


def test_the_file_gets_its_size_and_its_blocks(tmp_path):
    with new_file(tmp_path / "weights") as descriptor:
        fs.allocate(descriptor, 5 * 2**20 + 3)
        stat = os.fstat(descriptor)
    assert stat.st_size == 5 * 2**20 + 3
    assert stat.st_blocks * 512 >= stat.st_size  # allocated, not sparse
    assert (tmp_path / "weights").read_bytes() == bytes(5 * 2**20 + 3)  # unwritten blocks read as zeros


def test_an_empty_object_makes_an_empty_file(tmp_path):
    with new_file(tmp_path / "empty") as descriptor:
        fs.allocate(descriptor, 0)  # fallocate refuses a zero length (EINVAL)
    assert (tmp_path / "empty").stat().st_size == 0


def test_a_filesystem_without_fallocate_gets_a_sparse_file(tmp_path, monkeypatch):
    libc = RefusingLibc(errno.EOPNOTSUPP)
    monkeypatch.setattr(fs, "_libc", libc)
    with new_file(tmp_path / "weights") as descriptor:
        fs.allocate(descriptor, 2**20)
        stat = os.fstat(descriptor)
    assert libc.calls == 1 and stat.st_size == 2**20 and stat.st_blocks == 0


def test_a_full_disk_is_an_error_not_a_sparse_file(tmp_path, monkeypatch):
    monkeypatch.setattr(fs, "_libc", RefusingLibc(errno.ENOSPC))
    with new_file(tmp_path / "weights") as descriptor:
        with pytest.raises(OSError) as raised:
            fs.allocate(descriptor, 2**20)
        assert raised.value.errno == errno.ENOSPC
        assert os.fstat(descriptor).st_size == 0


@pytest.fixture
def collector():
    """The test process's collector as it was, whatever the test froze or turned off."""
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_start_up_runs_without_the_collector_and_its_objects_are_frozen(collector):
    gc.enable()
    frozen_before = gc.get_freeze_count()
    with built_then_frozen():
        assert not gc.isenabled()
        kept = [[index] for index in range(10_000)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen_before + len(kept)


def test_a_collector_turned_off_before_start_up_stays_off(collector):
    gc.disable()
    with built_then_frozen():
        pass
    assert not gc.isenabled()


def test_the_collector_comes_back_when_start_up_fails(collector):
    gc.enable()
    with pytest.raises(RuntimeError), built_then_frozen():
        raise RuntimeError("settings refused")
    assert gc.isenabled()


def test_the_kernel_tells_a_files_direct_io_alignment_and_holds_writes_to_it(tmp_path):
    """statx's STATX_DIOALIGN (Linux >= 6.1) against the kernel itself: a direct write of one alignment unit at
    that offset goes through, half a unit at half the offset is refused (EINVAL)."""
    import mmap

    with new_file(tmp_path / "weights") as descriptor:
        fs.allocate(descriptor, 2**20)
        reported = fs.direct_io_alignment(descriptor)
    assert reported is not None, "this kernel or filesystem does not report STATX_DIOALIGN"
    unit = reported.offset
    assert unit >= 512 and unit & (unit - 1) == 0 and 0 < reported.memory <= mmap.PAGESIZE
    direct = os.open(tmp_path / "weights", os.O_WRONLY | os.O_DIRECT)
    buffer = mmap.mmap(-1, 2 * unit)
    try:
        buffer[:unit] = b"\x07" * unit
        assert os.pwrite(direct, memoryview(buffer)[:unit], unit) == unit
        with pytest.raises(OSError) as refused:
            os.pwrite(direct, memoryview(buffer)[: unit // 2], unit // 2)
        assert refused.value.errno == errno.EINVAL
    finally:
        buffer.close()
        os.close(direct)
    assert (tmp_path / "weights").read_bytes()[unit : 2 * unit] == b"\x07" * unit


class StatxLibc:
    """libc whose statx answers with `mask` (the fields it filled) and the two alignments."""

    def __init__(self, mask: int, memory: int = 512, offset: int = 512) -> None:
        self.mask, self.memory, self.offset = mask, memory, offset

    def statx(self, descriptor, path, flags, wanted, answer) -> int:
        import struct

        struct.pack_into("=I", answer, 0, self.mask)
        struct.pack_into("=II", answer, 152, self.memory, self.offset)
        return 0


@pytest.mark.parametrize(
    ("libc", "expected"),
    [
        (StatxLibc(0x2000 | 0x7FF, memory=512, offset=4096), fs.DirectIoAlignment(offset=4096, memory=512)),
        (StatxLibc(0x2000, memory=0, offset=0), fs.DirectIoAlignment(offset=0, memory=0)),  # no direct I/O
        (StatxLibc(0x7FF), None),  # the filesystem did not fill the field (tmpfs)
        (RefusingLibc(errno.ENOSYS), None),  # a C library without statx
    ],
)
def test_an_alignment_the_kernel_does_not_report_is_unknown_not_zero(tmp_path, monkeypatch, libc, expected):
    monkeypatch.setattr(fs, "_libc", libc)
    with new_file(tmp_path / "weights") as descriptor:
        assert fs.direct_io_alignment(descriptor) == expected


def test_the_agent_raises_its_open_files_limit_to_the_hard_one():
    """A container started with a soft 1024 (containerd >= 2.0) could open two descriptors for only ~500 files."""
    import resource
    import subprocess
    import sys

    script = (
        "import resource; from node_agent.runtime.fs import raise_open_files_limit; "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1])); "
        "print(*raise_open_files_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[1])"
    )
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard > 1024, "this machine's hard limit leaves nothing to raise"
    root = Path(__file__).resolve().parents[2]
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=root).stdout
    before, after, hard_in_child = map(int, output.split())
    assert (before, after) == (1024, hard_in_child) and hard_in_child == hard
