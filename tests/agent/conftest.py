"""The agent tests' fixtures: a clock, an event log, a compile-cache store on the S3 server, a small disk."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from node_agent.runtime.log import EventLog
from node_agent.runtime.s3.compile_store import CacheStore
from tests.agent.compile_world import Clock
from tests.agent.weights_world import model_bucket  # noqa: F401 - the weights tests' fixture


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB filesystem (tmpfs): writes past it fail with ENOSPC, as on a full NVMe."""
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)], check=True)
    yield mount_point
    for _ in range(10):
        if subprocess.run(["umount", str(mount_point)]).returncode == 0:
            break
        time.sleep(0.2)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def log(clock) -> EventLog:
    return EventLog(clock, stream=open(os.devnull, "w"))


@pytest.fixture
def store(s3_server, bucket) -> CacheStore:
    return CacheStore(s3_server.client(), bucket, part_bytes=5 * 2**20, threads=4)
