"""What a pod writes into its record folder, in every hostile shape found (issue 22), against the real agent loop:
no file outside the agent's own folders is touched, no loop stops, memory stays bounded, and a pod speaks only
for itself. Each refusal is logged once and counted (warmstart_untrusted_inputs_refused_total)."""

from __future__ import annotations

import json
import os
import time

from model_workload.runtime.vllm_entry import RECORD_FILE, choose_weights
from tests.agent.cluster_world import MODEL, write_model
from tests.hostile.hostile_world import peak_memory, tree_state

UID = "5c1e8a52-3f0d-4b7e-9a61-0d2c4e6f8a10"


def _all_loops(hostile) -> None:
    """Every loop of the agent once, as its threads run them; none may raise."""
    agent = hostile.node.agent
    agent.tick()
    agent.streaming_from_s3()
    agent.weights_tick()
    agent.weights_confirm_tick()
    agent.cleanup()


def _refused_count(hostile) -> float:
    return hostile.node.agent.metrics.refusals.labels("pod-record")._value.get()


def test_a_record_naming_another_uid_deletes_nothing_outside_the_records(hostile, sentinels):
    """The P0: the agent deleted <records>/<uid>.json with the uid from the record's content."""
    before = sentinels()
    hostile.record(UID, pod={"uid": "../../sentinels/outside/victim"})  # the old record's identity field
    hostile.pod_folder(UID)  # the pod is gone (not listed): its folder goes at cleanup, by its own name only
    _all_loops(hostile)
    assert sentinels() == before
    assert not (hostile.records_root / UID).exists()
    assert any(r["reason"].startswith("schema") for r in hostile.refusals())


def test_a_pod_folder_replaced_by_a_link_removes_only_the_link(hostile, sentinels, tmp_path):
    """Defense in depth: pods cannot write the records root (their mount is their own folder), but a link there
    would still not lead the cleanup elsewhere."""
    before = sentinels()
    (hostile.records_root).mkdir(parents=True, exist_ok=True)
    (hostile.records_root / UID).symlink_to(tmp_path / "sentinels" / "outside")
    _all_loops(hostile)
    assert sentinels() == before


def test_a_boot_id_with_dot_dots_plants_nothing(hostile, sentinels):
    """The P0 chain: `boot` went into observed/<uid>.<boot>, written with its parent folders created, so two
    records could plant a config.json and a completion marker for another model's weights key."""
    weights_root = hostile.node.weights.layout.root
    hostile.node.agent.weights_tick()  # a real copy exists, with its pointer
    weights_before, before = tree_state(weights_root), sentinels()
    key = hostile.node.weights.layout.read_pointer(MODEL)["key"]
    uid = hostile.add_pod("p1")
    target = f"../../../../weights/{MODEL}/{'f' * 16}"
    hostile.record(uid, boot=f"{target}/config.json", compile={"fingerprint": "0" * 16, "hash_dirs": []})
    second = hostile.add_pod("p2")
    hostile.record(second, boot=f"{target}.complete", compile={"fingerprint": "0" * 16, "hash_dirs": []})
    _all_loops(hostile)
    assert sentinels() == before
    after = tree_state(weights_root)
    assert {k: v for k, v in after.items() if not k.startswith(".warmstart")} == {
        k: v for k, v in weights_before.items() if not k.startswith(".warmstart")
    }
    observed = hostile.node.layout.observed_dir()
    assert not observed.exists() or not any(observed.iterdir())
    choice = choose_weights(MODEL, hostile.world.config.models[0].s3_uri, weights_root, 90, time.time())
    assert choice.key == key  # still the agent's own copy


def test_records_of_wrong_types_or_depth_are_refused_and_every_loop_goes_on(hostile):
    shapes = {
        "a string pod": {"pod": "x"},
        "a list uid": {"pod": {"uid": ["a"]}},
        "a list model": {"model": ["a"]},
        "a numeric phase": {"phase": 3},
        "a boolean time": {"started_at": True},
        "a weights key path": {"weights": {"source": "node", "key": "../../x", "reason": ""}},
        "too many hash folders": {"compile": {"fingerprint": None, "hash_dirs": ["torch_compile_cache/a"] * 300}},
        "a hash folder path": {"compile": {"fingerprint": None, "hash_dirs": ["torch_compile_cache/../../etc"]}},
    }
    uids = []
    for index, fields in enumerate(shapes.values()):
        uid = hostile.add_pod(f"p{index}")
        hostile.record(uid, **fields)
        uids.append(uid)
    deep = hostile.add_pod("deep")
    (hostile.pod_folder(deep) / RECORD_FILE).write_text("[" * 30_000 + "]" * 30_000)  # RecursionError in json
    started = time.monotonic()
    _all_loops(hostile)
    assert time.monotonic() - started < 30
    refused = {r["item"] for r in hostile.refusals()}
    assert set(uids) | {deep} <= refused
    assert hostile.node.agent.records.read() == {}
    assert _refused_count(hostile) >= len(uids) + 1
    # Logged once per folder and reason, however many rounds refuse it.
    count = len(hostile.refusals())
    _all_loops(hostile)
    assert len(hostile.refusals()) == count


def test_a_fifo_a_link_to_dev_zero_and_a_huge_record_cost_nothing(hostile):
    fifo, zero, huge = hostile.add_pod("fifo"), hostile.add_pod("zero"), hostile.add_pod("huge")
    os.mkfifo(hostile.pod_folder(fifo) / RECORD_FILE)  # blocked the loop: a restart loop
    (hostile.pod_folder(zero) / RECORD_FILE).symlink_to("/dev/zero")  # exhausted memory after every restart
    with open(hostile.pod_folder(huge) / RECORD_FILE, "wb") as handle:  # 200 MB: seconds at every read
        handle.truncate(200 * 2**20)
    started = time.monotonic()
    peak = peak_memory(lambda: _all_loops(hostile))
    assert time.monotonic() - started < 30
    assert peak < 32 * 2**20  # the agent's own working set for a round, not the hostile files
    reasons = {r["item"]: r["reason"] for r in hostile.refusals()}
    assert reasons[fifo] == "not a regular file"
    assert reasons[zero].startswith("cannot open")  # O_NOFOLLOW: the link is not followed
    assert "more than the" in reasons[huge]


def test_a_pod_cannot_speak_for_another_pod_or_another_model(hostile):
    """The P1: a record with another pod's uid replaced that pod's record, and the copy it read was evicted. Now
    the folder (kubelet's, by UID) says whose record it is, and a listed pod's record counts only for its model."""
    agent, weights = hostile.node.agent, hostile.node.weights
    assert agent.weights_tick()[MODEL] == "downloaded"
    key = weights.layout.read_pointer(MODEL)["key"]
    victim = hostile.add_pod("victim")
    hostile.record(victim, weights={"source": "node", "key": key, "reason": "serving"})
    attacker = hostile.add_pod("attacker")
    # The attacker writes into its own folder (the only one it can): it claims the victim's identity and says it
    # reads nothing; then it claims to be another model's pod.
    hostile.record(attacker, pod={"uid": victim}, weights={"source": "s3", "key": None, "reason": ""})
    write_model(hostile.world.client, hostile.world.config.buckets.models.name, seed=2)  # S3 moves on
    assert agent.weights_tick()[MODEL] == "downloaded"
    assert weights.layout.is_complete(MODEL, key)  # the victim still reads it: never evicted
    hostile.record(attacker, model="llama-3-3-70b")
    agent.tick()
    assert any(r["item"] == attacker and "another model" in r["reason"] for r in hostile.refusals())
    assert victim in agent.records.read()


def test_the_entry_step_writes_only_its_own_folder(tmp_path):
    """The pod side: WARMSTART_POD_RECORDS is the folder kubelet mounted for this pod; the record says nothing
    about who the pod is."""
    from model_workload.runtime.vllm_entry import prepare

    folder = tmp_path / "pods" / UID
    prepare(["python3", "--served-model-name=m", "--model=s3://b/m/"], {"WARMSTART_POD_RECORDS": str(folder)}, 1.0)
    assert sorted(p.name for p in (tmp_path / "pods").iterdir()) == [UID]
    assert [p.name for p in folder.iterdir()] == [RECORD_FILE]
    assert "pod" not in json.loads((folder / RECORD_FILE).read_text())


def test_a_compile_folder_with_links_and_fifos_publishes_only_its_own_files(hostile, tmp_path, sentinels):
    """vLLM's compile folder is the pod's: a link to a node file, a FIFO and a linked folder in it are neither
    followed nor packed (each file is opened without following links, relative to its own folder)."""
    from tests.agent.compile_world import fill_compile_cache, read_tree

    agent = hostile.node.agent
    agent.start()
    state = agent.models[MODEL]
    fingerprint = state.model.compile_cache.fingerprint
    folder = agent.layout.model_dir(MODEL, fingerprint)
    compiled = fill_compile_cache(folder)
    shadow = tmp_path / "sentinels" / "etc" / "shadow"
    (folder / "inductor" / "leak.py").symlink_to(shadow)
    (folder / "vllm" / "linked-folder").symlink_to(shadow.parent)
    os.mkfifo(folder / "triton" / "pipe")
    uid = hostile.add_pod("p1")
    pod = hostile.world.cluster.pods[-1]
    pod["spec"]["volumes"][0]["hostPath"]["path"] = f"/mnt/k8s-disks/0/compile-cache/{MODEL}/{fingerprint}"
    hostile.record(uid, compile={"fingerprint": fingerprint, "hash_dirs": []})
    before = sentinels()
    started = time.monotonic()
    assert agent.tick()[MODEL].status == "published"
    assert time.monotonic() - started < 30  # the FIFO was not opened for reading
    restored = hostile.world.node("node-b")
    assert restored.agent.start()[MODEL].status == "restored"
    assert read_tree(restored.layout.model_dir(MODEL, fingerprint)) == compiled  # no link, no pipe, no shadow
    assert sentinels() == before
