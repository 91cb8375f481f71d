"""The serving image `vllm/vllm-openai:v0.21.0` as the kubelet stand-in runs it for the real vLLM tier.

- Its ENV, as the image's Dockerfile sets it for the `vllm-openai` target (vLLM 0.21.0 sdist, docker/Dockerfile:
  lines 540, 613-620, 720, 739, 834-838, 862-866; the build-time labels VLLM_BUILD_* and VLLM_IMAGE_TAG are no
  variable vLLM reads). The CUDA base image's PATH and LD_LIBRARY_PATH are replaced by this machine's: its
  `python3` is a launcher in front of the real vLLM environment.
- `python3 -m vllm.entrypoints.openai.api_server ...` runs tests/real_vllm/probe.py with the same arguments, in
  the same process environment; any other `python3` (the entry step, its loopback endpoint) is the environment's
  own interpreter. The launcher puts the CUDA driver stub on the library path, where the NVIDIA container toolkit
  would mount the node's driver (LD_LIBRARY_PATH is outside vLLM's compile hash: vllm/envs.py compile_factors).
- The node's GPU (name, compute capability, memory, count) comes from warmstart/catalog.yaml for its instance type.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.real_vllm.environment import VllmEnvironment, build_driver_stub
from warmstart.catalog import GpuInstance

PROBE = Path(__file__).resolve().with_name("probe.py")
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
# docker/Dockerfile of vLLM 0.21.0, the vllm-openai target's ENV (see the module docstring for the lines).
DOCKERFILE_ENV = {
    "DEBIAN_FRONTEND": "noninteractive",
    "UV_HTTP_TIMEOUT": "500",
    "UV_INDEX_STRATEGY": "unsafe-best-match",
    "UV_LINK_MODE": "copy",
    "VLLM_ENABLE_CUDA_COMPATIBILITY": "0",
    "TORCH_CUDA_ARCH_LIST": "7.5 8.0 8.6 8.9 9.0 10.0 11.0 12.0+PTX",
    "VLLM_USAGE_SOURCE": "production-docker-image",
}


def gpu_facts(instance: GpuInstance) -> dict:
    major, minor = instance.compute_capability
    return {
        "name": instance.device_name,
        "capability": [major, minor],
        "memory_bytes": instance.gpu_memory_gb * 10**9,
        "count": instance.gpu_count,
        # NVLink/NVSwitch on the P-family's multi-GPU types; PCIe elsewhere.
        "fully_connected": instance.gpu_count > 1 and instance.instance_type.startswith("p"),
    }


def image_for_node(
    env: VllmEnvironment, instance: GpuInstance, folder: Path, *, engine: str = "probe"
) -> dict[str, str]:
    """Writes the launcher for a node of `instance` into `folder` and returns the image's ENV. `engine`: "probe"
    (no GPU: vLLM's start up to the engine, with the driver stub) or "server" (a GPU machine: vLLM's own server,
    with the node's real driver)."""
    folder.mkdir(parents=True, exist_ok=True)
    python = shlex.quote(str(env.python))
    lines = ["#!/bin/sh"]
    if engine == "probe":
        stub = build_driver_stub(env)
        gpu_file = folder / "gpu.json"
        gpu_file.write_text(json.dumps(gpu_facts(instance)))
        lines += [
            f'export LD_LIBRARY_PATH={shlex.quote(str(stub))}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"',
            f'if [ "$1" = "-m" ] && [ "$2" = "{SERVER_MODULE}" ]; then',
            "  shift 2",
            f'  exec {python} {shlex.quote(str(PROBE))} {shlex.quote(str(gpu_file))} "$@"',
            "fi",
        ]
    elif engine != "server":
        raise ValueError(f"engine {engine!r}: probe or server")
    lines.append(f'exec {python} "$@"')
    launcher = folder / "python3"
    launcher.write_text("\n".join(lines) + "\n")
    launcher.chmod(0o755)
    return {
        **DOCKERFILE_ENV,
        "PATH": f"{folder}:{env.python.parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }
