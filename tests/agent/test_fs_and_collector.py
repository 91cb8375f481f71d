"""The agent's filesystem allocation (fs.allocate) and its start-up collector policy (collector.py)."""

from __future__ import annotations

import ctypes
import errno
import gc
import os

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


def open_new(path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)


def test_the_file_gets_its_size_and_its_blocks(tmp_path):
    descriptor = open_new(tmp_path / "weights")
    try:
        fs.allocate(descriptor, 5 * 2**20 + 3)
        stat = os.fstat(descriptor)
    finally:
        os.close(descriptor)
    assert stat.st_size == 5 * 2**20 + 3
    assert stat.st_blocks * 512 >= stat.st_size  # allocated, not sparse
    assert (tmp_path / "weights").read_bytes() == bytes(5 * 2**20 + 3)  # unwritten blocks read as zeros


def test_an_empty_object_makes_an_empty_file(tmp_path):
    descriptor = open_new(tmp_path / "empty")
    try:
        fs.allocate(descriptor, 0)  # fallocate refuses a zero length (EINVAL)
    finally:
        os.close(descriptor)
    assert (tmp_path / "empty").stat().st_size == 0


def test_a_filesystem_without_fallocate_gets_a_sparse_file(tmp_path, monkeypatch):
    libc = RefusingLibc(errno.EOPNOTSUPP)
    monkeypatch.setattr(fs, "_libc", libc)
    descriptor = open_new(tmp_path / "weights")
    try:
        fs.allocate(descriptor, 2**20)
        stat = os.fstat(descriptor)
    finally:
        os.close(descriptor)
    assert libc.calls == 1 and stat.st_size == 2**20 and stat.st_blocks == 0


def test_a_full_disk_is_an_error_not_a_sparse_file(tmp_path, monkeypatch):
    monkeypatch.setattr(fs, "_libc", RefusingLibc(errno.ENOSPC))
    descriptor = open_new(tmp_path / "weights")
    try:
        with pytest.raises(OSError) as raised:
            fs.allocate(descriptor, 2**20)
        assert raised.value.errno == errno.ENOSPC
        assert os.fstat(descriptor).st_size == 0
    finally:
        os.close(descriptor)


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
