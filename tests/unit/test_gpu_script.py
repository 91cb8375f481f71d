"""The GPU cold-start script (bench/gpu_vllm_cold_start.py, run by hand on a GPU machine) stays runnable:
its dry run builds the local model and the plan without vLLM or a GPU."""

import json
import subprocess
import sys

from safetensors import safe_open

from tests.synth import ROOT


def test_dry_run_builds_a_loadable_llama_and_plans_every_case(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_vllm_cold_start.py"), "--dry-run", "--work", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    plan = json.loads(done.stdout)
    assert [case for case, _, _ in plan["cases"]] == ["cold", "warm_node", "restored", "node_copy", "local_path"]
    assert all(model.startswith("s3://") for case, model, _ in plan["cases"] if case != "local_path")
    config = json.loads((tmp_path / "source" / "config.json").read_text())
    names = set()
    for shard in sorted((tmp_path / "source").glob("*.safetensors")):
        with safe_open(str(shard), "pt") as handle:
            names |= set(handle.keys())
    layers = config["num_hidden_layers"]
    assert len(names) == 3 + 9 * layers and f"model.layers.{layers - 1}.mlp.down_proj.weight" in names
    assert sorted(p.name for p in (tmp_path / "node-copy").iterdir()) == sorted(
        p.name for p in (tmp_path / "source").iterdir()
    )
