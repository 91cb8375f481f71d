"""The benchmarks' statistics: the median's distribution-free interval and the paired ratio's verdicts."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
from pathlib import Path

import pytest

from bench import report


def _coverage(n: int, rank: int) -> float:
    """P(k-th smallest <= true median <= k-th largest) for any continuous distribution: 1 - 2 P(Bin(n,1/2) < k)."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(rank)) / 2**n


@pytest.mark.parametrize("n", range(1, 40))
def test_the_interval_is_the_widest_order_statistics_that_still_cover_95_percent(n):
    values = [float(v) for v in range(n)]
    interval = report.median_interval(values)
    if interval is None:
        assert _coverage(n, 1) < 0.95  # even min-max covers the median less often than 95%
        return
    rank = int(interval[0]) + 1
    assert interval == (values[rank - 1], values[n - rank])
    assert _coverage(n, rank) >= 0.95
    assert rank + 1 > n // 2 or _coverage(n, rank + 1) < 0.95  # one rank further in would not cover


def test_known_ranks_from_the_sign_test_table():
    # Binomial tables: n=6 -> ranks 1 and 6 (96.9%); n=9 -> 2 and 8 (96.1%); n=21 -> 6 and 16 (97.3%).
    assert report.median_interval(list(range(6))) == (0, 5)
    assert report.median_interval(list(range(9))) == (1, 7)
    assert report.median_interval(list(range(21))) == (5, 15)
    assert report.median_interval(list(range(5))) is None


def test_the_interval_covers_the_true_median_about_as_often_as_it_says():
    rng = random.Random(3)
    trials, covered = 2000, 0
    for _ in range(trials):
        values = [rng.lognormvariate(0, 0.3) for _ in range(15)]  # true median 1.0
        low, high = report.median_interval(values)
        covered += low <= 1.0 <= high
    assert 0.94 <= covered / trials <= 0.995


def test_a_paired_ratio_tells_the_sides_apart_only_when_the_interval_leaves_one_out():
    faster = report.paired_ratio([1.2, 1.3, 1.25, 1.1, 1.4, 1.22, 1.3, 1.15, 1.28], [1.0] * 9)
    assert faster["apart"] and faster["median_95"][0] > 1
    mixed = report.paired_ratio([0.9, 1.1, 1.0, 0.95, 1.05, 1.02, 0.98, 1.2, 0.8], [1.0] * 9)
    assert not mixed["apart"]
    few = report.paired_ratio([2.0, 2.1, 2.2], [1.0] * 3)
    assert few["median_95"] is None and not few["apart"]
    assert "leaves 1.0 out" in report.said("x", faster) and "holds 1.0" in report.said("x", mixed)


def _v1_tree(tmp_path):
    """A cgroup v1 layout as /sys/fs/cgroup shows it: this process in memory:/pods/agent."""
    root = tmp_path / "cgroup"
    (root / "memory" / "pods" / "agent").mkdir(parents=True)
    own = tmp_path / "self-cgroup"
    own.write_text("9:name=systemd:/\n4:memory:/pods/agent\n1:cpu,cpuacct:/\n0::/\n")
    return root, own


def test_a_v1_memory_cgroup_gets_the_limit_and_goes_afterwards(tmp_path):
    root, own = _v1_tree(tmp_path)
    with report.memory_limited(2**30, cgroup_root=root, own=own) as prefix:
        assert prefix is not None
        (folder,) = (root / "memory" / "pods" / "agent").iterdir()
        assert (folder / "memory.limit_in_bytes").read_text() == f"{2**30}\n"
        assert prefix[:3] == ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"']
        assert prefix[3] == str(folder / "cgroup.procs")
        (folder / "memory.limit_in_bytes").unlink()  # a real cgroup folder is empty to rmdir once its tasks exit
    assert list((root / "memory" / "pods" / "agent").iterdir()) == []


def test_a_v2_cgroup_is_made_beside_this_process_where_the_parent_delegates_memory(tmp_path):
    root = tmp_path / "cgroup"
    (root / "system.slice" / "bench.service").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "system.slice" / "cgroup.subtree_control").write_text("cpu memory\n")
    own = tmp_path / "self-cgroup"
    own.write_text("0::/system.slice/bench.service\n")
    with report.memory_limited(512 * 2**20, cgroup_root=root, own=own) as prefix:
        assert prefix is not None
        made = [p for p in (root / "system.slice").iterdir() if p.name.startswith("warmstart-bench-")]
        assert len(made) == 1 and (made[0] / "memory.max").read_text() == f"{512 * 2**20}\n"
        (made[0] / "memory.max").unlink()


@pytest.mark.parametrize(
    "subtree, own_line",
    [("cpu pids", "0::/system.slice/bench.service"), (None, "0::/system.slice/bench.service")],
)
def test_no_cgroup_where_the_parent_does_not_delegate_memory(tmp_path, subtree, own_line):
    root = tmp_path / "cgroup"
    (root / "system.slice" / "bench.service").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    if subtree is not None:
        (root / "system.slice" / "cgroup.subtree_control").write_text(subtree + "\n")
    own = tmp_path / "self-cgroup"
    own.write_text(own_line + "\n")
    with report.memory_limited(2**30, cgroup_root=root, own=own) as prefix:
        assert prefix is None
    assert sorted(p.name for p in (root / "system.slice").iterdir()) == ["bench.service"] + (
        ["cgroup.subtree_control"] if subtree is not None else []
    )


def test_no_cgroup_without_any_cgroup_filesystem(tmp_path):
    own = tmp_path / "self-cgroup"
    own.write_text("0::/\n")
    with report.memory_limited(2**30, cgroup_root=tmp_path / "absent", own=own) as prefix:
        assert prefix is None
    with report.memory_limited(2**30, cgroup_root=tmp_path / "absent", own=tmp_path / "no-proc") as prefix:
        assert prefix is None


def test_a_limit_the_kernel_refuses_leaves_no_cgroup_behind(tmp_path, monkeypatch):
    root, own = _v1_tree(tmp_path)
    real_write = Path.write_text

    def refuse_limits(self, data, *args, **kwargs):
        if self.name == "memory.limit_in_bytes":
            raise PermissionError(13, "Permission denied", str(self))
        return real_write(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", refuse_limits)
    with report.memory_limited(2**30, cgroup_root=root, own=own) as prefix:
        assert prefix is None
    assert list((root / "memory" / "pods" / "agent").iterdir()) == []


def _own_v1_memory_cgroup() -> Path | None:
    """This process's cgroup v1 memory folder where root may make a child in it, else None."""
    lines = Path("/proc/self/cgroup").read_text().splitlines() if Path("/proc/self/cgroup").exists() else []
    paths = [line.split(":", 2)[2] for line in lines if "memory" in line.split(":", 2)[1].split(",")]
    folder = Path("/sys/fs/cgroup/memory") / paths[0].lstrip("/") if paths else None
    return folder if folder and os.geteuid() == 0 and os.access(folder, os.W_OK) else None


def test_a_command_runs_inside_the_limited_cgroup_where_this_machine_allows_one():
    """The real thing: the command started through the prefix is in the new cgroup, under the limit. Where this
    machine has a writable v1 memory hierarchy and the tests run as root (as here and in CI), a cgroup must be
    made; elsewhere (v2 delegation, no root) only one that was made is checked."""
    must_make = _own_v1_memory_cgroup() is not None
    with report.memory_limited(2**30) as prefix:
        if prefix is None:
            assert not must_make, "root with a writable v1 memory hierarchy, yet no cgroup was made"
            pytest.skip("no memory cgroup can be made here (needs root and a memory controller)")
        shown = subprocess.run([*prefix, "cat", "/proc/self/cgroup"], capture_output=True, text=True, check=True)
        folder = Path(prefix[3]).parent
        limit = (folder / ("memory.limit_in_bytes" if must_make else "memory.max")).read_text().strip()
    assert folder.name.startswith("warmstart-bench-") and folder.name in shown.stdout
    assert int(limit) == 2**30
    assert not folder.exists()  # removed once the command exited


def test_the_machine_record_says_how_fast_new_memory_is_handed_out():
    """Every result carries the rate at which the machine faults new memory in (what blurs the streamer's runs on a
    nested VM): a measured rate, for the default region and a smaller one."""
    record = report.machine()
    assert isinstance(record["fresh_memory_gb_per_s"], float) and record["fresh_memory_gb_per_s"] > 0
    assert report.fresh_memory_gb_per_s(16 * 2**20) > 0


def test_a_result_records_the_machine_as_the_benchmark_measured_and_printed_it(tmp_path, monkeypatch):
    """A benchmark that printed from its own machine record writes that record, not a second measurement."""
    monkeypatch.setattr(report, "RESULTS", tmp_path)
    measured = {**report.machine(), "fresh_memory_gb_per_s": -1.0}  # no measurement gives this
    written = json.loads(report.write("example", {"pairs": 1}, measured).read_text())
    assert written["machine"] == measured and written["pairs"] == 1
    taken_now = json.loads(report.write("example", {"pairs": 1}).read_text())["machine"]
    assert set(taken_now) == set(measured) and taken_now["fresh_memory_gb_per_s"] > 0
