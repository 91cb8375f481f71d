"""Records, from the installed real vLLM, the variable lists the fast tier's vLLM stand-in hashes by
(tests/standins/vllm_env_facts.json). Run after a vLLM pin changes: python -m tests.real_vllm.record_facts"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.real_vllm.environment import environment, pinned_version

FACTS = Path(__file__).resolve().parents[1] / "standins" / "vllm_env_facts.json"
# Read inside the vLLM environment: vllm/envs.py's own tables (no GPU, no platform involved).
READ = """
import json, vllm, vllm.envs as envs
print(json.dumps({"vllm": vllm.__version__, "known": sorted(envs.environment_variables),
                  "hashed": sorted(envs.compile_factors())}))
"""


def main() -> int:
    env = environment()
    if not env.installed():
        print("run `make vllm-env` first", file=sys.stderr)
        return 2
    read = subprocess.run([str(env.python), "-c", READ], capture_output=True, text=True, check=True, env={})
    facts = json.loads(read.stdout.strip().splitlines()[-1])
    assert facts["vllm"] == pinned_version("vllm")
    document = {
        "source": f"vllm {facts['vllm']}: vllm/envs.py environment_variables and compile_factors()",
        "known": facts["known"],
        "hashed": facts["hashed"],
    }
    FACTS.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {FACTS}: {len(facts['known'])} known, {len(facts['hashed'])} hashed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
