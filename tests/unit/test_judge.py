"""How the agent tells, from vLLM's hash folders before and after a pod start, whether vLLM used a cache."""

import json
from pathlib import Path

import pytest

from contracts.node_layout import COMPILE_CACHE_CONTENT
from node_agent.runtime.compile_judgement import Cause, judge, with_engine_evidence
from node_agent.runtime.compile_manifest import VLLM_FOLDER
from node_agent.runtime.vllm_log import MAX_REASON_CHARS, parse_start

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


# ---- vLLM's own lines decide first ----

LOAD_FAILURE_LINE = (
    "(EngineCore pid=212) WARNING 12-04 10:11:12 [decorators.py:322] Compiling model again due to a load failure "
    "from /root/.cache/vllm/torch_compile_cache/torch_aot_compile/3f2a/rank_0_0/model, reason: 'function' object "
    "has no attribute 'finalize_loading'"
)
LOADED_LINE = "(EngineCore pid=212) INFO 12-04 10:11:12 [decorators.py:300] Directly load AOT compilation from path x"
COMPILED_LINE = "(EngineCore pid=212) INFO 12-04 10:11:12 [backends.py:393] Compiling a graph for compile range (1, 8)"


def _folders(start, now, tmp_path, origin=RESTORED):
    return judge(start_dirs=start, now_dirs=now, origin=origin, restore={"status": "restored"}, config_dir=tmp_path)


def _said(*texts):
    return parse_start([(float(i), text) for i, text in enumerate(texts)])


def test_a_graph_vllm_could_not_load_is_a_miss_even_though_no_folder_is_new(tmp_path):
    """The restored folder was there and stayed (vLLM compiled again into it): the folders alone say hit."""
    folders = _folders([A], [A], tmp_path)
    assert folders.outcome == "hit"
    judged = with_engine_evidence(folders, _said(LOAD_FAILURE_LINE, COMPILED_LINE))
    assert (judged.outcome, judged.source, judged.expected_hit) == ("miss", "restored", True)
    assert (judged.cause, judged.evidence) == (Cause.LOAD_FAILURE, "vllm-log")
    assert "'function' object has no attribute 'finalize_loading'" in judged.reason


def test_a_load_failure_wins_over_a_loaded_line(tmp_path):
    judged = with_engine_evidence(_folders([A], [A], tmp_path), _said(LOADED_LINE, LOAD_FAILURE_LINE))
    assert (judged.outcome, judged.cause) == ("miss", Cause.LOAD_FAILURE)


def test_vllm_saying_it_compiled_is_a_miss_whatever_the_folders_say(tmp_path):
    judged = with_engine_evidence(_folders([A], [A], tmp_path), _said(COMPILED_LINE))
    assert (judged.outcome, judged.cause, judged.evidence) == ("miss", Cause.COMPILED, "vllm-log")
    changed = with_engine_evidence(_folders([A], [A, B], tmp_path), _said(COMPILED_LINE))
    assert (changed.outcome, changed.cause) == ("miss", Cause.HASH_CHANGED)  # the folders' reason is the better one


def test_vllm_saying_it_loaded_is_a_hit(tmp_path):
    judged = with_engine_evidence(_folders([A], [A], tmp_path), _said(LOADED_LINE))
    assert (judged.outcome, judged.source, judged.cause, judged.evidence) == ("hit", "restored", "loaded", "vllm-log")


@pytest.mark.parametrize("said", [None, "no lines", "unrelated lines"])
def test_without_vllms_word_the_folders_decide(said, tmp_path):
    folders = _folders([A], [A], tmp_path)
    vllm = {None: None, "no lines": parse_start([]), "unrelated lines": _said("INFO something else")}[said]
    assert with_engine_evidence(folders, vllm) == folders
    assert folders.evidence == "folders"


def test_vllms_reason_is_cut_to_a_bounded_length():
    start = _said(LOAD_FAILURE_LINE.replace("'finalize_loading'", "x" * 10_000))
    assert start.load_failure is not None and len(start.load_failure) == MAX_REASON_CHARS
    assert _said("Compiling model again due to a load failure from /p, reason: ").load_failure == "no reason given"


def test_an_artifact_traced_from_other_sources_is_a_changed_hash_not_a_broken_file(tmp_path):
    line = LOAD_FAILURE_LINE.split("reason: ")[0] + "reason: Source code has changed since the last compilation."
    judged = with_engine_evidence(_folders([A], [A], tmp_path), _said(line))
    assert (judged.outcome, judged.cause) == ("miss", Cause.HASH_CHANGED)
