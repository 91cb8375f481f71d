"""A stand-in for vLLM's OpenAI server start, as far as the compile cache and weight loading go.

Mirrors the vLLM release the stand-in image carries (STANDIN_VLLM_VERSION, default the newest supported), reading
that release's recorded facts (warmstart/vllm_releases/<version>.json): the variables it knows and hashes, how it
names the compile folder, whether its AOT folder's hash holds the compiler's factors. Each step names the file it
follows (vLLM 0.21.0 and 0.34.0 alike unless said):
- `vllm serve <model> ...` (vllm/entrypoints/cli/serve.py: the positional model wins) or `--model=`;
- vllm/config/model.py `ModelConfig.__post_init__` -> `maybe_pull_model_tokenizer_for_runai`: for an s3://
  model, `model_weights` becomes the URI and `model` becomes `<VLLM_ASSETS_CACHE>/model_streamer/
  <sha256(uri)[:8]>`, into which the config files (*.json, *.model, *.py) and then, the tokenizer being the
  model, every file but the weights are pulled with runai-model-streamer's `pull_files` (the real one, boto3).
  A local path stays as given (no realpath).
- vllm/model_executor/models/registry.py: `VLLM_CACHE_ROOT/modelinfos/` is written at config time, before
  weights load, so the cache folder exists from then on.
- the Run:ai loader streams the weights from `model_weights` (the real SafetensorsStreamer here), unless a general
  plugin replaced it: vllm/plugins/__init__.py loads every entry point of group `vllm.general_plugins` that
  VLLM_PLUGINS (when set) lists. warmstart's plugin (model_workload/runtime/node_copy_loader.py) needs vLLM to
  register its loader, so the stand-in asks the plugin's module for the files that loader lists instead.
- vllm/config/model.py `compute_hash`: every field but an ignore list, so `model`, `model_weights`, dtype,
  max_model_len, quantization and the model's config.json are hashed; served_model_name, tokenizer and
  seed are not. LoadConfig hashes nothing (load format, streamer settings).
- vllm/envs.py `compile_factors`: every variable vLLM knows minus an ignore list (VLLM_CACHE_ROOT,
  VLLM_ASSETS_CACHE, VLLM_PORT, VLLM_HOST_IP, VLLM_MODEL_REDIRECT_PATH, logging, ...), with defaults for the unset
  ones; XDG_CACHE_HOME and XDG_CONFIG_HOME enter through the defaults of VLLM_XLA_CACHE_PATH and VLLM_CONFIG_ROOT
  where the release hashes them (0.21.0).
  The lists are the release's recorded facts (checked against vLLM itself by the real vLLM tier).
- vllm/compilation/backends.py: folder `VLLM_CACHE_ROOT/torch_compile_cache/<hash>/rank_<r>_0/backbone/`, the hash
  `sha256(str([env, config, code, compiler]))[:10]` (0.21.0) or `sha256(json.dumps({env, config, code, compiler}
  raw factors, sort_keys=True))[:10]` (0.34.0), an index of artifacts by absolute path, cache_key_factors.json
  written when absent; a user `compilation_config.cache_dir` replaces the hashed folder.
- vllm/compilation/decorators.py: AOT artifacts (on by default with torch >= 2.10) at
  `torch_compile_cache/torch_aot_compile/<sha256(str([env, config, (Inductor's factors with the self-contained
  artifact, on by default from 0.34.0's torch 2.14), model]))>/rank_<r>_0/model`, saved via a temporary file and
  os.replace; loading them still reads the backend index above.
- Triton kernels go to TRITON_CACHE_DIR (vLLM does not redirect it on its default standalone path).

The image's "torch version" and the node's GPU come from STANDIN_TORCH_VERSION and STANDIN_GPU_NAME (what
the serving image and the node would fix; the compiler part of vLLM's hash is Inductor's key, which holds the
GPU's name as the driver reports it, torch/_inductor/codecache.py CacheBase.get_system). It prints vLLM-like log
lines and one `STANDIN-REPORT {json}`.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

from warmstart.vllm_release import NEWEST, VllmRelease, releases


def release(env: dict[str, str] | None = None) -> VllmRelease:
    """The release the stand-in image carries: STANDIN_VLLM_VERSION, else the newest supported."""
    version = (env if env is not None else os.environ).get("STANDIN_VLLM_VERSION") or NEWEST
    found = releases().get(version)
    if found is None:
        raise SystemExit(f"the stand-in has no recorded facts of vLLM {version} (warmstart/vllm_releases/)")
    return found


# vllm/config/model.py ModelConfig's ignored factors (0.21.0 compute_hash, 0.34.0 compile_factors), the flags this
# stand-in accepts.
NOT_HASHED_ARGS = {
    "served-model-name",
    "tokenizer",
    "seed",
    "host",
    "port",
    "load-format",
    "model-loader-extra-config",
    "enforce-eager",
}
# maybe_pull_model_tokenizer_for_runai: the config files, then (the tokenizer being the model) every file but the
# weights.
CONFIG_PATTERNS = ["*.model", "*.py", "*.json"]
WEIGHT_PATTERNS = ["*.pt", "*.safetensors", "*.bin", "*.tensors", "*.pth"]


def log(message: str) -> None:
    print(f"INFO {time.strftime('%m-%d %H:%M:%S')} [standin] {message}", flush=True)


def parse_args(argv: list[str]) -> dict[str, str]:
    """`--name=value` flags; `serve <model>` (the `vllm` CLI) gives the model positionally, and it wins."""
    args = {}
    for item in argv:
        if item.startswith("--"):
            name, _, value = item[2:].partition("=")
            args[name] = value if _ else "true"
    if argv[:1] == ["serve"] and len(argv) > 1 and not argv[1].startswith("-"):
        args["model"] = argv[1]
    return args


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def env_factors(env: dict[str, str]) -> dict[str, str]:
    """The variables set in `env` that vLLM hashes (raw values: vLLM hashes each getter's parsed value, so two
    spellings of one value differ here and not in vLLM: more misses, never a wrong hit), and the two defaults
    that follow XDG_CACHE_HOME and XDG_CONFIG_HOME."""
    home = env.get("HOME", "/root")
    hashed = release(env).hashed_env
    factors = {k: v for k, v in env.items() if k in hashed}
    cache_root = env.get("XDG_CACHE_HOME") or f"{home}/.cache"
    config_root = env.get("XDG_CONFIG_HOME") or f"{home}/.config"
    defaults = {"VLLM_XLA_CACHE_PATH": f"{cache_root}/vllm/xla_cache", "VLLM_CONFIG_ROOT": f"{config_root}/vllm"}
    for name, value in defaults.items():
        if name in hashed:  # 0.21.0 hashes both, 0.34.0 neither
            factors.setdefault(name, value)
    return dict(sorted(factors.items()))


def model_paths(args: dict[str, str], env: dict[str, str]) -> tuple[str, str]:
    """(model, model_weights) after ModelConfig.__post_init__."""
    given = args["model"]
    if given.startswith(("s3://", "gs://", "az://")):
        assets = (
            env.get("VLLM_ASSETS_CACHE")
            or f"{env.get('XDG_CACHE_HOME') or env.get('HOME', '/root') + '/.cache'}/vllm/assets"
        )
        return os.path.join(assets, "model_streamer", sha256(given)[:8]), given
    return given, ""


def pull_config(model: str, model_weights: str) -> dict:
    """Config and tokenizer files into the local model folder, every start (no existence check)."""
    if model_weights:
        os.makedirs(model, exist_ok=True)
        from runai_model_streamer import pull_files

        pull_files(model_weights, model, allow_pattern=CONFIG_PATTERNS)
        pull_files(model_weights, model, ignore_pattern=WEIGHT_PATTERNS)
    return json.loads(Path(model, "config.json").read_text())


def plugin_weight_files(requested: str, env: dict[str, str]) -> list[str] | None:
    """The files warmstart's plugin has the loader stream for `requested`, when vLLM would load the plugin."""
    import importlib
    from importlib.metadata import entry_points

    allowed = env["VLLM_PLUGINS"].split(",") if "VLLM_PLUGINS" in env else None
    for plugin in entry_points(group="vllm.general_plugins"):
        if plugin.name == "warmstart_node_copy" and (allowed is None or plugin.name in allowed):
            plugin.load()  # as vLLM does: a plugin that fails to import fails here
            return importlib.import_module(plugin.module).node_copy_files(requested, env)
    return None


def load_weights(model: str, model_weights: str, env: dict[str, str]) -> tuple[int, dict[str, str], list[str]]:
    """Every tensor through the Run:ai streamer; returns bytes, a digest per tensor and the files streamed."""
    from runai_model_streamer import SafetensorsStreamer, list_safetensors

    source = model_weights or model
    files = plugin_weight_files(source, env) or (
        list_safetensors(source) if model_weights else sorted(str(p) for p in Path(model).glob("*.safetensors"))
    )
    total, digests = 0, {}
    with SafetensorsStreamer() as streamer:
        streamer.stream_files(files)
        for name, tensor in streamer.get_tensors():
            data = tensor.contiguous().view(-1).numpy().tobytes()
            digests[name] = hashlib.sha256(data).hexdigest()[:16]
            total += len(data)
    return total, digests, files


def hashes(args: dict[str, str], env: dict[str, str], model: str, model_weights: str, hf_config: dict) -> dict:
    model_factors = {
        "model": model,
        "model_weights": model_weights,
        "dtype": args.get("dtype", "auto"),
        "max_model_len": args.get("max-model-len"),
        "quantization": args.get("quantization"),
        "hf_config": hf_config,
        "revision": args.get("revision"),
    }
    compilation = json.loads(args.get("compilation-config") or "{}")
    compilation.pop("cache_dir", None)  # CompilationConfig.compute_hash ignores it
    version = release(env).version
    config = [
        version,
        sha256(json.dumps(model_factors, sort_keys=True)),
        {"tensor_parallel_size": args.get("tensor-parallel-size", "1")},
        {"max_num_batched_tokens": args.get("max-num-batched-tokens")},
        {"kv_cache_dtype": args.get("kv-cache-dtype", "auto")},
        compilation,
    ]
    env_hash = sha256(json.dumps(env_factors(env), sort_keys=True))
    config_hash = hashlib.md5(str(config).encode()).hexdigest()[:10]
    code_hash = sha256(f"{version}:{hf_config.get('architectures')}:/usr/local/lib/python3.12/site-packages/vllm")
    compiler_hash = hashlib.md5(
        f"{env.get('STANDIN_TORCH_VERSION')}:{env.get('STANDIN_GPU_NAME')}".encode()
    ).hexdigest()[:10]
    return {
        "env": env_hash,
        "config": config_hash,
        "code": code_hash,
        "compiler": compiler_hash,
        "env_factors": env_factors(env),
        "user_cache_dir": json.loads(args.get("compilation-config") or "{}").get("cache_dir"),
    }


def folder_name(known: VllmRelease, parts: dict) -> str:
    """The compile folder's name as the release forms it (its recorded `compile.folder_name`)."""
    formula = known.compile["folder_name"]
    if formula == "sha256-str-hash-list":
        return sha256(str([parts["env"], parts["config"], parts["code"], parts["compiler"]]))[:10]
    if formula == "sha256-json-raw-factors":
        raw = {
            "env": parts["env_factors"],
            "config": parts["config"],
            "code": parts["code"],
            "compiler": parts["compiler"],
        }
        return sha256(json.dumps(raw, sort_keys=True))[:10]
    raise SystemExit(f"the stand-in does not know vLLM {known.version}'s folder naming {formula!r}")


def aot_name(known: VllmRelease, parts: dict, env: dict[str, str]) -> str:
    """The AOT folder's hash: env and config, Inductor's factors when the artifact is self-contained (the release's
    default, or VLLM_USE_MEGA_AOT_ARTIFACT=1), the compiled forward's key."""
    mega = env.get("VLLM_USE_MEGA_AOT_ARTIFACT", "1" if known.compile["mega_aot_artifact_default"] else "0") == "1"
    factors = [parts["env"], parts["config"], *([parts["compiler"]] if mega else []), "forward"]
    return sha256(str(factors))


# What the stand-in writes as vLLM's AOT artifact: any other content is one it cannot load (a corrupt file).
AOT_ARTIFACT = b"aot" * 1000


def compile_or_load(args: dict[str, str], env: dict[str, str], parts: dict) -> dict:
    root = Path(
        env.get("VLLM_CACHE_ROOT") or f"{env.get('XDG_CACHE_HOME') or env.get('HOME', '/root') + '/.cache'}/vllm"
    )
    hash_key = folder_name(release(env), parts)
    cache_dir = Path(parts["user_cache_dir"]) if parts["user_cache_dir"] else root / "torch_compile_cache" / hash_key
    aot_dir = root / "torch_compile_cache" / "torch_aot_compile" / aot_name(release(env), parts, env)
    ranks = int(args.get("tensor-parallel-size", "1"))
    loaded = True
    for rank in range(ranks):
        local = cache_dir / f"rank_{rank}_0" / "backbone"
        index = local / "vllm_compile_cache.py"
        log(f"Using cache directory: {local} for vLLM's torch.compile")
        try:
            artifacts = json.loads(index.read_text())
            loaded = (
                loaded
                and all(Path(path).is_file() for path in artifacts.values())
                and (aot_dir / f"rank_{rank}_0" / "model").is_file()
            )
        except (OSError, ValueError):
            loaded = False
    unloadable = [
        r for r in range(ranks) if loaded and (aot_dir / f"rank_{r}_0" / "model").read_bytes() != AOT_ARTIFACT
    ]
    if loaded and not unloadable:
        log(f"Directly load AOT compilation from path {aot_dir}")
        log("Directly load the compiled graph(s) for compile range (1, 8192) from the cache, took 0.512 s")
        return {"hit": True, "cache_dir": str(cache_dir), "aot_dir": str(aot_dir)}
    if unloadable:  # as vLLM does with an artifact it cannot load: says why, compiles again into the same folders
        log(
            f"Compiling model again due to a load failure from {aot_dir}/rank_{unloadable[0]}_0/model, "
            "reason: invalid load key, 'x'."
        )
    started = time.monotonic()
    triton = Path(env.get("TRITON_CACHE_DIR") or f"{env.get('HOME', '/root')}/.triton/cache")
    for rank in range(ranks):
        local = cache_dir / f"rank_{rank}_0" / "backbone"
        local.mkdir(parents=True, exist_ok=True)
        artifacts = {}
        for graph in range(3):
            artifact = local / f"artifact_shape_None_subgraph_{graph}"
            artifact.write_bytes(hashlib.sha256(f"{hash_key}:{rank}:{graph}".encode()).digest() * 256)
            artifacts[f"(1, 8192):{graph}"] = str(artifact)  # absolute, as vLLM's standalone handles are
        kernel = triton / sha256(f"{hash_key}:{rank}")[:32] / "triton_.cubin"
        kernel.parent.mkdir(parents=True, exist_ok=True)
        kernel.write_bytes(b"\x7fELF" + bytes(4000))
        factors = local / "cache_key_factors.json"
        if not factors.exists():
            factors.write_text(
                json.dumps(
                    {
                        "env": parts["env_factors"],
                        "config_hash": parts["config"],
                        "code_hash": parts["code"],
                        "compiler_hash": parts["compiler"],
                    },
                    indent=2,
                    sort_keys=True,
                )
            )
        index = local / "vllm_compile_cache.py"
        index.write_text(json.dumps(artifacts, sort_keys=True))
        aot = aot_dir / f"rank_{rank}_0" / "model"
        aot.parent.mkdir(parents=True, exist_ok=True)
        temporary = aot.with_name(f"model.{os.getpid()}.tmp")
        temporary.write_bytes(AOT_ARTIFACT)
        os.replace(temporary, aot)
    seconds = float(env.get("STANDIN_COMPILE_SECONDS", "0"))
    time.sleep(max(0.0, seconds - (time.monotonic() - started)))
    log(f"Compiling a graph for compile range (1, 8192) takes {max(seconds, time.monotonic() - started):.2f} s")
    log(f"saved AOT compiled function to {aot_dir}")
    return {"hit": False, "cache_dir": str(cache_dir), "aot_dir": str(aot_dir)}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    model, model_weights = model_paths(args, env)
    hf_config = pull_config(model, model_weights)
    root = Path(env.get("VLLM_CACHE_ROOT") or f"{env.get('HOME', '/root')}/.cache/vllm")
    (root / "modelinfos").mkdir(parents=True, exist_ok=True)  # registry cache, at config time
    (root / "modelinfos" / f"{hf_config.get('architectures', ['X'])[0]}.json").write_text("{}")
    if env.get("STANDIN_PAUSE_FILE"):  # lets a test hold the pod between config and weights, like a slow load
        while Path(env["STANDIN_PAUSE_FILE"]).exists():
            time.sleep(0.05)
    weights_bytes, digests, weights_files = load_weights(model, model_weights, env)
    log(f"Model loading took 1.00 GiB memory and 1.000000 seconds ({weights_bytes} bytes)")
    parts = hashes(args, env, model, model_weights, hf_config)
    result = compile_or_load(args, env, parts)
    report = {
        **result,
        "model": model,
        "model_weights": model_weights,
        "weights_bytes": weights_bytes,
        "weights_files": weights_files,
        "weights_digest": sha256(json.dumps(digests, sort_keys=True)),
        "endpoint": env.get("AWS_ENDPOINT_URL"),
        "hash_parts": {k: parts[k] for k in ("env", "config", "code", "compiler")},
    }
    print("STANDIN-REPORT " + json.dumps(report, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
