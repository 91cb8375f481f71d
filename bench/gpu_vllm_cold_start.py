"""vLLM cold starts on a GPU, with warmstart's compile cache (not run in CI: needs a GPU and vLLM 0.21.0).

Builds a small Llama-architecture model locally (random weights, no hub download), serves it with the pinned
vLLM through the Run:ai streamer exactly as the pods do (`--model=s3://...`, the loopback S3 endpoint of
model_workload/runtime/node_copy_s3.py standing in for S3 and for the node copy), and measures the time to the first
completion for:
  cold          empty compile cache (a new node without warmstart's cache)
  warm_node     the same cache folder again (a second pod on the node)
  restored      the cache packed, wiped and unpacked by the agent's own archive code (a new node after restore)
  node_copy     restored, weights served from a second folder (the node copy) under the same S3 URI
  local_path    `--model=<local folder>`: what passing a local path would do to vLLM's compile hash
and lists vLLM's hash folders after each, so a hit or a miss is visible, not assumed.

Usage (on the GPU machine, vLLM installed):  python3 bench/gpu_vllm_cold_start.py [--work DIR]
          --dry-run builds the model and prints the plan without vLLM or a GPU (CI runs this).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from model_workload.runtime.node_copy_s3 import serve_in_background  # noqa: E402
from model_workload.runtime.vllm_entry import vllm_hash_dirs  # noqa: E402
from node_agent.runtime.archive import pack, unpack  # noqa: E402

BUCKET, PREFIX = "bench", "tiny-llama/"
PORT = 8011
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1536,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "vocab_size": 4096,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
# Every knob that enters vLLM's compile hash is fixed here, as warmstart fixes it in the pod spec.
VLLM_ARGS = [
    "--load-format=runai_streamer",
    '--model-loader-extra-config={"concurrency":4}',
    "--tensor-parallel-size=1",
    "--max-model-len=1024",
    "--dtype=bfloat16",
    "--served-model-name=tiny",
    "--skip-tokenizer-init",
    "--gpu-memory-utilization=0.5",
    "--host=127.0.0.1",
    f"--port={PORT}",
]


def make_model(folder: Path) -> int:
    """Random weights under the Hugging Face Llama parameter names, in two safetensors shards."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(0)
    h, i, v = CONFIG["hidden_size"], CONFIG["intermediate_size"], CONFIG["vocab_size"]

    def weight(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    tensors = {
        "model.embed_tokens.weight": weight(v, h),
        "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "lm_head.weight": weight(v, h),
    }
    for layer in range(CONFIG["num_hidden_layers"]):
        base = f"model.layers.{layer}"
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            tensors[f"{base}.self_attn.{name}.weight"] = weight(h, h)
        tensors[f"{base}.mlp.gate_proj.weight"] = weight(i, h)
        tensors[f"{base}.mlp.up_proj.weight"] = weight(i, h)
        tensors[f"{base}.mlp.down_proj.weight"] = weight(h, i)
        tensors[f"{base}.input_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
        tensors[f"{base}.post_attention_layernorm.weight"] = torch.ones(h, dtype=torch.bfloat16)
    names = sorted(tensors)
    half = len(names) // 2
    save_file({n: tensors[n] for n in names[:half]}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({n: tensors[n] for n in names[half:]}, str(folder / "model-00002-of-00002.safetensors"))
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=2))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return sum(p.stat().st_size for p in folder.iterdir())


def pod_env(cache_root: Path, assets: Path, endpoint: str | None) -> dict[str, str]:
    """The compile-cache and streamer environment of warmstart's pod spec, rooted under the work folder."""
    env = {
        **os.environ,
        "XDG_CACHE_HOME": str(cache_root),
        "VLLM_CACHE_ROOT": str(cache_root / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache_root / "inductor"),
        "TRITON_CACHE_DIR": str(cache_root / "triton"),
        "VLLM_ASSETS_CACHE": str(assets),
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    if endpoint:
        env |= {
            "AWS_ENDPOINT_URL": endpoint,
            "RUNAI_STREAMER_S3_UNSIGNED": "1",
            "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
        }
    return env


def first_completion(model_arg: str, env: dict[str, str], log_path: Path, timeout: float = 900) -> dict:
    """Starts the OpenAI server, times its first completion, stops it; returns the timings and log facts."""
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", f"--model={model_arg}", *VLLM_ARGS]
    started = time.perf_counter()
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        body = json.dumps({"model": "tiny", "prompt": [1, 15, 27, 99], "max_tokens": 8, "temperature": 0}).encode()
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"vLLM exited {server.returncode}; see {log_path}")
            if time.perf_counter() - started > timeout:
                raise TimeoutError(f"no completion within {timeout}s; see {log_path}")
            try:
                request = urllib.request.Request(
                    f"http://127.0.0.1:{PORT}/v1/completions", data=body, headers={"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(request, timeout=5) as response:
                    json.loads(response.read())
                    break
            except OSError:
                time.sleep(0.5)
        seconds = time.perf_counter() - started
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    text = log_path.read_text()
    return {
        "first_completion_s": round(seconds, 2),
        "loaded_from_cache": "Directly load the compiled graph" in text,
        "compiled": "Compiling a graph for compile range" in text,
        "aot_loaded": "Directly load AOT compilation" in text,
        "compile_lines": [
            line.strip()
            for line in text.splitlines()
            if "torch.compile took" in line or "Directly load" in line or "init engine" in line
        ][-6:],
    }


def plan(work: Path) -> list[tuple[str, str, str]]:
    """(case, --model, which weights folder the endpoint serves)."""
    uri = f"s3://{BUCKET}/{PREFIX}"
    return [
        ("cold", uri, "source"),
        ("warm_node", uri, "source"),
        ("restored", uri, "source"),
        ("node_copy", uri, "node-copy"),
        ("local_path", str(work / "node-copy"), "node-copy"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "bench" / "results" / "gpu-work")
    parser.add_argument("--dry-run", action="store_true", help="build the model and print the plan only")
    args = parser.parse_args()
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    size = make_model(work / "source")
    shutil.copytree(work / "source", work / "node-copy")
    cases = plan(work)
    if args.dry_run:
        print(json.dumps({"model_bytes": size, "cases": cases, "vllm_args": VLLM_ARGS}, indent=2))
        return
    import vllm  # noqa: F401  (fails here, clearly, without the pinned vLLM)

    cache = work / "compile-cache" / "cache"  # one fixed absolute path, as /compile-cache/cache in the pods
    results = {
        "vllm": __import__("vllm").__version__,
        "torch": __import__("torch").__version__,
        "gpu": __import__("torch").cuda.get_device_name(0),
        "model_bytes": size,
        "cases": {},
    }
    servers = {
        name: serve_in_background(bucket=BUCKET, prefix=PREFIX, folder=work / name) for name in ("source", "node-copy")
    }
    try:
        for case, model_arg, weights in cases:
            if case == "restored":  # a new node: the agent's archive of this cache, unpacked at the same path
                packed = pack(cache, work / "archive.tar.zst")
                shutil.rmtree(cache)
                unpack(packed.path, cache)
                results["archive_bytes"] = packed.size
            assets = work / f"assets-{case}"  # a fresh emptyDir per pod
            endpoint = servers[weights].endpoint if model_arg.startswith("s3://") else None
            outcome = first_completion(model_arg, pod_env(cache, assets, endpoint), work / f"{case}.log")
            outcome["hash_dirs"] = vllm_hash_dirs(cache / "vllm")
            results["cases"][case] = outcome
            print(case, json.dumps(outcome), flush=True)
    finally:
        for server in servers.values():
            server.shutdown()
    cold = results["cases"]["cold"]["first_completion_s"]
    results["ratios_over_cold"] = {case: r["first_completion_s"] / cold for case, r in results["cases"].items()}
    out = ROOT / "bench" / "results" / "gpu_vllm_cold_start.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2, sort_keys=True))
    print("wrote", out)


if __name__ == "__main__":
    main()
