"""Cache hits as a real cluster would have them: pods run from the rendered manifests in kubelet's order
(tests/standins/kubelet.py), the real entry step and agent, the vLLM stand-in deriving its cache folder as the
release the shipped configs serve does (tests/standins/vllm.py, its recorded facts), SeaweedFS as S3. Every
outcome is a hit or a clean miss, never a wrong hit and never a partial folder."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

from model_workload.pod_spec import WEIGHTS_MOUNT
from node_agent.runtime.agent import FULLER_ARCHIVE_SECONDS
from node_agent.runtime.compile_manifest import local_hash_dirs
from node_agent.runtime.start_tracker import StartTracker
from node_agent.runtime.vllm_log import container_log_path
from tests.agent.cluster_world import MODEL, make_world, with_model, write_model
from tests.standins.kubelet import run_container


def _labels(world, node):
    return world.cluster.nodes[node.stand_in.name]["metadata"]["labels"]


def _events(node, name):
    return [e for e in node.log.events if e["event"] == name]


def _first_node_publishes(world):
    """Node A: nothing published yet, its pod streams from S3 and compiles, the agent publishes."""
    a = world.node("node-a")
    assert a.agent.start()[MODEL].status == "miss"
    report = world.serve(world.schedule(a))
    assert not report["hit"] and report["endpoint"] == world.server.endpoint  # streamed from S3
    assert a.agent.tick()[MODEL].status == "published"
    (observed,) = _events(a, "compile-miss")
    assert observed["expected_hit"] is False and "first pod of this configuration" in observed["reason"]
    return a, report


def test_a_pod_on_a_new_node_hits_the_cache_published_by_an_s3_streamed_pod_while_it_loads_the_node_copy(
    tmp_path, s3_server
):
    world = make_world(s3_server, tmp_path)
    _, first = _first_node_publishes(world)
    b = world.node("node-b")
    assert b.agent.weights_tick()[MODEL] == "downloaded"
    assert b.agent.start()[MODEL].status == "restored"
    pod = world.schedule(b)
    report = world.serve(pod)
    assert "from the node-local copy" in pod.outputs[-1].stdout
    assert report["endpoint"].startswith("http://127.0.0.1:") and report["endpoint"] != world.server.endpoint
    assert report["hit"]
    # The same model path, weights URI and folder as the pod that streamed from S3: vLLM cannot tell them apart.
    assert (report["model"], report["model_weights"], report["cache_dir"]) == (
        first["model"],
        first["model_weights"],
        first["cache_dir"],
    )
    assert report["weights_digest"] == first["weights_digest"]  # every tensor byte-equal
    # vLLM's plugin (found through the entry step's PYTHONPATH) had the streamer read the copy as local files.
    assert first["weights_files"] and all(f.startswith("s3://") for f in first["weights_files"])
    assert [Path(f).name for f in report["weights_files"]] == [f.rsplit("/", 1)[1] for f in first["weights_files"]]
    assert all(f.startswith(f"{WEIGHTS_MOUNT}/{MODEL}/") for f in report["weights_files"])
    b.agent.tick()
    (hit,) = _events(b, "compile-hit")
    assert hit["source"] == "restored" and hit["weights_source"] == "node"
    assert _labels(world, b)[f"compile-use.warmstart.io/{MODEL}"] == "hit"


def test_a_weights_update_at_the_same_path_with_unchanged_factors_still_hits(tmp_path, s3_server):
    world = make_world(s3_server, tmp_path)
    _, first = _first_node_publishes(world)
    b = world.node("node-b")
    b.agent.weights_tick()
    b.agent.start()
    old_key = b.weights.layout.read_pointer(MODEL)["key"]
    write_model(world.client, world.config.buckets.models.name, seed=2)  # new weights, same config.json
    assert b.agent.weights_tick()[MODEL] == "downloaded"
    assert b.weights.layout.read_pointer(MODEL)["key"] != old_key
    report = world.serve(world.schedule(b))
    assert report["hit"] and report["cache_dir"] == first["cache_dir"]
    assert report["weights_digest"] != first["weights_digest"]  # it serves the new weights


def test_a_tensor_parallel_size_change_misses_and_never_loads_the_other_cache(tmp_path, s3_server):
    world = make_world(s3_server, tmp_path)
    a, first = _first_node_publishes(world)
    tp4 = with_model(world.config, tensor_parallel_size=4)
    c = world.node("node-c", tp4)
    assert c.agent.start()[MODEL].status == "miss"  # another key: nothing published for it
    pod = world.schedule(c, tp4)
    # Worst case: the TP 2 cache ends up in the TP 4 folder anyway. vLLM's own hash still tells them apart.
    fingerprint_2 = world.config.models[0]
    from warmstart.catalog import default_catalog
    from warmstart.workload import plan_model

    fp2 = plan_model(world.config.models[0], world.config, default_catalog()).factors.fingerprint()
    fp4 = plan_model(tp4.models[0], tp4, default_catalog()).factors.fingerprint()
    assert fp2 != fp4 and fingerprint_2.tensor_parallel_size != 4
    shutil.copytree(a.layout.model_dir(MODEL, fp2), c.layout.model_dir(MODEL, fp4))
    report = world.serve(pod)
    assert not report["hit"] and report["cache_dir"] != first["cache_dir"]
    assert set(local_hash_dirs(c.layout, MODEL, fp4)) > set(local_hash_dirs(a.layout, MODEL, fp2))


def test_a_torch_change_inside_the_image_misses_then_the_published_cache_is_extended(tmp_path, s3_server):
    world = make_world(s3_server, tmp_path)
    a, first = _first_node_publishes(world)
    world.image_env["STANDIN_TORCH_VERSION"] = "2.12.0"  # a new image, torch_version in the config not updated
    b = world.node("node-b")
    assert b.agent.start()[MODEL].status == "restored"  # our key did not change...
    report = world.serve(world.schedule(b))
    assert not report["hit"]  # ...vLLM's hash did: a miss, never the old kernels
    assert b.agent.tick()[MODEL].status == "republished"
    (miss,) = _events(b, "compile-miss")
    assert miss["expected_hit"] is True and "compiler" in miss["reason"]
    key = b.agent.models[MODEL].key
    store = b.agent.store
    manifests = [store.get_json(name) for name in store.list_keys(key.manifest_prefix)]
    # A second manifest beside the first (never a replacement) with both backend folders (and, where the AOT
    # folder's hash holds the compiler's factors, as 0.34.0's self-contained artifact's does, both AOT folders).
    largest = max(manifests, key=lambda m: len(m["hash_dirs"]))
    backend = [d for d in largest["hash_dirs"] if "torch_aot_compile" not in d]
    fingerprint = a.agent.settings.compile_models[0].compile.fingerprint
    assert len(manifests) == 2 and len(backend) == 2
    assert set(largest["hash_dirs"]) >= set(local_hash_dirs(a.layout, MODEL, fingerprint))
    c = world.node("node-c")
    assert c.agent.start()[MODEL].status == "restored"
    assert world.serve(world.schedule(c))["hit"]


# ---- kubelet-first ordering ----


def test_the_empty_folder_kubelet_made_does_not_block_the_restore(tmp_path, s3_server):
    world = make_world(s3_server, tmp_path)
    _first_node_publishes(world)
    b = world.node("node-b")
    pod = world.schedule(b)  # bound at once on a scale-up: kubelet creates the hostPath before the agent runs
    (mounted,) = [v for v in pod.spec["volumes"] if v["name"] == "compile-cache"]
    folder = b.stand_in.host(mounted["hostPath"]["path"])
    assert folder.is_dir() and list(folder.iterdir()) == []
    assert b.agent.start()[MODEL].status == "restored"
    assert world.serve(pod)["hit"]


def _pod_held_after_config(world, node, pause_file):
    """The pod's main container started (the wait bound passed), vLLM past its config step, not compiled."""
    pod = world.schedule(node)
    pause_file.write_text("hold")
    (main,) = pod.spec["containers"]
    env = {**world.cluster_env, "STANDIN_PAUSE_FILE": str(pause_file)}
    process = run_container(pod, main, env, background=True)
    return pod, process


def _wait_for(predicate, seconds=60):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_pod_that_started_after_the_bound_keeps_its_folder_untouched(tmp_path, s3_server):
    world = make_world(s3_server, tmp_path)
    _first_node_publishes(world)
    b = world.node("node-b")
    pod, process = _pod_held_after_config(world, b, tmp_path / "hold")
    fingerprint = b.agent.settings.compile_models[0].compile.fingerprint
    content = b.layout.model_dir(MODEL, fingerprint)
    _wait_for(lambda: (content / "vllm" / "modelinfos").is_dir())  # vLLM already writes into it
    outcome = b.agent.start()[MODEL]
    assert outcome.status == "present" and b.layout.origin(MODEL, fingerprint) is None
    assert sorted(p.name for p in (content / "vllm").iterdir()) == ["modelinfos"]  # nothing of ours added
    (tmp_path / "hold").unlink()
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stdout
    world.cluster.pods.append(pod.as_api_object(ready=True))
    b.agent.tick()
    (miss,) = _events(b, "compile-miss")
    assert miss["expected_hit"] is True and "folder busy" in miss["reason"]


def _race(world, tmp_path, name, *, vllm_first_during_download: bool):
    """The agent restores while the pod's vLLM starts. With `vllm_first_during_download` vLLM creates its
    cache folder while the archive is downloading (the rename then finds it); otherwise no coordination."""
    node = world.node(name)
    fingerprint = node.agent.settings.compile_models[0].compile.fingerprint
    content = node.layout.model_dir(MODEL, fingerprint)
    if vllm_first_during_download:
        store = node.agent.store
        download, open_object = store.download, store.open_object

        def slow(fetch):
            def fetched(*args, **kwargs):
                _wait_for(content.exists)  # vLLM's config step made the folder meanwhile
                return fetch(*args, **kwargs)

            return fetched

        # A small archive streams (open_object), a large one is fetched in ranges (download).
        store.download, store.open_object = slow(download), slow(open_object)
    pod, process = _pod_held_after_config(world, node, tmp_path / f"hold-{name}")
    outcome = {}
    restorer = threading.Thread(target=lambda: outcome.update(node.agent.start()))
    restorer.start()
    restorer.join(timeout=120)
    (tmp_path / f"hold-{name}").unlink()
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stdout
    assert list((node.layout.state / "tmp").iterdir()) == []  # no partial restore left anywhere
    assert local_hash_dirs(node.layout, MODEL, fingerprint)  # a complete cache either way
    return outcome[MODEL].status, '"hit": true' in stdout


def test_vllm_creating_its_folder_during_the_download_wins_and_the_restore_backs_off(tmp_path, s3_server):
    world = make_world(s3_server, tmp_path)
    _first_node_publishes(world)
    assert _race(world, tmp_path, "racing", vllm_first_during_download=True) == ("busy", False)


def test_restore_racing_a_pod_start_ends_in_a_hit_or_a_clean_miss(tmp_path, s3_server):
    world = make_world(s3_server, tmp_path)
    _first_node_publishes(world)
    for attempt in range(3):
        outcome = _race(world, tmp_path, f"race-{attempt}", vllm_first_during_download=False)
        assert outcome in {("restored", True), ("busy", False), ("present", False)}, outcome


def test_a_burst_of_pods_on_new_nodes_gets_the_restore_before_its_bound(tmp_path, s3_server):
    """An autoscaler adds 4 pods at once and the pool 2 nodes for them: kubelet binds each pod at once (its
    hostPath made, its wait step polling for the done marker) while each node's agent restores the published
    cache. Every pod finds the restore done well within its bound (restore_wait_seconds) and hits the cache."""
    world = make_world(s3_server, tmp_path)
    _first_node_publishes(world)
    nodes = [world.node("node-b"), world.node("node-c")]
    pods = [world.schedule(node) for node in nodes for _ in range(2)]
    (wait_step,) = pods[0].spec["initContainers"]
    bound = int(next(e["value"] for e in wait_step["env"] if e["name"] == "WAIT_SECONDS"))
    reports: dict[int, dict] = {}
    errors: list[BaseException] = []

    def serve(index: int) -> None:
        try:
            reports[index] = world.serve(pods[index])
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    starting = [threading.Thread(target=serve, args=(i,)) for i in range(len(pods))]
    for thread in starting:
        thread.start()  # the wait steps poll first: the agents start after the pods are bound
    outcomes = {}
    restores = [threading.Thread(target=lambda n=n: outcomes.update({n.stand_in.name: n.agent.start()})) for n in nodes]
    for thread in restores:
        thread.start()
    for thread in [*restores, *starting]:
        thread.join(timeout=300)
    assert not errors, errors
    assert {name: outcome[MODEL].status for name, outcome in outcomes.items()} == {
        "node-b": "restored",
        "node-c": "restored",
    }
    assert all(outcome[MODEL].seconds < bound for outcome in outcomes.values())  # done within every pod's wait
    for index, pod in enumerate(pods):
        wait_output = pod.outputs[0].stdout
        assert "warmstart: compile-cache restore finished" in wait_output, wait_output
        assert "no compile-cache restore after" not in wait_output
        assert reports[index]["hit"], index


def test_a_restored_artifact_vllm_cannot_load_is_a_miss_with_vllms_reason(tmp_path, s3_server):
    """The restored folder is there and stays (vLLM compiles again into it), so the folders alone say hit; vLLM's
    own line says it could not load the artifact: the agent reports a miss, with vLLM's reason."""
    world = make_world(s3_server, tmp_path)
    _first_node_publishes(world)
    b = world.node("node-b")
    b.agent.starts = StartTracker(
        kube=b.agent.kube,
        node="node-b",
        pod_logs=tmp_path / "node-b-pod-logs",
        layout=b.agent.layout,
        metrics=b.agent.metrics,
        log=b.log,
    )
    assert b.agent.start()[MODEL].status == "restored"
    for artifact in b.layout.root.rglob("torch_aot_compile/*/rank_0_0/model"):
        artifact.write_bytes(b"x" + artifact.read_bytes())  # a file the disk or a partial write corrupted
    pod = world.schedule(b)
    report = world.serve(pod)
    assert not report["hit"]
    lines = [line for line in pod.outputs[-1].stdout.splitlines() if line]
    log_file = container_log_path(tmp_path / "node-b-pod-logs", pod.namespace, pod.name, pod.uid, "vllm", 0)
    log_file.parent.mkdir(parents=True)
    log_file.write_text("".join(f"2026-12-06T09:00:00.{i:06d}Z stdout F {line}\n" for i, line in enumerate(lines)))
    b.agent.tick()
    assert _events(b, "compile-hit") == []
    (miss,) = _events(b, "compile-miss")
    assert (miss["cause"], miss["evidence"], miss["source"]) == ("load-failure", "vllm-log", "restored")
    assert "invalid load key" in miss["reason"]
    assert _labels(world, b)[f"compile-use.warmstart.io/{MODEL}"] == "miss"
    assert _labels(world, b)[f"compile-miss.warmstart.io/{MODEL}"] == "load-failure"
    assert b.agent.metrics.compile_use.labels(MODEL, "miss", "load-failure")._value.get() == 1


def test_without_vllms_log_the_folders_judge_as_before(tmp_path, s3_server):
    """An agent that reads no pod logs (or a start whose log is gone) keeps the folder judgement, and says so."""
    world = make_world(s3_server, tmp_path)
    _first_node_publishes(world)
    b = world.node("node-b")
    b.agent.start()
    world.serve(world.schedule(b))
    b.agent.tick()
    (hit,) = _events(b, "compile-hit")
    assert hit["evidence"] == "folders" and hit["cause"] == "loaded"
    assert f"compile-miss.warmstart.io/{MODEL}" not in _labels(world, b)


def test_a_folder_that_keeps_growing_is_archived_again_at_most_every_ten_minutes(tmp_path, s3_server):
    """vLLM may write into its folder after start-up: a fuller archive is published, but a folder growing file by
    file does not upload a new archive at every tick."""
    world = make_world(s3_server, tmp_path)
    a, _ = _first_node_publishes(world)
    folder = a.layout.model_dir(MODEL, a.agent.models[MODEL].model.compile_cache.fingerprint)
    hash_dir = local_hash_dirs(a.layout, MODEL, a.agent.models[MODEL].model.compile_cache.fingerprint)[0]
    late = folder / "vllm" / hash_dir / "inductor_cache" / "late.py"
    late.parent.mkdir(parents=True, exist_ok=True)
    late.write_text("# written after the pod was Ready\n")
    assert MODEL not in a.agent.tick()  # too soon after the last upload
    counted_at = a.agent.models[MODEL].last_count
    assert counted_at is not None
    a.agent.clock = lambda: counted_at + FULLER_ARCHIVE_SECONDS
    assert a.agent.tick()[MODEL].status == "republished"
    assert MODEL not in a.agent.tick()  # nothing more to add
