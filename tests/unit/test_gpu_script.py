"""The GPU cold-start script (bench/gpu_vllm_cold_start.py, run by hand on a GPU machine) stays runnable: its
plan builds the local model without vLLM or a GPU (the real vLLM tier runs its whole pipeline with vLLM's probe)."""

import json
import subprocess
import sys

from safetensors import safe_open

from tests.synth import ROOT


def test_the_plan_builds_a_loadable_llama_and_names_every_case(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_vllm_cold_start.py"), "--plan", "--work", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    plan = json.loads(done.stdout)
    assert list(plan["cases"]) == ["cold", "warm_node", "restored", "node_copy"]
    assert plan["cases"]["cold"] == plan["cases"]["warm_node"] != plan["cases"]["restored"]
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["max_position_embeddings"] >= 8192  # the shipped configs' --max-model-len
    names = set()
    for shard in sorted((tmp_path / "model").glob("*.safetensors")):
        with safe_open(str(shard), "pt") as handle:
            names |= set(handle.keys())
    layers = config["num_hidden_layers"]
    assert len(names) == 3 + 9 * layers and f"model.layers.{layers - 1}.mlp.down_proj.weight" in names
