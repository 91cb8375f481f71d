"""vLLM's own start, up to the engine, in place of `vllm serve` (any supported release: 0.21.0, 0.34.0).

Runs in the real vLLM environment of the release under test (tests/real_vllm/environment.py) with the container's
environment exactly as the pod would have it; standard library and vLLM only.
Usage: python probe.py <gpu.json> serve <model> <vLLM arguments...>

What it runs is vLLM's, in the order its server runs it (vllm/entrypoints/cli/main.py and serve.py,
`build_async_engine_client`, vllm/v1/engine/core.py):
1. every variable of `vllm.envs` evaluated, as `enable_envs_cache()` does at engine start (one error each);
2. the `vllm` CLI's own main: `cli_env_setup()`, every subcommand's parser, `parse_args`, the serve subcommand's
   validation; then the server's `validate_api_server_args`;
3. `AsyncEngineArgs.from_cli_args(args).create_engine_config(usage_context=OPENAI_API_SERVER)`: for an s3:// model
   this pulls the config and tokenizer files with the Run:ai streamer (boto3), as on the node;
4. the engine's own addresses (`get_ip()`, `get_open_port()`: VLLM_HOST_IP, VLLM_PORT), then the compile-cache hash
   parts as they stand once the engine config is built (vllm/compilation/backends.py `VllmBackend.__call__`):
   `envs.compile_factors()`, the config's and the compiler's `compile_factors()` (0.34.0) or `compute_hash()`
   (0.21.0), and the AOT folder's
   (caching.py `aot_compile_hash_factors` + decorators.py `_model_hash_key`). These are *config-time* values: vLLM
   computes its folder names at the model's first forward, after building the model has recorded which custom ops
   it enabled and the attention backend has set the KV block size into the config, so the real names differ. Those
   later changes are functions of the same config, platform and model code, so two starts with equal config-time
   parts get equal folders, and a change a warmstart config can make moves the config-time parts; the GPU script
   (bench/gpu_vllm_cold_start.py) lists the real folders;
5. the weights as the worker loads them: its general plugins loaded, the model loader vLLM picks for the load
   format, the files it lists, every tensor streamed by the real Run:ai streamer.
Not run here: binding the serving port, the tokenizer load (the fixtures carry no tokenizer files) and the model
build.
The one thing not vLLM's own: the platform. With no GPU here, vLLM would pick no CUDA platform; a subclass of its
CudaPlatformBase reports the GPU the node's instance type has (gpu.json, from warmstart/catalog.yaml).

Prints one line `REAL-VLLM-REPORT {json}`; exits 1 when any step failed, naming the step and vLLM's error.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


def install_platform(gpu: dict) -> None:
    import vllm.platforms as platforms
    from vllm.platforms.cuda import CudaPlatformBase
    from vllm.platforms.interface import DeviceCapability

    class NodeGpu(CudaPlatformBase):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(*gpu["capability"])

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return gpu["name"]

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return gpu["memory_bytes"]

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:
            return gpu["fully_connected"]

        @classmethod
        def device_count(cls) -> int:
            return gpu["count"]

    platforms._current_platform = NodeGpu()


def evaluate_envs() -> list[dict]:
    """Every variable vLLM knows, read the way enable_envs_cache() reads them at engine start."""
    import vllm.envs as envs

    errors = []
    for name in envs.environment_variables:
        try:
            getattr(envs, name)
        except Exception as error:  # noqa: BLE001 - the report names each one
            errors.append({"stage": "envs", "variable": name, "error": f"{type(error).__name__}: {error}"})
    return errors


def parse(argv: list[str]):
    """vLLM's own command line, as `vllm serve <model> ...` runs it: the CLI's main (vllm/entrypoints/cli/main.py)
    builds every subcommand's parser, parses, runs the subcommand's validation, then dispatches to
    `ServeSubcommand.cmd`, which here only keeps the arguments (after its first step: the positional model wins),
    instead of starting the server. Then what the server checks before it binds its port."""
    import vllm.entrypoints.cli.main as cli
    import vllm.entrypoints.cli.serve as serve

    kept: dict = {}

    def keep(args) -> None:
        if getattr(args, "model_tag", None) is not None:
            args.model = args.model_tag
        kept["args"] = args

    serve.ServeSubcommand.cmd = staticmethod(keep)
    sys.argv = ["vllm", *argv]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            cli.main()
    except SystemExit as exit_:
        raise ValueError(f"argument parser exited {exit_.code}: {stderr.getvalue().strip()[-600:]}") from None
    if "args" not in kept:
        raise ValueError(f"vllm {' '.join(argv[:1])} did not reach the serve command: {stderr.getvalue()[-600:]}")
    args = kept["args"]
    _function("validate_api_server_args")(args)  # what setup_server checks before it binds the port
    return args


def _function(name: str):
    """A vLLM function by the module it lives in, in the newest release first (0.34.0 moved the server's helpers
    from vllm.entrypoints.openai.api_server into vllm.entrypoints.common)."""
    import importlib

    for module in ("vllm.entrypoints.common.cli_args", "vllm.entrypoints.openai.api_server"):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ModuleNotFoundError:
            continue  # not in this release
        if found is not None:
            return found
    raise AttributeError(f"no vLLM module the probe knows has {name}")


def decorated_model_class(model_cls: type) -> type | None:
    """The class vLLM compiles: the one its module decorates with @support_torch_compile (which appends
    TorchCompileWithNoGuardsWrapper to its bases), preferring the name the causal LM's own name suggests."""
    import inspect

    from vllm.compilation.wrapper import TorchCompileWithNoGuardsWrapper

    module = sys.modules[model_cls.__module__]
    candidates = [
        c
        for _, c in inspect.getmembers(module, inspect.isclass)
        if TorchCompileWithNoGuardsWrapper in c.__bases__ and c.__module__ == module.__name__
    ]
    if len(candidates) == 1:
        return candidates[0]
    preferred = model_cls.__name__.replace("ForCausalLM", "Model").replace("ForConditionalGeneration", "Model")
    return next((c for c in candidates if c.__name__ == preferred), None)


def hashes(config) -> dict:
    """The compile-cache hash parts as the release computes them: `compile_factors()` hashed with `hash_factors`
    (0.34.0, which renamed `compute_hash`) or `compute_hash()` (0.21.0), for the config and the compiler."""
    import inspect

    import vllm.envs as envs
    from vllm.compilation.backends import make_compiler
    from vllm.compilation.caching import aot_compile_hash_factors
    from vllm.compilation.decorators import _model_hash_key
    from vllm.config.utils import hash_factors
    from vllm.model_executor.models import ModelRegistry

    env_factors = envs.compile_factors()
    # 0.34.0's backend is built with the AOT switch (vllm/compilation/decorators.py passes VLLM_USE_AOT_COMPILE).
    takes_aot = "use_aot_compile" in inspect.signature(make_compiler).parameters
    aot_switch = {"use_aot_compile": envs.VLLM_USE_AOT_COMPILE} if takes_aot else {}
    compiler = make_compiler(config.compilation_config, **aot_switch)
    if hasattr(config, "compile_factors"):
        config_part = hash_factors(config.compile_factors())
        compiler_part = hash_factors(compiler.compile_factors(config))
    else:
        config_part, compiler_part = config.compute_hash(), compiler.compute_hash(config)
    parts = {"env": hash_factors(env_factors), "config": config_part, "compiler": compiler_part}
    model_cls, architecture = ModelRegistry.resolve_model_cls(
        config.model_config.architectures, model_config=config.model_config
    )
    compiled: Any = decorated_model_class(model_cls)  # a model class (nn.Module), or None
    aot = None
    if compiled is not None:
        factors = [*aot_compile_hash_factors(config), _model_hash_key(compiled.forward)]
        aot = hashlib.sha256(str(factors).encode()).hexdigest()
    return {
        "parts": parts,
        "env_factors": {
            k: v if isinstance(v, (str, int, float, bool, type(None))) else repr(v) for k, v in env_factors.items()
        },
        "architecture": architecture,
        "compiled_class": f"{compiled.__module__}.{compiled.__qualname__}" if compiled else None,
        "compiled_forward": compiled.forward.__qualname__ if compiled else None,
        "aot_hash": aot,
    }


def describe(config) -> dict:
    import vllm.envs as envs
    from vllm.assets.base import get_cache_dir

    model, parallel, cache = config.model_config, config.parallel_config, config.cache_config
    return {
        "model": model.model,
        "model_weights": model.model_weights,
        "tokenizer": model.tokenizer,
        "served_model_name": model.served_model_name,
        "dtype": str(model.dtype),
        "max_model_len": model.max_model_len,
        "max_num_batched_tokens": config.scheduler_config.max_num_batched_tokens,
        "quantization": model.quantization,
        "kv_cache_dtype": str(cache.cache_dtype),
        "tensor_parallel_size": parallel.tensor_parallel_size,
        "pipeline_parallel_size": parallel.pipeline_parallel_size,
        "enforce_eager": model.enforce_eager,
        "compilation_mode": str(config.compilation_config.mode),
        "compilation_cache_dir": config.compilation_config.cache_dir,
        "load_format": str(config.load_config.load_format),
        "model_loader_extra_config": config.load_config.model_loader_extra_config,
        "vllm_cache_root": envs.VLLM_CACHE_ROOT,
        "assets_cache": str(get_cache_dir()),
        "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
        "triton_cache_dir": os.environ.get("TRITON_CACHE_DIR"),
        "pulled_files": sorted(p.name for p in Path(model.model).iterdir()) if Path(model.model).is_dir() else [],
    }


def weights(config) -> dict:
    """The weights as the worker loads them (vllm/v1/worker/worker_base.py loads the general plugins, then the model
    loader lists the files and streams them): the loader vLLM picks for the load format, the files it lists for
    `model_weights`, and a digest of every tensor the real Run:ai streamer yields. The iterator is called without
    distribution: with no GPU, distributed streaming has no device to stream to."""
    from vllm.model_executor.model_loader import get_model_loader
    from vllm.model_executor.model_loader.weight_utils import runai_safetensors_weights_iterator
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    loader = get_model_loader(config.load_config)
    model = config.model_config
    files = loader._prepare_weights(model.model_weights or model.model, model.revision)
    tensors = {}
    for name, tensor in runai_safetensors_weights_iterator(files, False, False):
        raw = tensor.contiguous().reshape(-1).view(torch_uint8()).numpy().tobytes()
        tensors[name] = f"{tensor.dtype}{list(tensor.shape)}:{hashlib.sha256(raw).hexdigest()}"
    return {"loader": f"{type(loader).__module__}.{type(loader).__qualname__}", "files": files, "tensors": tensors}


def torch_uint8():
    import torch

    return torch.uint8


def run(gpu: dict, argv: list[str]) -> dict:
    report: dict = {"argv": argv, "environ": dict(os.environ), "errors": []}
    stage = "platform"
    try:
        install_platform(gpu)
        stage = "envs"
        report["errors"] += evaluate_envs()
        import vllm
        import vllm.envs as envs

        report["vllm_version"] = vllm.__version__
        report["known_env"] = sorted(envs.environment_variables)
        stage = "arguments"
        args = parse(argv)
        stage = "engine config"
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.usage.usage_lib import UsageContext

        config = AsyncEngineArgs.from_cli_args(args).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        report["config"] = describe(config)
        stage = "engine addresses"
        from vllm.utils.network_utils import get_ip, get_open_port

        report["engine_addresses"] = {"ip": get_ip(), "port": get_open_port()}  # VLLM_HOST_IP, VLLM_PORT
        stage = "compile hash"
        report["hash"] = hashes(config)
        stage = "weights"
        report["weights"] = weights(config)
    except Exception as error:  # noqa: BLE001 - reported with the step that failed
        report["errors"].append(
            {
                "stage": stage,
                "error": f"{type(error).__name__}: {error}",
                "traceback": traceback.format_exc()[-2000:],
            }
        )
    return report


def main() -> int:
    gpu = json.loads(Path(sys.argv[1]).read_text())
    report = run(gpu, sys.argv[2:])
    print("REAL-VLLM-REPORT " + json.dumps(report, sort_keys=True, default=str), flush=True)
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
