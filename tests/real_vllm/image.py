"""The serving image `vllm/vllm-openai:v<release>` as the kubelet stand-in runs it for the real vLLM tier.

- Its ENV, as the release's own docker/Dockerfile builds the `vllm-openai` target (recorded into
  warmstart/vllm_releases/<release>.json by tests/real_vllm/record_facts.py). The image's PATH and
  LD_LIBRARY_PATH are replaced by this machine's: its `python3` and `vllm` are launchers in front of the release's
  real vLLM environment.
- `vllm serve ...` (the image's ENTRYPOINT, and what warmstart renders) runs tests/real_vllm/probe.py with the same
  arguments, in the same process environment; any other `python3` (the entry step, its loopback endpoint) is the
  environment's own interpreter. The launcher puts the CUDA driver stub on the library path, where the NVIDIA
  container toolkit would mount the node's driver (LD_LIBRARY_PATH is outside vLLM's compile hash:
  vllm/envs.py compile_factors).
- The node's GPU (name, compute capability, memory, count) comes from warmstart/catalog.yaml for its instance type.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from tests.real_vllm.environment import VllmEnvironment, build_driver_stub
from warmstart.catalog import GpuInstance
from warmstart.vllm_release import nearest_older, releases

PROBE = Path(__file__).resolve().with_name("probe.py")
# Replaced by the launchers' folder and this machine's libraries (the stub); the base image's own are not recorded.
MACHINE_VARIABLES = ("PATH", "LD_LIBRARY_PATH")


def image_env(version: str) -> dict[str, str]:
    """The release's image ENV, less what this machine supplies; for a release the table does not hold (the engine
    tier's CPU builds between two recorded ones), the nearest older recorded release's, as synth takes its facts."""
    release = releases().get(version) or nearest_older(version)
    return {k: v for k, v in release.image["env"].items() if k not in MACHINE_VARIABLES}


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
    """Writes the launchers for a node of `instance` into `folder` and returns the image's ENV. `engine`: "probe"
    (no GPU: vLLM's start up to the engine, with the driver stub) or "server" (a GPU machine: vLLM's own CLI, with
    the node's real driver)."""
    folder.mkdir(parents=True, exist_ok=True)
    python = shlex.quote(str(env.python))
    if engine == "probe":
        stub = build_driver_stub(env)
        gpu_file = folder / "gpu.json"
        gpu_file.write_text(json.dumps(gpu_facts(instance)))
        vllm = [
            f'export LD_LIBRARY_PATH={shlex.quote(str(stub))}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"',
            f'exec {python} {shlex.quote(str(PROBE))} {shlex.quote(str(gpu_file))} "$@"',
        ]
    elif engine == "server":
        vllm = [f'exec {python} -m vllm.entrypoints.cli.main "$@"']
    else:
        raise ValueError(f"engine {engine!r}: probe or server")
    _launcher(folder / "python3", [f'exec {python} "$@"'])
    _launcher(folder / "vllm", vllm)
    return {
        **image_env(env.version),
        "PATH": f"{folder}:{env.python.parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    }


def _launcher(path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(["#!/bin/sh", *lines]) + "\n")
    path.chmod(0o755)
