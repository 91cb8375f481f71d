"""vLLM cold starts on a GPU, through the pipeline of the real vLLM tier (not in CI: the server needs a GPU).

Every pod is warmstart's rendered Deployment, run by the kubelet stand-in on stand-in nodes (the environment
kubelet builds, service links and all; the volumes at their container paths), with the real entry step, the real
node agents and a local S3 server (SeaweedFS): tests/real_vllm/pods.py, tests/agent/cluster_world.py. The model is
a small Llama with random weights, uploaded under the config's first model; its arguments and environment are the
rendered ones (default config/dev.yaml). Cases, in order:
  cold        node A, nothing cached: the pod streams from S3 and compiles; once it serves, A's agent publishes
  warm_node   a second pod on node A: the same compile folder, loaded from the node
  restored    node B: its agent restores A's cache before the pod starts (a new node with warmstart)
  node_copy   node C: restored, and the weights served from C's node copy on the pod's loopback
For each: the time to the first completion, vLLM's compile folders before and after (hit or miss), the phases
the agent's own parser reads from vLLM's log (node_agent/runtime/vllm_log.py), and what the start did with each of
the engine's caches (contracts/engine_caches.py: loaded, written or present; node_agent/runtime/engine_cache_use.py).
Then each cache's share of a start: for every portable cache the restored node holds, a new node restores the
archive without that one cache (its folder removed before the pod starts); its start's time less the restored
start's is the cache's share (`shares`, seconds), next to the cold and warm starts in the same run.

  python3 bench/gpu_vllm_cold_start.py                 on the GPU machine: vLLM's server (--vllm: the release,
                                                       default the newest supported; --vllm-root: a Python prefix
                                                       with it; default the tier's environment of that release)
  python3 bench/gpu_vllm_cold_start.py --engine probe  the same pipeline without a GPU, vLLM's start up to the
                                                       engine (the real vLLM tier runs this)
  python3 bench/gpu_vllm_cold_start.py --plan          the model and the plan only
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from contracts.cache_key import MAX_CACHE_FILES  # noqa: E402
from contracts.engine_caches import named  # noqa: E402
from model_workload.runtime.vllm_entry import vllm_hash_dirs  # noqa: E402
from node_agent.runtime.archive import packable_files  # noqa: E402
from node_agent.runtime.compile_manifest import VLLM_FOLDER, engine_caches_held  # noqa: E402
from node_agent.runtime.engine_cache_use import cache_files, engine_cache_use  # noqa: E402
from node_agent.runtime.vllm_log import engine_cache_lines, parse_start  # noqa: E402
from tests.engine.server import ServerRun  # noqa: E402
from tests.engine.tiny_model import CONFIG as TINY_LLAMA  # noqa: E402
from tests.engine.tiny_model import write as write_model  # noqa: E402
from warmstart.vllm_release import NEWEST, SUPPORTED  # noqa: E402
from warmstart.workload import VLLM_PORT  # noqa: E402

CASES = ("cold", "warm_node", "restored", "node_copy")
PROMPT_TOKENS = [1, 15, 27, 99]  # the model has no tokenizer
NODE_OF_CASE = {"cold": "node-a", "warm_node": "node-a", "restored": "node-b", "node_copy": "node-c"}
# A small Llama, larger than the engine tier's (a GPU's compile then takes a measurable time); no tokenizer.
CONFIG = {
    **TINY_LLAMA,
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 4096,
}


def make_model(folder: Path) -> int:
    return write_model(folder, CONFIG, with_tokenizer=False)


def bench_config(config_path: Path, models_bucket: str, compile_bucket: str, version: str):
    """The config with its buckets moved to the local S3 server, one model (its first) serving the vLLM release
    run here, and its weights cache on."""
    from warmstart.loader import parse_config, read_yaml
    from warmstart.vllm_release import releases

    document = read_yaml(config_path)
    document["buckets"]["compile_cache"] = compile_bucket
    document["buckets"]["models"]["name"] = models_bucket
    model = {
        **{k: v for k, v in document["models"][0].items() if k != "torch_version"},
        "s3_uri": f"s3://{models_bucket}/{document['models'][0]['name']}/",
        "image": releases()[version].image["reference"],
    }
    document["models"] = [model]
    document["caches"] = {**document.get("caches", {}), "compile": True, "weights": True}
    return parse_config(document, source=str(config_path))


def run_case(case: str, world, node, config, env, args, vllm_env, instance) -> dict:
    from tests.real_vllm import pods
    from tests.standins.kubelet import run_container

    model = config.models[0].name
    pod = pods.schedule(world, node, config, model, vllm_env=vllm_env, instance=instance, engine=args.engine)
    cache_root = pod.volumes["compile-cache"] / "cache" / VLLM_FOLDER
    before = vllm_hash_dirs(cache_root)
    pods.run_init_containers(pod, env)
    started_at = time.time()
    outcome: dict = {"case": case, "node": node.stand_in.name, "hash_dirs_before": before}
    if args.engine == "probe":
        started = time.monotonic()
        report = pods.probe_report(pod, env)
        outcome |= {"seconds": round(time.monotonic() - started, 2), "errors": report["errors"]}
        outcome["entry"] = report["entry_output"]
    else:
        server = ServerRun(run_container(pod, pods.main_container(pod), env, background=True))
        try:
            seconds, _ = server.first_completion(model, VLLM_PORT, args.timeout, prompt=PROMPT_TOKENS)
            outcome["first_completion_s"] = round(seconds, 2)
        finally:
            server.stop()
        start = parse_start(server.lines)
        outcome |= {
            "phases": {
                "weights_s": start.weights_seconds,
                "compile_s": start.compile_seconds,
                "engine_s": start.engine_seconds,
                "compile_cache": start.compile_cache,
                "missing": list(start.missing),
            },
            "entry": [text for _, text in server.lines if text.startswith("warmstart:")],
        }
    after = vllm_hash_dirs(cache_root)
    outcome |= {"hash_dirs_after": after, "new_folders": sorted(set(after) - set(before))}
    said = engine_cache_lines([text for _, text in server.lines]) if args.engine == "server" else {}
    files, _ = cache_files(cache_root.parent, started_at)
    outcome["engine_caches"] = engine_cache_use(files, said)
    world.cluster.pods.append(pod.as_api_object(ready=True))
    return outcome


def portable_caches(content: Path) -> list[str]:
    """The archived caches (besides torch.compile's, which every restored start needs) a restored folder holds, as
    the agent's archive counts them."""
    return engine_caches_held(packable_files(content, max_files=MAX_CACHE_FILES) or [])


def without(content: Path, name: str) -> None:
    """The restored folder less one cache."""
    cache = named(name)
    assert cache is not None and "*" not in cache.folder
    shutil.rmtree(content / cache.folder, ignore_errors=True)


def shares(results: dict) -> dict[str, float | None]:
    """Each cache's share of a start: the start restored without it, less the restored start (seconds)."""
    key = "first_completion_s" if results["engine"] == "server" else "seconds"
    base = results["cases"]["restored"].get(key)
    found = {}
    for case, outcome in results["cases"].items():
        if case.startswith("without:") and base is not None and outcome.get(key) is not None:
            found[case.removeprefix("without:")] = round(outcome[key] - base, 2)
    return found


def model_fingerprint(nodes: dict, model: str) -> str:
    return next(iter(nodes.values())).agent.models[model].model.compile_cache.fingerprint


def run(args: argparse.Namespace) -> dict:
    from tests.agent.cluster_world import World
    from tests.engine.chain import upload_model
    from tests.real_vllm import pods
    from tests.real_vllm.environment import VllmEnvironment, environment
    from tests.s3_server import SeaweedS3
    from warmstart.catalog import default_catalog
    from warmstart.sizing import candidate_instances

    work = args.work
    vllm_env = VllmEnvironment(args.vllm_root, args.vllm) if args.vllm_root else environment(args.vllm)
    server = SeaweedS3(work / "s3").start()
    try:
        models_bucket, compile_bucket = server.new_bucket(), server.new_bucket()
        config = bench_config(args.config, models_bucket, compile_bucket, args.vllm)
        model = config.models[0]
        upload_model(server, models_bucket, f"{model.name}/", work / "model")
        instance = candidate_instances(model, config, default_catalog())[0]
        world = World(server=server, scratch=work / "cluster", config=config, image_env={})
        nodes = {name: world.node(name, config, instance.instance_type) for name in sorted(set(NODE_OF_CASE.values()))}
        env = pods.cluster_env(world)
        results = {"engine": args.engine, "config": str(args.config), "model": model.name, "cases": {}}
        for case in CASES:
            node = nodes[NODE_OF_CASE[case]]
            if case == "node_copy":
                results["weights_sync"] = node.agent.weights_tick()[model.name]
            if case in ("cold", "restored", "node_copy"):
                results.setdefault("restores", {})[case] = node.agent.start()[model.name].status
            outcome = run_case(case, world, node, config, env, args, vllm_env, instance)
            results["cases"][case] = outcome
            print(case, json.dumps(outcome), flush=True)
            if case == "cold":
                results["publish"] = node.agent.tick()[model.name].status
        restored = nodes[NODE_OF_CASE["restored"]].layout.model_dir(model.name, model_fingerprint(nodes, model.name))
        # Shares need an archive to leave a cache out of (the probe engine compiles nothing, so publishes none).
        archived = results["restores"]["restored"] == "restored"
        for name in portable_caches(restored) if archived else []:
            node = world.node(f"node-without-{name.replace('_', '-')}", config, instance.instance_type)
            results.setdefault("restores", {})[f"without:{name}"] = node.agent.start()[model.name].status
            without(node.layout.model_dir(model.name, model_fingerprint(nodes, model.name)), name)
            outcome = run_case(f"without:{name}", world, node, config, env, args, vllm_env, instance)
            results["cases"][f"without:{name}"] = outcome
            print(f"without:{name}", json.dumps(outcome), flush=True)
        results["shares"] = shares(results)
        return results
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "results" / "gpu-work")
    parser.add_argument("--config", type=Path, default=ROOT / "config" / "dev.yaml")
    parser.add_argument("--engine", choices=["server", "probe"], default="server")
    parser.add_argument("--vllm-root", type=Path, help="a Python prefix with vLLM (its bin/python)")
    parser.add_argument("--vllm", default=NEWEST, choices=SUPPORTED, help="the vLLM release (default the newest)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--plan", action="store_true", help="build the model and print the plan only")
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    size = make_model(args.work / "model")
    if args.plan:
        print(json.dumps({"model_bytes": size, "cases": NODE_OF_CASE, "config": str(args.config)}, indent=2))
        return
    results = {"model_bytes": size, **run(args)}
    out = args.work / f"gpu_vllm_cold_start-{args.engine}.json"
    out.write_text(json.dumps(results, indent=2, sort_keys=True))
    print("wrote", out)


if __name__ == "__main__":
    main()
