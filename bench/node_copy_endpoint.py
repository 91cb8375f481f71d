"""How a pod reads the node's node copy against the same files read as local paths: the real Run:ai streamer
(vLLM's runai_streamer loader) reading a 2 GB model three ways, interleaved (the order rotating), on 2 cores and
pinned to 1, with the CPU seconds per GB of the streamer (the client) and of the endpoint (the server, in its own
process):
- `plugin`: what a pod does now, the files warmstart's vLLM plugin lists for the model URI (the node copy's own
  files) with the environment the entry step sets (endpoint variables, plugin variables);
- `endpoint`: the streamer's S3 client through the loopback endpoint (the pod's fallback when vLLM does not load
  the plugin, and how vLLM's config pull reads the copy);
- `local`: the same files given to the streamer directly, the reference.
All read from the page cache (the files are read once, untimed) into a 256 MiB streamer buffer
(cold_node_streaming.STREAMER): the comparison is of the read path, not of how fast the machine faults new
memory in, which `bench/results/node_copy_endpoint.json` records beside it.

`BENCH_QUICK=1` runs 3 rounds on 2 cores only (a minute or two, for development).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from bench.cold_node_streaming import STREAMER, make_model, warm  # noqa: E402
from model_workload.runtime.node_copy_loader import FOLDER_VARIABLE, MODEL_VARIABLE  # noqa: E402
from model_workload.runtime.vllm_entry import NODE_COPY_ENV  # noqa: E402

QUICK = os.environ.get("BENCH_QUICK") == "1"
PAIRS = 3 if QUICK else 9  # 9: enough for the median's 95% interval (report.paired_ratio, from 6 on)
BUCKET, PREFIX = "models", "model/"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """A running process's user and system CPU so far (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def endpoint(folder: Path, cpus: str) -> tuple[subprocess.Popen, str]:
    code = (
        "import sys; from pathlib import Path; from model_workload.runtime.node_copy_s3 import NodeCopyServer; "
        f"s = NodeCopyServer(bucket={BUCKET!r}, prefix={PREFIX!r}, folder=Path(sys.argv[1])); "
        "print(s.endpoint, flush=True); s.serve_forever()"
    )
    process = subprocess.Popen(
        ["taskset", "-c", cpus, sys.executable, "-c", code, str(folder)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def stream(paths: list[str], env: dict, cpus: str) -> dict:
    """One streamer process: its wall time and CPU (rusage)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        ["taskset", "-c", cpus, sys.executable, str(ROOT / "bench" / "streamer_worker.py"), *paths],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(process.pid, 0)
    assert process.stdout is not None and process.stderr is not None
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(process.stderr.read().decode()[-2000:])
    result = json.loads(process.stdout.read().decode().strip().splitlines()[-1])
    return {**result, "wall_s": time.perf_counter() - started, "cpu_s": usage.ru_utime + usage.ru_stime}


def run(folder: Path, names: list[str], cpus: str) -> dict:
    server, url = endpoint(folder, cpus)
    env = {  # what the pod's entry step sets for the node copy
        **os.environ,
        **STREAMER,
        **NODE_COPY_ENV,
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "unused",
        "AWS_SECRET_ACCESS_KEY": "unused",
        "AWS_DEFAULT_REGION": "us-east-1",
        # what the entry step adds for vLLM's plugin (PYTHONPATH aside: the worker imports it from the project)
        FOLDER_VARIABLE: str(folder),
        MODEL_VARIABLE: f"s3://{BUCKET}/{PREFIX}",
        "PYTHONPATH": str(ROOT),
    }
    paths = {
        "plugin": ["--plugin", f"s3://{BUCKET}/{PREFIX}"],
        "endpoint": [f"s3://{BUCKET}/{PREFIX}{name}" for name in names],
        "local": [str(folder / name) for name in names],
    }
    sides = list(paths)
    runs: dict[str, list[dict]] = {side: [] for side in sides}
    load_before = report.machine_load()
    try:
        for side in sides:  # once each, untimed: the first runs after the server starts are the slowest
            stream(paths[side], env, cpus)
        for attempt in range(PAIRS):
            for side in sides[attempt % 3 :] + sides[: attempt % 3]:  # each side first, middle and last in turn
                before = cpu_seconds(server.pid)
                result = stream(paths[side], env, cpus)
                result["server_cpu_s"] = cpu_seconds(server.pid) - before
                runs[side].append(result)
    finally:
        server.terminate()
        server.wait()
    gb = runs["local"][0]["bytes"] / 1e9
    return {
        "cpus": cpus,
        "ratio": report.paired_ratio([r["seconds"] for r in runs["endpoint"]], [r["seconds"] for r in runs["local"]]),
        "plugin_ratio": report.paired_ratio(
            [r["seconds"] for r in runs["plugin"]], [r["seconds"] for r in runs["local"]]
        ),
        "plugin_gb_per_s": report.spread([gb / r["seconds"] for r in runs["plugin"]]),
        "endpoint_gb_per_s": report.spread([gb / r["seconds"] for r in runs["endpoint"]]),
        "local_gb_per_s": report.spread([gb / r["seconds"] for r in runs["local"]]),
        "client_cpu_s_per_gb": {
            side: report.median([r["cpu_s"] / gb for r in results]) for side, results in runs.items()
        },
        # The read's own CPU (the streamer's threads and the consumer), the process's start-up left out: what a
        # pod's CPU request has to cover per GB while it loads.
        "read_cpu_s_per_gb": {
            side: report.median([r["cpu_seconds"] / gb for r in results]) for side, results in runs.items()
        },
        "endpoint_cpu_s_per_gb": report.median([r["server_cpu_s"] / gb for r in runs["endpoint"]]),
        "load_before": load_before,
        "load_after": report.machine_load(),
        "runs": runs,
    }


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="warmstart-bench-", dir=os.environ.get("BENCH_DIR")))
    try:
        folder = work / "copy"
        folder.mkdir()
        make_model(folder)
        # The agent's marker beside the copy: the plugin streams a copy only while it holds what this says.
        held = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
        marker = {"files": len(held), "bytes": sum(p.stat().st_size for p in held)}
        folder.with_name(f"{folder.name}.complete").write_text(json.dumps(marker))
        names = sorted(p.name for p in folder.glob("*.safetensors"))
        warm(folder)
        results = [run(folder, names, cpus) for cpus in (("0-1",) if QUICK else ("0-1", "0"))]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [
        {
            "cpus": r["cpus"],
            "plugin_gb_s": r["plugin_gb_per_s"]["median"],
            "endpoint_gb_s": r["endpoint_gb_per_s"]["median"],
            "local_gb_s": r["local_gb_per_s"]["median"],
            "client_cpu_per_gb_plugin": r["client_cpu_s_per_gb"]["plugin"],
            "client_cpu_per_gb_endpoint": r["client_cpu_s_per_gb"]["endpoint"],
            "client_cpu_per_gb_local": r["client_cpu_s_per_gb"]["local"],
            "read_cpu_per_gb_plugin": r["read_cpu_s_per_gb"]["plugin"],
            "read_cpu_per_gb_endpoint": r["read_cpu_s_per_gb"]["endpoint"],
            "read_cpu_per_gb_local": r["read_cpu_s_per_gb"]["local"],
            "endpoint_cpu_per_gb": r["endpoint_cpu_s_per_gb"],
        }
        for r in results
    ]
    print(f"the node copy as a pod reads it (plugin), through the endpoint, as local paths: {PAIRS} rounds each")
    print(report.table(rows, list(rows[0])))
    for r in results:
        print(report.said(f"pod (plugin)/local time on CPUs {r['cpus']}", r["plugin_ratio"]))
        print(report.said(f"endpoint/local time on CPUs {r['cpus']}", r["ratio"]))
        print(f"  load before {r['load_before']['load_1m']:.2f}, after {r['load_after']['load_1m']:.2f}")
    measured = report.machine()  # taken once: what is printed is what is recorded
    buffer_mib = int(STREAMER["RUNAI_STREAMER_MEMORY_LIMIT"]) // 2**20
    print(
        f"  new memory on this machine: {measured['fresh_memory_gb_per_s']:.2f} GB/s first touched (each run faults "
        f"its {buffer_mib} MiB streamer buffer in, both sides alike)"
        + ("; its balloon takes freed memory back" if measured["free_page_reporting"] else "")
    )
    print("wrote", report.write("node_copy_endpoint", {"pairs": PAIRS, "results": results}, measured))


if __name__ == "__main__":
    main()
