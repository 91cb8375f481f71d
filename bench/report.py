"""Shared output of the benchmarks: a plain table on stdout and every figure in bench/results/<name>.json."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "free_page_reporting": free_page_reporting(),
        "fresh_memory_gb_per_s": fresh_memory_gb_per_s(),
    }


def fresh_memory_gb_per_s(size: int = 256 * 2**20) -> float:
    """How fast this machine hands a process new memory: `size` bytes mapped and first touched a page at a time
    (the kernel's fault and zeroing of each page). Every run of the streamer and of the agent pays it for its
    buffers; on a nested VM it is slow and moves from run to run (0.6-2.0 GB/s on 2026-12-03's, where touching
    the same 2 GiB again took 0.16 s), so it is recorded with every result it can blur."""
    import mmap

    page = mmap.PAGESIZE
    region = mmap.mmap(-1, size)
    try:
        started = time.perf_counter()
        for offset in range(0, size, page):
            region[offset] = 1
        return round(size / 1e9 / (time.perf_counter() - started), 3)
    finally:
        region.close()


def free_page_reporting() -> bool:
    """A VM whose balloon device takes free memory back (virtio-balloon free page reporting): there a fresh buffer
    may be faulted in again from the host, so what a run pays for new memory varies with what the machine freed
    just before. Said beside the figures that it blurs."""
    return Path("/sys/module/page_reporting").exists() and any(
        Path("/sys/bus/virtio/drivers/virtio_balloon").glob("virtio*")
    )


def drop_caches() -> bool:
    """Written data synced and the page cache emptied: the next run reads cold and allocates its memory afresh,
    whatever the run before it left (root only; False where the kernel refuses)."""
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


@contextmanager
def memory_limited(
    limit_bytes: int, *, cgroup_root: Path = Path("/sys/fs/cgroup"), own: Path = Path("/proc/self/cgroup")
) -> Iterator[list[str] | None]:
    """A command prefix that runs its command in a memory cgroup of its own, limited to `limit_bytes` (what a
    container with that limit gets: its page cache counts against it, so its dirty pages are written back once
    they reach the limit), or None where this machine cannot make one (not root, no memory controller); the
    cgroup is removed afterwards. cgroup v1's memory hierarchy, or v2 beside this process's own cgroup."""
    name = f"warmstart-bench-{uuid.uuid4().hex[:12]}"
    folder, limit_file = None, ""
    try:
        memberships = [line.split(":", 2) for line in own.read_text().splitlines() if line.count(":") >= 2]
    except OSError:
        memberships = []
    v1 = [path for _, controllers, path in memberships if "memory" in controllers.split(",")]
    if v1 and (cgroup_root / "memory").is_dir():
        folder, limit_file = cgroup_root / "memory" / v1[0].lstrip("/") / name, "memory.limit_in_bytes"
    elif (cgroup_root / "cgroup.controllers").exists():
        v2 = [path for hierarchy, _, path in memberships if hierarchy == "0"]
        parent = cgroup_root / v2[0].lstrip("/") if v2 else cgroup_root
        parent = parent.parent if parent != cgroup_root else parent  # a sibling: a v2 parent holds no processes
        try:
            if "memory" in (parent / "cgroup.subtree_control").read_text().split():
                folder, limit_file = parent / name, "memory.max"
        except OSError:
            pass
    if folder is None:
        yield None
        return
    try:
        folder.mkdir()
    except OSError:
        yield None
        return
    try:
        (folder / limit_file).write_text(f"{limit_bytes}\n")
    except OSError:
        folder.rmdir()
        yield None
        return
    try:
        # The shell joins the cgroup, then becomes the command: everything it starts is limited.
        yield ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(folder / "cgroup.procs")]
    finally:
        try:
            folder.rmdir()  # empty once its processes have exited
        except OSError as error:
            print(f"memory cgroup {folder} left behind: {error}", file=sys.stderr)


def timed(action: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def median(values: list[float]) -> float:
    return statistics.median(values)


def machine_load() -> dict:
    """The machine's load averages (1, 5, 15 min) and the CPUs busy: recorded before and after a benchmark, so a
    ratio measured on a loaded machine says so."""
    one, five, fifteen = os.getloadavg()
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen, "cpus": os.cpu_count()}


def spread(values: list[float]) -> dict:
    return {"median": median(values), "min": min(values), "max": max(values), "runs": len(values)}


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float] | None:
    """The distribution-free confidence interval of the median: the k-th smallest and k-th largest values, k the
    largest rank with P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2 (the sign test's order statistics; no
    assumption about how the runs are distributed). None where there are too few values (under 6 at 95%)."""
    n, tail = len(values), (1 - confidence) / 2
    rank, below = 0, 0.0
    while rank < n // 2:
        below += math.comb(n, rank) / 2**n  # P(X = rank)
        if below > tail:
            break
        rank += 1
    if rank == 0:
        return None
    ordered = sorted(values)
    return ordered[rank - 1], ordered[n - rank]


def paired_ratio(top: list[float], bottom: list[float]) -> dict:
    """top / bottom, run by run (the runs interleave: A, B, A, B ...): each pair's ratio, their median, min and max,
    and whether the spread is wider than the gap to 1.0 (then the run does not tell the two apart); with enough
    pairs, the median's 95% interval too, and whether it leaves 1.0 out (the pairs do tell the two apart)."""
    pairs = [t / b for t, b in zip(top, bottom, strict=True) if t > 0 and b > 0]
    middle = median(pairs)
    half_spread = (max(pairs) - min(pairs)) / 2
    interval = median_interval(pairs)
    return {
        "ratio": middle,
        "min": min(pairs),
        "max": max(pairs),
        "pairs": pairs,
        "noisy": half_spread > abs(middle - 1),
        "median_95": list(interval) if interval else None,
        "apart": interval is not None and not interval[0] <= 1 <= interval[1],
    }


def said(name: str, ratio: dict) -> str:
    """A ratio with its spread, flagged where the spread exceeds the gap, and the median's interval."""
    flag = "  (spread wider than the gap: not told apart)" if ratio["noisy"] else ""
    interval = ratio.get("median_95")
    if interval:
        verdict = "leaves 1.0 out" if ratio["apart"] else "holds 1.0"
        flag += f"  median's 95% interval {interval[0]:.3f}-{interval[1]:.3f} ({verdict})"
    return f"{name}: {ratio['ratio']:.3f}x [{ratio['min']:.3f}-{ratio['max']:.3f}, {len(ratio['pairs'])} pairs]{flag}"


def table(rows: list[dict], columns: list[str]) -> str:
    widths = {c: max(len(c), *(len(_cell(r.get(c))) for r in rows)) for c in columns}
    lines = ["  ".join(c.ljust(widths[c]) for c in columns), "  ".join("-" * widths[c] for c in columns)]
    lines += ["  ".join(_cell(r.get(c)).ljust(widths[c]) for c in columns) for r in rows]
    return "\n".join(lines)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.3f}" if value < 100 else f"{value:.1f}"
    return "" if value is None else str(value)


def write(name: str, figures: dict, measured: dict | None = None) -> Path:
    """The figures in bench/results/<name>.json beside the machine's record: `measured` where the benchmark took it
    already (to print from it), else taken now."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    record = machine() if measured is None else measured
    path.write_text(json.dumps({"benchmark": name, "machine": record, **figures}, indent=2, sort_keys=True))
    return path
