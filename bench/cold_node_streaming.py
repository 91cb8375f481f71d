"""A new node's first pod and the agent's weights download of the same model, on one local S3 server.

The pod's loader is the real one: the Run:ai Model Streamer (vLLM's runai_streamer) in its own process. In
the same run, side by side:
- the pod streaming the model from S3 alone;
- the pod streaming while the agent downloads the same model at full speed (what a cold node did before);
- the pod streaming while the agent holds back (it pauses between parts while a pod of the node streams
  from S3), and how much later the agent's copy is complete;
- the next pod loading the agent's copy as local paths (what a pod does: warmstart's vLLM plugin lists the copy's
  files, vLLM's arguments and compile hash unchanged) and through the pod's loopback S3 endpoint (its fallback
  when vLLM does not load the plugin).
Every case reads its bytes from the page cache (the server's volume files and the node copy are read once,
untimed, before): this machine's disk is not an instance-store NVMe, and the comparison is of the protocols
and the client's CPU. The cold-cache reads (caches dropped first) are reported beside them.
Reports seconds, MB/s and the ratios; medians of REPEATS runs.
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
from bench.weights_prefetch import BUFFER_BYTES, PART_MIB, THREADS, settle, upload_folder  # noqa: E402
from tests.s3_server import ACCESS_KEY, SECRET_KEY, SeaweedS3  # noqa: E402

REPEATS = 3
FILES, TENSORS_PER_FILE = 4, 8  # 4 x 512 MiB of fp16 tensors
# The pod's streamer: warmstart's chunk and request settings are for models of tens of GB; this 2 GB model on
# 2 cores uses the streamer's own S3 defaults scaled up a little. Its buffer is held to 256 MiB (4 of the model's
# largest tensors) and reused: with the pod's limit (the whole model) every run faults 2 GB of fresh memory in,
# which on these VMs (nested virtualisation) took 1.2-3.7 s alone and made the reads 2.3-4.8 s against 0.3-0.55 s,
# swamping the read paths compared (2026-12-03).
STREAMER = {
    "RUNAI_STREAMER_CONCURRENCY": "8",
    "RUNAI_STREAMER_CHUNK_BYTESIZE": str(64 * 2**20),
    "RUNAI_STREAMER_MEMORY_LIMIT": str(256 * 2**20),
}


def make_model(folder: Path) -> int:
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(11)
    for index in range(FILES):
        tensors = {
            f"layers.{index}.{t}.weight": torch.randn(4096, 8192, generator=generator, dtype=torch.float16)
            for t in range(TENSORS_PER_FILE)
        }
        save_file(tensors, str(folder / f"model-{index + 1:05d}-of-{FILES:05d}.safetensors"))
    (folder / "config.json").write_text('{"architectures": ["BenchForCausalLM"]}')
    return sum(p.stat().st_size for p in folder.iterdir())


def streamer(paths: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "streamer_worker.py"), *paths],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen) -> dict:
    stdout, stderr = process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"streamer failed: {stderr[-2000:]}")
    return json.loads(stdout.strip().splitlines()[-1])


def agent_download(server: SeaweedS3, bucket: str, root: Path, pause_file: Path | None = None) -> subprocess.Popen:
    command = [
        sys.executable,
        str(ROOT / "bench" / "weights_worker.py"),
        server.endpoint,
        ACCESS_KEY,
        SECRET_KEY,
        bucket,
        "model/",
        str(root),
        str(THREADS),
        str(PART_MIB),
        str(BUFFER_BYTES),
    ]
    return subprocess.Popen(
        command + ([str(pause_file)] if pause_file else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def agent_result(process: subprocess.Popen, started: float) -> dict:
    stdout, stderr = process.communicate()
    outcome = json.loads(stdout.strip().splitlines()[-1])
    if outcome["status"] != "downloaded":
        raise RuntimeError(f"agent download failed: {outcome} {stderr[-2000:]}")
    return {**outcome, "done_after_s": time.perf_counter() - started}


def warm(folder: Path) -> None:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        with open(path, "rb") as handle:
            while handle.read(16 * 2**20):
                pass


def main() -> None:
    from model_workload.runtime.node_copy_s3 import serve_in_background

    work = Path(tempfile.mkdtemp(prefix="warmstart-bench-", dir=os.environ.get("BENCH_DIR")))
    server = SeaweedS3(work / "s3").start()
    runs: dict[str, list[dict]] = {
        k: []
        for k in (
            "s3_alone",
            "s3_while_agent_downloads",
            "agent_full_speed",
            "s3_while_agent_holds_back",
            "agent_holding_back",
            "node_copy_endpoint",
            "local_paths",
            "s3_cold",
            "node_copy_endpoint_cold",
        )
    }
    try:
        source = work / "source"
        source.mkdir()
        total = make_model(source)
        bucket = upload_folder(server, source, "model/")
        names = sorted(p.name for p in source.glob("*.safetensors"))
        s3_paths = [f"s3://{bucket}/model/{name}" for name in names]
        s3_env = {
            **os.environ,
            **STREAMER,
            "AWS_ENDPOINT_URL": server.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
        }
        for attempt in range(REPEATS):
            settle()
            warm(work / "s3")
            runs["s3_alone"].append(finished(streamer(s3_paths, s3_env)))

            settle()
            started = time.perf_counter()
            agent = agent_download(server, bucket, work / f"full-{attempt}")
            runs["s3_while_agent_downloads"].append(finished(streamer(s3_paths, s3_env)))
            runs["agent_full_speed"].append(agent_result(agent, started))
            shutil.rmtree(work / f"full-{attempt}")

            settle()
            pause = work / "pod-streaming"
            pause.write_text("")  # the pod's record: it streams from S3
            started = time.perf_counter()
            agent = agent_download(server, bucket, work / f"held-{attempt}", pause)
            pod = streamer(s3_paths, s3_env)
            runs["s3_while_agent_holds_back"].append(finished(pod))
            pause.unlink()  # the pod is Ready
            held = agent_result(agent, started)
            runs["agent_holding_back"].append(held)

            settle()
            copy = Path(held["folder"])
            warm(copy)  # all of it in the page cache, whatever the agent's writes and the sync before left there
            endpoint = serve_in_background(bucket=bucket, prefix="model/", folder=copy)
            node_env = {**s3_env, "AWS_ENDPOINT_URL": endpoint.endpoint, "RUNAI_STREAMER_S3_UNSIGNED": "1"}
            runs["node_copy_endpoint"].append(finished(streamer(s3_paths, node_env)))
            runs["local_paths"].append(finished(streamer([str(copy / name) for name in names], s3_env)))
            if report.drop_caches():
                runs["node_copy_endpoint_cold"].append(finished(streamer(s3_paths, node_env)))
                report.drop_caches()
                runs["s3_cold"].append(finished(streamer(s3_paths, s3_env)))
            endpoint.shutdown()
            shutil.rmtree(work / f"held-{attempt}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    seconds = {
        case: report.median([r.get("seconds", r.get("sync_s")) for r in results])
        for case, results in runs.items()
        if results
    }
    for case in ("agent_full_speed", "agent_holding_back"):
        seconds[case + "_done_after"] = report.median([r["done_after_s"] for r in runs[case]])
    streamed = {
        case: r
        for case, r in seconds.items()
        if case
        in (
            "s3_alone",
            "s3_while_agent_downloads",
            "s3_while_agent_holds_back",
            "node_copy_endpoint",
            "local_paths",
            "s3_cold",
            "node_copy_endpoint_cold",
        )
    }
    rows = [{"case": case, "seconds": value, "mb_per_s": total / 1e6 / value} for case, value in streamed.items()]
    ratios = {
        "pod_slowdown_when_agent_downloads": seconds["s3_while_agent_downloads"] / seconds["s3_alone"],
        "pod_slowdown_when_agent_holds_back": seconds["s3_while_agent_holds_back"] / seconds["s3_alone"],
        "s3_over_node_copy_endpoint": seconds["s3_alone"] / seconds["node_copy_endpoint"],
        "endpoint_over_local_paths": seconds["node_copy_endpoint"] / seconds["local_paths"],
        "agent_copy_delay_when_holding_back": seconds["agent_holding_back_done_after"]
        / seconds["agent_full_speed_done_after"],
    }
    print(
        f"cold node: the pod's Run:ai streamer and the agent's download of one {total / 1e9:.2f} GB model, "
        f"median of {REPEATS}"
    )
    print(report.table(rows, ["case", "seconds", "mb_per_s"]))
    print(
        f"agent copy complete after: {seconds['agent_full_speed_done_after']:.2f} s at full speed, "
        f"{seconds['agent_holding_back_done_after']:.2f} s holding back"
    )
    print("   ".join(f"{name}: {value:.3f}" for name, value in ratios.items()))
    # The cases of one attempt run one after the other: each ratio pair by pair, with its spread.
    timed = {case: [r.get("seconds", r.get("sync_s")) for r in results] for case, results in runs.items()}
    spreads = {
        "pod_slowdown_when_agent_downloads": report.paired_ratio(timed["s3_while_agent_downloads"], timed["s3_alone"]),
        "pod_slowdown_when_agent_holds_back": report.paired_ratio(
            timed["s3_while_agent_holds_back"], timed["s3_alone"]
        ),
        "endpoint_over_local_paths": report.paired_ratio(timed["node_copy_endpoint"], timed["local_paths"]),
        "endpoint_over_s3": report.paired_ratio(timed["node_copy_endpoint"], timed["s3_alone"]),
    }
    for name, spread in spreads.items():
        print(report.said(name, spread))
    print(
        "wrote",
        report.write(
            "cold_node_streaming",
            {
                "total_bytes": total,
                "streamer": STREAMER,
                "seconds": seconds,
                "ratios": ratios,
                "spreads": spreads,
                "runs": runs,
            },
        ),
    )


if __name__ == "__main__":
    main()
