"""The real vLLM tier's fixtures: each supported release's installed environment."""

from __future__ import annotations

import pytest

from tests.real_vllm.environment import VllmEnvironment, environment
from warmstart.vllm_release import SUPPORTED


@pytest.fixture(scope="session", params=SUPPORTED, ids=lambda version: f"vllm-{version}")
def vllm_environment(request) -> VllmEnvironment:
    env = environment(request.param)
    if not env.installed():
        pytest.fail(
            f"the real vLLM environment is not installed: run `make vllm-env` (vLLM {request.param} into "
            f"{env.root}, about 8-9 GB)"
        )
    return env
