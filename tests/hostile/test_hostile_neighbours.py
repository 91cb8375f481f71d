"""Findings of the review of issue 22's change, each against the real agent: a pod outside its model's namespace,
vLLM's factor record in hostile shapes, trees deep enough to break recursion, a flood of junk under a key's
manifests, and a download held back for a pod (liveness)."""

from __future__ import annotations

import json
import os
import threading
import time

from contracts.node_layout import COMPILE_CACHE_CONTENT
from node_agent.runtime.__main__ import repeat
from node_agent.runtime.archive import FACTORS_FILE, FACTORS_MAX_BYTES, pack
from node_agent.runtime.compile_judgement import why_hash_differs
from node_agent.runtime.compile_manifest import VLLM_FOLDER, published
from node_agent.runtime.fs import remove_tree
from node_agent.runtime.liveness import Liveness
from node_agent.runtime.log import EventLog
from node_agent.runtime.s3.compile_store import CacheStore
from tests.agent.cluster_world import MODEL
from tests.hostile.hostile_world import tree_state


def test_a_pod_with_a_models_labels_in_another_namespace_is_nobodys(hostile):
    """Anyone who may create pods somewhere can copy a model's labels; the agent decides only on pods in the
    model's own namespace (a model's namespace is its name), and refuses what the impostor writes."""
    agent = hostile.node.agent
    uid = hostile.add_pod("impostor")
    hostile.world.cluster.pods[-1]["metadata"]["namespace"] = "team-a"
    hostile.record(uid, phase="started", weights={"source": "s3", "key": None, "reason": "streaming"})
    agent.tick()
    assert uid not in {p["metadata"]["uid"] for p in agent._vllm_pods() or []}
    assert uid not in agent.streaming_from_s3()  # it cannot hold the node's downloads back
    refusals = {(r["source"], r["item"]) for r in hostile.refusals()}
    assert ("pod", uid) in refusals and ("pod-record", uid) in refusals


def _factor_folder(config_dir, hash_dir: str):
    folder = config_dir / COMPILE_CACHE_CONTENT / VLLM_FOLDER / hash_dir / "rank_0_0" / "backbone"
    folder.mkdir(parents=True)
    return folder


def test_factor_records_of_another_shape_are_not_compared(tmp_path):
    """vLLM writes `env` as an object and the hashes as strings; a pod may write anything there. The reason a
    hash differs is then unknown, never an exception on the agent's loop."""
    shapes = {
        "torch_compile_cache/a": {"env": "VLLM_X=1", "config_hash": "1", "code_hash": "2", "compiler_hash": "3"},
        "torch_compile_cache/b": {"env": {}, "config_hash": ["x"], "code_hash": "2", "compiler_hash": "3"},
        "torch_compile_cache/c": ["not", "an", "object"],
    }
    for hash_dir, document in shapes.items():
        (_factor_folder(tmp_path, hash_dir) / FACTORS_FILE).write_text(json.dumps(document))
    reason = why_hash_differs(tmp_path, ["torch_compile_cache/a", "torch_compile_cache/b"], ["torch_compile_cache/c"])
    assert "no factor record" in reason


def test_a_factor_record_behind_a_linked_folder_is_not_read(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / FACTORS_FILE).write_text(
        json.dumps({"env": {}, "config_hash": "1", "code_hash": "", "compiler_hash": ""})
    )
    folder = _factor_folder(tmp_path / "config", "torch_compile_cache/a")
    folder.rmdir()
    folder.symlink_to(outside)
    assert "no factor record" in why_hash_differs(tmp_path / "config", ["torch_compile_cache/a"], ["x"])


def test_an_oversized_factor_record_is_left_out_of_the_archive(tmp_path):
    """The factor record is read whole to redact secrets: a sparse 8 GiB one would have been read into memory."""
    source = _factor_folder(tmp_path / "config", "torch_compile_cache/a")
    with open(source / FACTORS_FILE, "wb") as handle:
        handle.truncate(8 * 2**30)
    (source / "artifact.bin").write_bytes(b"compiled")
    packed = pack(tmp_path / "config" / COMPILE_CACHE_CONTENT, tmp_path / "out.tar.zst")
    assert packed.files == 1
    assert FACTORS_MAX_BYTES < 8 * 2**30


def test_a_tree_deeper_than_pythons_recursion_limit_is_removed(tmp_path):
    """shutil.rmtree raised RecursionError on a tree thousands of levels deep, on every cleanup round."""
    top = tmp_path / "pod"
    os.makedirs(top)
    folder = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(5000):  # one level at a time: the path would exceed PATH_MAX
        os.mkdir("d", dir_fd=folder)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=folder)
        os.close(folder)
        folder = inner
    os.close(folder)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    os.symlink(outside, top / "link")
    before = tree_state(outside)
    remove_tree(top)
    assert not top.exists()
    assert tree_state(outside) == before


def test_a_flood_of_junk_under_a_keys_manifests_hides_no_manifest(hostile):
    """Any node may create objects under a key; junk named to sort before the manifests used to fill the listing
    the agent read, so the real manifest was never seen."""
    source = hostile.world.node("node-a")
    source.agent.start()
    state = source.agent.models[MODEL]
    store = CacheStore(hostile.world.client, hostile.world.config.buckets.compile_cache)
    for index in range(80):
        store.put_json(f"{state.key.manifest_prefix}0-junk-{index:03d}.json", {"junk": index})
    found = published(store, state.key, model=MODEL, log=source.log, limits=source.agent.limits)
    assert found == []  # nothing published yet, and the junk is not read
    assert not [e for e in source.log.events if e["event"] == "manifest-refused"]


def test_a_loop_that_fails_every_round_stops_beating():
    liveness = Liveness(stall_seconds=0.2)
    stop = threading.Event()
    log = EventLog(time.time, stream=open("/dev/null", "w"))

    def tick():
        raise RuntimeError("every round")

    repeat(tick, 0.02, stop=stop, log=log, liveness=liveness)
    try:
        time.sleep(0.5)
        assert liveness.stuck() == ["tick"]
    finally:
        stop.set()


def test_a_download_held_back_for_a_streaming_pod_is_still_alive(hostile, monkeypatch):
    """Holding back for a pod that streams from S3 can last the startup bound: the loop beats meanwhile."""
    from node_agent.runtime.s3 import weights_download

    monkeypatch.setattr(weights_download, "PAUSE_POLL_SECONDS", 0.01)
    agent = hostile.node.agent
    held = iter(range(5))
    beats: list[int] = []
    source = agent.weights.source
    original = source.download_all

    def pauses() -> bool:  # five polls held back, then on
        return next(held, None) is not None

    def download_all(items, destination, prefix, on_bytes=None, pause=None):
        return original(items, destination, prefix, on_bytes=beats.append, pause=pauses)

    monkeypatch.setattr(source, "download_all", download_all)
    assert agent.weights_tick()[MODEL] == "downloaded"
    assert beats.count(0) >= 5


def test_a_team_pod_that_mounts_its_own_record_folder_holds_nothing(hostile):
    """Issue 45: a pod of another namespace, with no vLLM labels, mounted its own record folder (admission admitted
    it outside warmstart's namespaces). Its record held weights downloads back and kept every copy of the model
    from eviction, with no refusal logged. It is now looked up on the node, refused and counted."""
    agent = hostile.node.agent
    agent.weights_tick()  # the model's copy exists
    key = hostile.node.weights.layout.read_pointer(MODEL)["key"]
    uid = hostile.add_pod("team-job")
    team_pod = hostile.world.cluster.pods[-1]
    team_pod["metadata"].update(namespace="team-a", labels={"app": "batch"})
    hostile.record(uid, phase="started", weights={"source": "s3", "key": None, "reason": "streaming"})
    assert uid not in agent.streaming_from_s3()  # it cannot hold the node's downloads back
    hostile.record(uid, phase="choosing", weights=None)
    pods = agent._vllm_pods()
    assert not agent._weights_in_use(pods)(MODEL, key)  # nor keep the copy from eviction
    agent.tick()
    refusals = {(r["source"], r["item"]) for r in hostile.refusals()}
    assert ("pod", uid) in refusals and ("pod-record", uid) in refusals


def test_a_workload_that_started_after_the_pod_list_still_counts(hostile):
    """The benefit of the doubt stays for a vLLM pod the list has not caught up with: it is on the node when the
    agent looks it up, as a workload, so its record keeps its copy in use."""
    agent = hostile.node.agent
    agent.weights_tick()
    key = hostile.node.weights.layout.read_pointer(MODEL)["key"]
    pods = agent._vllm_pods()
    uid = hostile.add_pod("late")  # listed only after `pods` was read
    hostile.record(uid, phase="choosing", weights=None)
    assert agent._weights_in_use(pods)(MODEL, key)
    assert not any(r["item"] == uid for r in hostile.refusals())
