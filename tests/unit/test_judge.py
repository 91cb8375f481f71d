"""How the agent tells, from vLLM's hash folders before and after a pod start, whether vLLM used a cache."""

import json
from pathlib import Path

import pytest

from contracts.node_layout import COMPILE_CACHE_CONTENT
from node_agent.runtime.compile_cache import VLLM_FOLDER, judge

A, B = "torch_compile_cache/aaaaaaaaaa", "torch_compile_cache/bbbbbbbbbb"
RESTORED = {"origin": "restored", "hash_dirs": [A]}


@pytest.mark.parametrize(
    "case, start, now, origin, restore, expected",
    [
        ("restored before the pod looked", [A], [A], RESTORED, {"status": "restored"}, ("hit", "restored", True)),
        (
            "restored after the entry step, before vLLM",
            [],
            [A],
            RESTORED,
            {"status": "restored"},
            ("hit", "restored", True),
        ),
        ("compiled earlier on this node", [A], [A], None, {"status": "miss"}, ("hit", "local", True)),
        ("first pod of the configuration", [], [A], None, {"status": "miss"}, ("miss", "compiled", False)),
        ("pod beat the restore", [], [A], None, {"status": "busy"}, ("miss", "compiled", True)),
        ("restore failed", [], [A], None, {"status": "failed", "reason": "x"}, ("miss", "compiled", True)),
        ("vLLM's hash changed", [A], [A, B], RESTORED, {"status": "restored"}, ("miss", "compiled", True)),
        (
            "restored, yet vLLM made another folder",
            [],
            [B],
            RESTORED,
            {"status": "restored"},
            ("miss", "compiled", True),
        ),
        ("no torch.compile", [], [], None, {"status": "miss"}, ("none", "none", False)),
    ],
)
def test_judgement(case, start, now, origin, restore, expected, tmp_path: Path):
    observation = judge(start_dirs=start, now_dirs=now, origin=origin, restore=restore, config_dir=tmp_path)
    assert (observation.outcome, observation.source, observation.expected_hit) == expected, case


def test_a_changed_hash_names_the_part_that_changed(tmp_path):
    for folder, compiler in ((A, "c1"), (B, "c2")):
        # vLLM's cache root inside the configuration's folder (warmstart.workload.vllm_env)
        record = (
            tmp_path / COMPILE_CACHE_CONTENT / VLLM_FOLDER / folder / "rank_0_0" / "backbone" / "cache_key_factors.json"
        )
        record.parent.mkdir(parents=True)
        record.write_text(json.dumps({"config_hash": "x", "code_hash": "y", "compiler_hash": compiler, "env": {}}))
    observation = judge(start_dirs=[A], now_dirs=[A, B], origin=None, restore=None, config_dir=tmp_path)
    assert "compiler" in observation.reason and "vLLM config" not in observation.reason
