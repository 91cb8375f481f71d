"""Weights prefetch throughput: 4 x 512 MiB files plus 200 small files from a local S3 server, side by side
in the same run with `s5cmd cp` (the fastest S3 downloader we know), run as it is and in a memory cgroup with the
agent container's limit (as it would run in the agent's pod, where its page cache counts against that limit), and
the disk's own rate (dd, one O_DIRECT stream of as many bytes). warmstart verifies every byte against S3's checksums
and publishes the folder atomically; s5cmd does neither. s5cmd returns with its bytes in the page cache; the agent
writes whole blocks straight to the disk (O_DIRECT) and the rest through the page cache, publishes its verified copy
before the sync (trusted in this boot only), then syncs and marks it durable; that second time is set beside s5cmd
followed by `sync`. Reports MB/s, the ratios with their spread, client and
server CPU seconds per GB and peak memory. "With Python start-up" is a fresh agent process from its start to the
folder's publication; s5cmd's figure is its whole process.

Beside them, a native reference: AWS's own S3 client in C (awscrt's, bench/native_client_worker.py) at its defaults,
in a fresh process, whole parts written straight to the disk, nothing verified, no memory limit. Client and server
share this machine's cores: where even a native client is no faster than s5cmd, a gap is the machine's, not
Python's; the agent is set against it too.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from boto3.s3.transfer import TransferConfig  # noqa: E402

from bench import report  # noqa: E402
from bench.native_client_worker import direct_io_fallbacks  # noqa: E402
from contracts.agent_settings import AGENT_MEMORY_GIB, AgentSettings  # noqa: E402
from tests.s3_server import ACCESS_KEY, SECRET_KEY, SeaweedS3  # noqa: E402

# Nine pairs: the fewest whose median has a 95% interval that is not min-max (report.median_interval).
REPEATS = int(os.environ.get("BENCH_REPEATS", "9"))
BIG_FILES, BIG_BYTES = 4, 512 * 2**20
SMALL_FILES = 200
# The agent's own defaults, so the benchmark measures what runs on the nodes.
THREADS = AgentSettings.model_fields["download_threads"].default
PART_MIB = AgentSettings.model_fields["download_part_bytes"].default // 2**20
BUFFER_BYTES = AgentSettings.model_fields["download_buffer_bytes"].default


# A child's ru_maxrss starts at the forking parent's size (Linux keeps the pre-exec high-water mark): this
# benchmark's own ~110 MB. GNU time, small itself, reports the command's own peak.
GNU_TIME = "/usr/bin/time" if Path("/usr/bin/time").exists() else None


def run_measured(command: list[str], env: dict | None = None) -> dict:
    """Wall time, CPU (user + system) and peak resident memory (None without GNU time) of one child process;
    `started_monotonic`: when it was started, on the clock every process of the machine shares."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as peak:
        launcher = [GNU_TIME, "-f", "%M", "-o", peak.name] if GNU_TIME else []
        started, started_monotonic = time.perf_counter(), time.monotonic()
        process = subprocess.Popen(launcher + command, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
        peak_kb = peak.read().strip().splitlines()[-1:] if GNU_TIME else []
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(command)[-300:]} failed: {stderr[-2000:]}")
    return {
        "wall_s": wall,
        "started_monotonic": started_monotonic,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mb": int(peak_kb[0]) / 1024 if peak_kb and peak_kb[0].isdigit() else None,
        "stdout": stdout,
        "stderr": stderr,
    }


def make_model(folder: Path) -> int:
    rng = random.Random(7)
    total = 0
    for index in range(BIG_FILES):
        path = folder / f"model-{index + 1:05d}-of-{BIG_FILES:05d}.safetensors"
        with open(path, "wb") as handle:
            for _ in range(BIG_BYTES // 2**24):
                handle.write(rng.randbytes(2**24))
        total += BIG_BYTES
    for index in range(SMALL_FILES):
        data = rng.randbytes(rng.randint(1_000, 200_000))
        path = folder / "extras" / f"file-{index:03d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        total += len(data)
    return total


def upload_folder(server: SeaweedS3, source: Path, prefix: str) -> str:
    """A new bucket holding every file of `source` under `prefix`, with full-object checksums (as users upload)."""
    bucket = server.new_bucket()
    client = server.client(retries=3)
    upload = TransferConfig(multipart_threshold=64 * 2**20, multipart_chunksize=64 * 2**20, max_concurrency=4)
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        client.upload_file(
            str(path),
            bucket,
            f"{prefix}{path.relative_to(source)}",
            ExtraArgs={"ChecksumAlgorithm": "CRC64NVME"},
            Config=upload,
        )
    return bucket


def disk_write(target: Path, total: int) -> dict:
    """The disk's own rate: as many bytes in one sequential O_DIRECT stream (dd, 16 MiB blocks, synced at the end),
    a reference for what this disk takes, not a hard floor: its rate moves by a third from run to run on this VM,
    and the agent's parallel writes came out ahead of it in some runs."""
    blocks = -(-total // (16 * 2**20))
    result = run_measured(
        ["dd", "if=/dev/zero", f"of={target}", "bs=16M", f"count={blocks}", "oflag=direct", "conv=fsync", "status=none"]
    )
    target.unlink()
    return {"wall_s": result["wall_s"] * total / (blocks * 16 * 2**20), "cpu_s": result["cpu_s"], "peak_mb": None}


def server_cpu(server: SeaweedS3) -> float:
    """The S3 server's CPU seconds so far (user and system, /proc): what each client costs the server."""
    assert server.process is not None
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle() -> None:
    """Each run starts with no dirty pages left by the one before (untimed)."""
    subprocess.run(["sync"], check=True)


def compiled_worker_env(work: Path) -> dict:
    """The agent process's environment as its image gives it: bytecode compiled ahead. The image compiles the agent's
    sources when it is built (Dockerfile) and pip compiled its packages, so a node's agent never compiles at start;
    where PYTHONDONTWRITEBYTECODE is set (as on this machine) a worker would compile the agent's modules at every start
    (30 ms here). The worker reads and writes its bytecode in a folder of this run's own (the repository is left
    alone), written by the untimed warm-up before each run (settle_alike)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    return env | {"PYTHONPYCACHEPREFIX": str(work / "bytecode")}


def settle_alike(server: SeaweedS3, s5cmd: str, worker_env: dict | None = None) -> None:
    """Before each timed run: the page cache emptied (report.drop_caches), then the server's stored objects and
    every tool's program read back into it (the agent's and the native client's modules imported, `s5cmd version`
    run). On this VM a run's speed otherwise depends on what the run before it left in memory (the second run of a
    pair came out up to 1.7x slower); the server would read from disk in one run and not in another; and a tool
    would start from a cold disk, which on a node whose image was just pulled it does not."""
    if not report.drop_caches():
        return
    for path in sorted(p for p in server.data.rglob("*") if p.is_file()):
        with open(path, "rb") as handle:
            while handle.read(16 * 2**20):
                pass
    for worker in ("weights_worker.py", "native_client_worker.py"):
        subprocess.run([sys.executable, str(ROOT / "bench" / worker), "--imports-only"], check=True, env=worker_env)
    subprocess.run([s5cmd, "version"], check=True, stdout=subprocess.DEVNULL)


def tree_equal(a: Path, b: Path) -> bool:
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    if files_a != files_b:
        return False
    return all(subprocess.run(["cmp", "-s", a / f, b / f]).returncode == 0 for f in files_a)


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="warmstart-bench-", dir=os.environ.get("BENCH_DIR")))
    server = SeaweedS3(work / "s3").start()
    s5cmd = shutil.which("s5cmd") or str(Path(sys.executable).parent / "s5cmd")
    runs: dict[str, list[dict]] = {
        "warmstart": [],
        "warmstart_process": [],
        "warmstart_durable": [],
        "s5cmd": [],
        "s5cmd_then_sync": [],
        "s5cmd_agent_memory": [],
        "native_client": [],
        "disk": [],
    }
    cleanup = ExitStack()
    try:
        # s5cmd as it would run in the agent's pod: its page cache counted against the agent container's limit.
        agent_memory = cleanup.enter_context(report.memory_limited(AGENT_MEMORY_GIB * 2**30))
        source = work / "source"
        source.mkdir()
        total = make_model(source)
        bucket = upload_folder(server, source, "model/")
        credentials = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1"}
        env = {**os.environ, **credentials}
        worker_env = compiled_worker_env(work)
        load_before = report.machine_load()

        def run_ours(attempt: int) -> None:
            ours_root = work / f"warmstart-{attempt}"
            server_before = server_cpu(server)
            result = run_measured(
                [
                    sys.executable,
                    str(ROOT / "bench" / "weights_worker.py"),
                    server.endpoint,
                    ACCESS_KEY,
                    SECRET_KEY,
                    bucket,
                    "model/",
                    str(ours_root),
                    str(THREADS),
                    str(PART_MIB),
                    str(BUFFER_BYTES),
                ],
                env=worker_env,
            )
            result["server_cpu_s"] = server_cpu(server) - server_before
            result.pop("stderr")
            outcome = json.loads(result.pop("stdout").strip().splitlines()[-1])
            assert outcome["status"] == "downloaded", outcome
            verified = outcome["bytes"] == total and tree_equal(source, Path(outcome["folder"]))
            # From the process's start to the folder's publication (start-up, imports and client included); the
            # interpreter's teardown after it is kept beside it: the daemon never pays it.
            result["exit_s"] = result["wall_s"] - (outcome["published_monotonic"] - result["started_monotonic"])
            result["wall_s"] -= result["exit_s"]
            runs["warmstart_process"].append({**result, "verified": verified})
            # In the agent: the sync alone (the daemon's start-up is not part of any download).
            runs["warmstart"].append(
                {
                    "wall_s": outcome["sync_s"],
                    "cpu_s": result["cpu_s"],
                    "peak_mb": result["peak_mb"],
                    "verified": verified,
                }
            )
            # Until the copy is on disk and marked durable (the agent's sync after publishing).
            runs["warmstart_durable"].append(
                {"wall_s": outcome["durable_s"], "cpu_s": result["cpu_s"], "peak_mb": result["peak_mb"]}
            )
            shutil.rmtree(ours_root)

        def run_s5cmd(attempt: int, prefix: list[str] | None = None) -> None:
            target = work / f"s5cmd-{attempt}"
            server_before = server_cpu(server)
            result = run_measured(
                (prefix or [])
                + [s5cmd, "--endpoint-url", server.endpoint, "cp", f"s3://{bucket}/model/*", f"{target}/"],
                env=env,
            )
            result["server_cpu_s"] = server_cpu(server) - server_before
            result.pop("stdout")
            result.pop("stderr")
            if prefix:  # in the agent's memory limit
                runs["s5cmd_agent_memory"].append(result)
            else:
                # s5cmd returns with its bytes still in the page cache; what it takes to have them on disk:
                flushed = run_measured(["sync", "-f", str(target)])
                runs["s5cmd_then_sync"].append(
                    {
                        "wall_s": result["wall_s"] + flushed["wall_s"],
                        "cpu_s": result["cpu_s"] + flushed["cpu_s"],
                        "peak_mb": result["peak_mb"],
                    }
                )
                runs["s5cmd"].append(result)
            result["byte_equal"] = tree_equal(source, target)
            shutil.rmtree(target)

        def run_s5cmd_limited(attempt: int) -> None:
            run_s5cmd(attempt, agent_memory)

        def run_native_client(attempt: int) -> None:
            target = work / f"native-{attempt}"
            server_before = server_cpu(server)
            result = run_measured(
                [sys.executable, str(ROOT / "bench" / "native_client_worker.py"), server.endpoint, bucket, "model/"]
                + [str(target)],
                env=worker_env | credentials,
            )
            result["server_cpu_s"] = server_cpu(server) - server_before
            result["direct_io_fallbacks"] = direct_io_fallbacks(result.pop("stderr"))
            outcome = json.loads(result.pop("stdout").strip().splitlines()[-1])
            # To the last object written (not synced, as s5cmd's); the interpreter's teardown is not counted, as for
            # the agent.
            result["wall_s"] = outcome["done_monotonic"] - result["started_monotonic"]
            result["byte_equal"] = tree_equal(source, target)
            runs["native_client"].append(result)
            shutil.rmtree(target)

        tools = [run_ours, run_s5cmd, run_native_client] + ([run_s5cmd_limited] if agent_memory else [])
        for attempt in range(REPEATS):
            # The order rotates (no tool always follows another), and each run starts alike: nothing of the run
            # before in memory, the server's objects in the page cache (as S3 serves them warm).
            for run in tools[attempt % len(tools) :] + tools[: attempt % len(tools)]:
                settle_alike(server, s5cmd, worker_env)
                run(attempt)
            settle()
            runs["disk"].append(disk_write(work / f"disk-{attempt}", total))
    finally:
        cleanup.close()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    # Which cgroup it ran in: v1 and v2 write a cgroup's dirty pages back differently (docs/upstream-facts.md).
    agent_memory_cgroup = str(Path(agent_memory[3]).parent) if agent_memory else None
    if agent_memory_cgroup:
        print(f"s5cmd in the agent's memory limit: cgroup {agent_memory_cgroup}")
    else:
        print("s5cmd in the agent's memory limit: not run (a memory cgroup needs root and a memory controller)")
        del runs["s5cmd_agent_memory"]
    gb = total / 1e9
    summary = {}
    for tool, results in runs.items():
        wall = report.median([r["wall_s"] for r in results])
        summary[tool] = {
            "mb_per_s": total / 1e6 / wall,
            "wall_s": wall,
            "cpu_s_per_gb": report.median([r["cpu_s"] for r in results]) / gb,
            "peak_mb": max((r["peak_mb"] for r in results if r["peak_mb"] is not None), default=None),
        }
    walls = {tool: [r["wall_s"] for r in results] for tool, results in runs.items()}
    spreads = {  # as fast as s5cmd: its time over ours, pair by pair (the runs interleave)
        "warmstart_over_s5cmd": report.paired_ratio(walls["s5cmd"], walls["warmstart"]),
        "warmstart_process_over_s5cmd": report.paired_ratio(walls["s5cmd"], walls["warmstart_process"]),
        # The native reference against s5cmd, and the agent against it (both with start-up).
        "native_client_over_s5cmd": report.paired_ratio(walls["s5cmd"], walls["native_client"]),
        "warmstart_process_over_native_client": report.paired_ratio(walls["native_client"], walls["warmstart_process"]),
        # Against the disk's own rate for as many bytes, measured in the same attempt (the reference).
        "warmstart_over_disk": report.paired_ratio(walls["disk"], walls["warmstart"]),
        # Both on disk: the agent's copy durable against s5cmd followed by sync.
        "warmstart_durable_over_s5cmd_then_sync": report.paired_ratio(
            walls["s5cmd_then_sync"], walls["warmstart_durable"]
        ),
    }
    if agent_memory:
        spreads["warmstart_process_over_s5cmd_agent_memory"] = report.paired_ratio(
            walls["s5cmd_agent_memory"], walls["warmstart_process"]
        )
    server_cpu_per_gb = {
        tool: report.median([r["server_cpu_s"] for r in runs[tool]]) / gb
        for tool in ("warmstart_process", "s5cmd", "native_client", "s5cmd_agent_memory")
        if tool in runs
    }
    ratios = {
        "warmstart_over_s5cmd": summary["warmstart"]["mb_per_s"] / summary["s5cmd"]["mb_per_s"],
        "warmstart_process_over_s5cmd": summary["warmstart_process"]["mb_per_s"] / summary["s5cmd"]["mb_per_s"],
        "warmstart_durable_over_s5cmd_then_sync": summary["warmstart_durable"]["mb_per_s"]
        / summary["s5cmd_then_sync"]["mb_per_s"],
        "warmstart_over_disk": summary["warmstart"]["mb_per_s"] / summary["disk"]["mb_per_s"],
        "native_client_over_s5cmd": summary["native_client"]["mb_per_s"] / summary["s5cmd"]["mb_per_s"],
    }
    rows = [{"tool": tool, **values} for tool, values in summary.items()]
    native_runs = runs["native_client"]
    print(
        f"weights prefetch: {BIG_FILES} x 512 MiB + {SMALL_FILES} small files ({total / 1e6:.0f} MB), "
        f"median of {REPEATS}"
    )
    print(report.table(rows, ["tool", "mb_per_s", "wall_s", "cpu_s_per_gb", "peak_mb"]))
    print(
        f"warmstart/s5cmd: {ratios['warmstart_over_s5cmd']:.3f} (with Python start-up: "
        f"{ratios['warmstart_process_over_s5cmd']:.3f})   "
        f"warmstart durable/(s5cmd + sync): {ratios['warmstart_durable_over_s5cmd_then_sync']:.3f}   "
        f"warmstart/disk: {ratios['warmstart_over_disk']:.3f}   "
        f"every byte verified: {all(r['verified'] for r in runs['warmstart'])}   "
        f"native client (verifies nothing)/s5cmd: {ratios['native_client_over_s5cmd']:.3f}, its copies byte-equal: "
        f"{all(r['byte_equal'] for r in native_runs)}, bodies it wrote through the page cache per run "
        f"(not whole pages: small objects, odd last parts): {max(r['direct_io_fallbacks'] for r in native_runs)}"
    )
    for name, spread in spreads.items():
        print(report.said(name, spread))
    ours, theirs, native = (server_cpu_per_gb[tool] for tool in ("warmstart_process", "s5cmd", "native_client"))
    limited = server_cpu_per_gb.get("s5cmd_agent_memory")
    print(
        f"server CPU s/GB: warmstart {ours:.3f}, s5cmd {theirs:.3f}, native client {native:.3f}"
        + (f", s5cmd in the agent's memory limit {limited:.3f}" if limited is not None else "")
    )
    # Client and server share the machine's cores here: their CPU together, spread over every core, is a floor too.
    cpus = os.cpu_count() or 1
    cpu_floor = {
        tool: (summary[tool]["cpu_s_per_gb"] + server_cpu_per_gb[tool]) * gb / cpus
        for tool in ("warmstart_process", "s5cmd", "native_client")
    }
    print(
        f"floors: the disk {summary['disk']['wall_s']:.2f} s; client + server CPU over {cpus} cores: warmstart "
        f"{cpu_floor['warmstart_process']:.2f} s, s5cmd {cpu_floor['s5cmd']:.2f} s, native client "
        f"{cpu_floor['native_client']:.2f} s"
    )
    teardown = report.median([r["exit_s"] for r in runs["warmstart_process"]])
    print(
        "warmstart with Python start-up: from the process's start to the folder published; what follows "
        f"({teardown:.3f} s: the sync to disk, in the durable row, and the interpreter's teardown, which the daemon "
        "never pays) is not counted"
    )
    print(f"load before {load_before['load_1m']:.2f}, after {report.machine_load()['load_1m']:.2f}")
    print(
        "wrote",
        report.write(
            "weights_prefetch",
            {
                "total_bytes": total,
                "threads": THREADS,
                "part_mib": PART_MIB,
                "summary": summary,
                "ratios": ratios,
                "spreads": spreads,
                "server_cpu_s_per_gb": server_cpu_per_gb,
                "cpu_floor_s": cpu_floor,
                "agent_memory_cgroup": agent_memory_cgroup,
                "load_before": load_before,
                "runs": runs,
            },
        ),
    )


if __name__ == "__main__":
    main()
