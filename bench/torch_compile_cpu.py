"""The real thing on the CPU: torch.compile cold, then a new node restored by the agent, then a changed key.

1. cold: a fresh process with empty cache folders compiles (a new node's first pod without warmstart);
2. local: a second process on the same node, same folders (a second pod on a warm node);
3. the agent publishes the node's folder to S3; the folder is wiped (a new node, same absolute path);
   the agent restores it; a fresh process compiles (warm: a new node's first pod with warmstart);
4. a changed key factor (another max model length): the agent finds no cache for that key (a miss,
   never a wrong hit), and the process compiles from scratch.

GPU figures for comparison (docs/upstream-facts.md, "Figures the design assumes"): ~53 s cold, ~6 s warm. Runs
unchanged on a GPU machine.
"""

from __future__ import annotations

import dataclasses
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
from contracts.cache_key import ModelFactors, compile_cache_key  # noqa: E402
from node_agent.runtime.compile_cache import publish, restore  # noqa: E402
from node_agent.runtime.layout import NodeCacheLayout  # noqa: E402
from node_agent.runtime.log import EventLog  # noqa: E402
from node_agent.runtime.s3.compile_store import CacheStore  # noqa: E402
from tests.s3_server import SeaweedS3  # noqa: E402

# Nine pairs: the fewest whose median has a 95% interval that is not min-max (report.median_interval).
REPEATS = int(os.environ.get("BENCH_REPEATS", "9"))
SEQUENCE = {8192: 64, 4096: 32}  # max_model_len factor -> the toy model's compiled sequence length
# One absolute path for every run, as on every node (vLLM and Inductor hash the cache location).
NODE_ROOT = Path("/tmp/warmstart-bench-node/compile-cache")


def worker(folder: Path, max_model_len: int) -> dict:
    """One "pod": the cache folders as vLLM 0.21.0 lays them out (Inductor inside its hash folder under
    VLLM_CACHE_ROOT, Triton where the pod points it), the toy model standing in for vLLM's compiled graph."""
    import hashlib

    import torch

    vllm_hash = hashlib.sha256(f"{torch.__version__}:{max_model_len}".encode()).hexdigest()[:10]
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(folder),
        "TORCHINDUCTOR_CACHE_DIR": str(
            folder / "vllm" / "torch_compile_cache" / vllm_hash / "rank_0_0" / "inductor_cache"
        ),
        "TRITON_CACHE_DIR": str(folder / "triton"),
    }
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "compile_worker.py"), str(SEQUENCE[max_model_len])],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_s"] = time.perf_counter() - started
    return result


def main() -> None:
    factors = ModelFactors(
        model="toy-transformer",
        weights_revision="seed0",
        image="local/torch:2.13.0",
        torch_version="2.13.0",
        tensor_parallel=1,
        pipeline_parallel=1,
        max_model_len=8192,
        max_num_batched_tokens=None,
        dtype="float32",
        quantization=None,
        kv_cache_dtype="auto",
        compilation_config=None,
    )
    changed = dataclasses.replace(factors, max_model_len=4096)
    work = Path(tempfile.mkdtemp(prefix="warmstart-bench-"))
    shutil.rmtree(NODE_ROOT.parent, ignore_errors=True)
    layout = NodeCacheLayout(NODE_ROOT)
    folder = layout.model_dir(factors.model, factors.fingerprint())
    log = EventLog(time.time, stream=open(os.devnull, "w"))
    server = SeaweedS3(work / "s3").start()
    try:
        store = CacheStore(server.client(retries=3), server.new_bucket())
        key = compile_cache_key(factors, gpu="cpu", architecture="sm_00")
        cold = worker(folder, 8192)
        local = worker(folder, 8192)
        published = publish(
            store=store,
            layout=layout,
            key=key,
            model=factors.model,
            fingerprint=factors.fingerprint(),
            node="node-a",
            clock=time.time,
            log=log,
        )

        def restored_node() -> tuple:
            shutil.rmtree(NODE_ROOT)  # a new node: same absolute path, nothing on it
            outcome = restore(
                store=store,
                layout=layout,
                key=key,
                model=factors.model,
                fingerprint=factors.fingerprint(),
                node="node-b",
                clock=time.time,
                log=log,
            )
            return outcome, worker(folder, 8192)

        # Interleaved, the order alternating (A B, B A, ...): a second pod on a warm node against a new node's
        # first pod after the agent's restore; the OS's caches and the machine's load fall on both alike.
        load_before = report.machine_load()
        locals_, warms, restores = [], [], []
        for attempt in range(REPEATS):
            for side in ("local", "restored") if attempt % 2 == 0 else ("restored", "local"):
                if side == "local":
                    locals_.append(worker(folder, 8192))
                else:
                    outcome, result = restored_node()
                    restores.append(outcome)
                    warms.append(result)
        load_after = report.machine_load()
        restored, warm = restores[-1], warms[len(warms) // 2]
        local = locals_[len(locals_) // 2]
        changed_key = compile_cache_key(changed, gpu="cpu", architecture="sm_00")
        changed_folder = layout.model_dir(changed.model, changed.fingerprint())
        miss = restore(
            store=store,
            layout=layout,
            key=changed_key,
            model=changed.model,
            fingerprint=changed.fingerprint(),
            node="node-b",
            clock=time.time,
            log=log,
        )
        assert miss.status == "miss" and not changed_folder.exists(), miss
        recompiled = worker(changed_folder, 4096)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(NODE_ROOT.parent, ignore_errors=True)
    assert published.status == "published" and restored.status == "restored", (published, restored)
    assert abs(cold["checksum"] - warm["checksum"]) < 1e-3, "a restored cache must compute the same result"
    rows = [
        {"run": "cold (new node, no warmstart)", "first_call_s": cold["first_call_s"], "process_s": cold["process_s"]},
        {"run": "second pod, same node", "first_call_s": local["first_call_s"], "process_s": local["process_s"]},
        {
            "run": "new node, restored by agent",
            "first_call_s": warm["first_call_s"],
            "process_s": warm["process_s"],
            "restore_s": restored.seconds,
            "archive_bytes": restored.bytes,
        },
        {
            "run": f"changed key ({miss.status})",
            "first_call_s": recompiled["first_call_s"],
            "process_s": recompiled["process_s"],
        },
    ]
    figures = {
        "device": cold["device"],
        "torch": cold["torch"],
        "cold": cold,
        "local_warm": local,
        "restored_warm": warm,
        "changed_key": recompiled,
        "publish": published.as_dict(),
        "restore": restored.as_dict(),
        "changed_key_restore": miss.as_dict(),
        "warm_over_cold_first_call": warm["first_call_s"] / cold["first_call_s"],
        "warm_over_cold_process": warm["process_s"] / cold["process_s"],
        "restore_plus_warm_over_cold": (restored.seconds + warm["first_call_s"]) / cold["first_call_s"],
        "gpu_warm_over_cold_assumed": 6 / 53,
        "restored_over_local_first_call": report.paired_ratio(
            [w["first_call_s"] for w in warms], [x["first_call_s"] for x in locals_]
        ),
        "local_first_call_s": report.spread([x["first_call_s"] for x in locals_]),
        "restored_first_call_s": report.spread([w["first_call_s"] for w in warms]),
        "restore_s": report.spread([r.seconds for r in restores]),
        "load_before": load_before,
        "load_after": load_after,
    }
    print(f"torch.compile on {cold['device']} (torch {cold['torch']}): cold vs restored by the warmstart agent")
    print(report.table(rows, ["run", "first_call_s", "process_s", "restore_s", "archive_bytes"]))
    print(
        f"warm/cold first call: {figures['warm_over_cold_first_call']:.3f} "
        f"(with the restore itself: {figures['restore_plus_warm_over_cold']:.3f}; assumed on a GPU: 6/53 = 0.113)"
    )
    print(
        report.said(
            "restored/warm-node first call (time ratio, below 1: the restored node is faster)",
            figures["restored_over_local_first_call"],
        )
    )
    print(f"load before {load_before['load_1m']:.2f}, after {load_after['load_1m']:.2f} ({load_after['cpus']} CPUs)")
    print("wrote", report.write("torch_compile_cpu", figures))


if __name__ == "__main__":
    main()
