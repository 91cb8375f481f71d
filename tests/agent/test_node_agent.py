"""The agent's cycle on a node: restore at start, done markers always, publish after a Ready pod."""

from __future__ import annotations

import json
from datetime import UTC

from contracts.agent_settings import AgentSettings
from node_agent.runtime.agent import NodeAgent
from node_agent.runtime.kube import KubeApi
from node_agent.runtime.pod_records import PodRecords
from node_agent.runtime.s3.compile_store import CacheStore
from tests.agent.compile_world import Clock, fill_compile_cache, node_layout, read_tree
from tests.agent.fake_kube import FakeCluster, pod_uid, vllm_pod
from tests.synth import ROOT
from warmstart.agent_config import agent_settings
from warmstart.catalog import default_catalog
from warmstart.loader import load_config


def _settings(bucket: str) -> AgentSettings:
    settings = agent_settings(load_config(ROOT / "config" / "prod.yaml"), default_catalog())
    return settings.model_copy(update={"bucket": bucket, "last_use_touch_seconds": 3600})


def _agent(settings, store, cluster, layout, node, clock, log) -> NodeAgent:
    return NodeAgent(
        settings=settings, node=node, store=store, kube=KubeApi(cluster), layout=layout, clock=clock, log=log
    )


def test_first_node_compiles_publishes_second_node_restores(tmp_path, s3_server, bucket, clock, log):
    settings = _settings(bucket)
    store = CacheStore(s3_server.client(), bucket)
    cluster = FakeCluster()
    cluster.add_node("node-a", "p5.48xlarge")
    cluster.add_node("node-b", "p5.48xlarge")
    model = settings.compile_models[0]
    layout_a, layout_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")

    agent_a = _agent(settings, store, cluster, layout_a, "node-a", clock, log)
    assert {name: o.status for name, o in agent_a.start().items()} == {m.name: "miss" for m in settings.compile_models}
    for m in settings.compile_models:  # pods waiting on node A may start now
        assert json.loads(layout_a.done_marker(m.name, m.compile.fingerprint).read_text())["status"] == "miss"
    assert cluster.nodes["node-a"]["metadata"]["labels"][f"compile-cache.warmstart.io/{model.name}"] == "miss"

    # The first pod compiles into its configuration's folder and becomes Ready.
    folder = layout_a.model_dir(model.name, model.compile.fingerprint)
    compiled = fill_compile_cache(folder)
    host_path = f"/mnt/k8s-disks/0/compile-cache/{model.name}/{model.compile.fingerprint}"
    cluster.pods.append(vllm_pod(name="p1", node="node-a", model=model.name, host_path=host_path, ready=False))
    assert agent_a.tick() == {}  # not Ready: compile may still be running
    cluster.pods[0]["status"]["conditions"][0]["status"] = "True"
    assert agent_a.tick()[model.name].status == "published"
    assert cluster.nodes["node-a"]["metadata"]["labels"][f"compile-cache.warmstart.io/{model.name}"] == "published"
    assert agent_a.tick() == {}  # published once

    agent_b = _agent(settings, store, cluster, layout_b, "node-b", clock, log)
    assert agent_b.start()[model.name].status == "restored"
    assert read_tree(layout_b.model_dir(model.name, model.compile.fingerprint)) == compiled


def _agent_with_compiled_cache(tmp_path, s3_server, bucket, clock, log):
    """A started agent on node-a whose first model has compiled into its configuration's folder."""
    settings = _settings(bucket)
    store = CacheStore(s3_server.client(), bucket)
    cluster = FakeCluster()
    cluster.add_node("node-a", "p5.48xlarge")
    model = settings.compile_models[0]
    layout = node_layout(tmp_path, "a")
    agent = _agent(settings, store, cluster, layout, "node-a", clock, log)
    agent.start()
    fill_compile_cache(layout.model_dir(model.name, model.compile.fingerprint))
    return agent, store, cluster, model


def test_pod_of_an_older_configuration_is_not_published(tmp_path, s3_server, bucket, clock, log):
    agent, _, cluster, model = _agent_with_compiled_cache(tmp_path, s3_server, bucket, clock, log)
    cluster.pods.append(
        vllm_pod(name="old", node="node-a", model=model.name, host_path=f"/x/{model.name}/0123456789abcdef", ready=True)
    )
    assert agent.tick() == {}


def test_last_use_is_recorded_at_most_once_per_interval(tmp_path, s3_server, bucket, clock, log):
    agent, store, cluster, model = _agent_with_compiled_cache(tmp_path, s3_server, bucket, clock, log)
    cluster.pods.append(
        vllm_pod(
            name="p",
            node="node-a",
            model=model.name,
            host_path=f"/c/{model.name}/{model.compile.fingerprint}",
            ready=True,
        )
    )
    agent.tick()  # publishes, records use
    key = agent.models[model.name].key
    first = store.get_json(key.last_use_key)["time"]
    clock.advance(60)
    agent.tick()
    assert store.get_json(key.last_use_key)["time"] == first
    clock.advance(3600)
    agent.tick()
    assert store.get_json(key.last_use_key)["time"] == first + 3660


def test_unknown_instance_type_still_releases_waiting_pods(tmp_path, s3_server, bucket, clock, log):
    settings = _settings(bucket)
    cluster = FakeCluster()
    cluster.add_node("node-x", "m7i.xlarge")
    layout = node_layout(tmp_path, "x")
    outcomes = _agent(settings, CacheStore(s3_server.client(), bucket), cluster, layout, "node-x", clock, log).start()
    assert {o.status for o in outcomes.values()} == {"failed"}
    for m in settings.compile_models:
        assert layout.done_marker(m.name, m.compile.fingerprint).exists()


def test_api_outage_at_start_still_releases_waiting_pods(tmp_path, s3_server, bucket, clock, log):
    settings = _settings(bucket)
    cluster = FakeCluster(fail_with=503)
    layout = node_layout(tmp_path, "a")
    _agent(settings, CacheStore(s3_server.client(), bucket), cluster, layout, "node-a", clock, log).start()
    for m in settings.compile_models:
        assert json.loads(layout.done_marker(m.name, m.compile.fingerprint).read_text())["status"] == "failed"
    assert log.counters["start-failed"] == 1


def _weights_agent(tmp_path, s3_server, clock, log, settings, cluster, node="node-a"):
    from node_agent.runtime.s3.weights_download import WeightsSource
    from node_agent.runtime.weights import NodeCopies, WeightsLayout

    client = s3_server.client()
    weights = NodeCopies(
        source=WeightsSource(client, settings.model_bucket, part_bytes=5 * 2**20, threads=4),
        layout=WeightsLayout(tmp_path / node / "weights"),
        clock=clock,
        log=log,
        reserve_bytes=0,
    )
    agent = NodeAgent(
        settings=settings,
        node=node,
        store=CacheStore(client, settings.bucket),
        kube=KubeApi(cluster),
        layout=node_layout(tmp_path, node),
        clock=clock,
        log=log,
        weights=weights,
        records=PodRecords(tmp_path / node / "pods"),
    )
    return agent, weights


def _weights_world(tmp_path, s3_server, clock, log, body: bytes):
    """A node whose agent caches prod's models, each uploaded once with `body` as its config."""
    bucket = s3_server.new_bucket()
    settings = _settings(bucket).model_copy(update={"model_bucket": bucket})
    client = s3_server.client()
    for model in settings.weights_models:
        assert model.weights is not None
        _upload(client, bucket, model.weights.prefix, body)
    cluster = FakeCluster()
    cluster.add_node("node-a", "p5.48xlarge")
    agent, weights = _weights_agent(tmp_path, s3_server, clock, log, settings, cluster)
    return agent, weights, cluster, settings, client, bucket


def _upload(client, bucket, prefix, body: bytes):
    client.put_object(Bucket=bucket, Key=f"{prefix}config.json", Body=body)
    client.put_object(Bucket=bucket, Key=f"{prefix}model.safetensors", Body=bytes(range(256)) * 4000)


def _iso(epoch: float) -> str:
    from datetime import datetime

    return datetime.fromtimestamp(epoch, tz=UTC).isoformat().replace("+00:00", "Z")


def _record(tmp_path, node, uid, model, **fields):
    """What the pod's entry step writes (model_workload/runtime/vllm_entry.py) into its own folder of the node's
    records root (kubelet names the folder after the pod's UID)."""
    from model_workload.runtime.vllm_entry import RECORD_VERSION, write_record

    record = {
        "version": RECORD_VERSION,
        "model": model,
        "phase": "started",
        "started_at": 0.0,
        "boot": "b1".ljust(32, "0"),
        **fields,
    }
    write_record(tmp_path / node / "pods" / uid, record)


def test_weights_follow_s3_and_old_copies_go_once_no_pod_reads_them(tmp_path, s3_server, clock, log):
    agent, weights, cluster, settings, client, bucket = _weights_world(tmp_path, s3_server, clock, log, b'{"v": 1}')
    assert set(agent.weights_tick().values()) == {"downloaded"}
    labels = cluster.nodes["node-a"]["metadata"]["labels"]
    assert all(labels[f"weights.warmstart.io/{m.name}"] == "ready" for m in settings.weights_models)
    model = settings.weights_models[0]
    old_key = weights.layout.read_pointer(model.name)["key"]
    # A pod starts on the current copy (its entry step records the key it serves), then S3 is updated in place.
    cluster.pods.append(vllm_pod(name="p1", node="node-a", model=model.name, host_path="/x", ready=True))
    _record(tmp_path, "node-a", pod_uid("p1"), model.name, weights={"source": "node", "key": old_key, "reason": ""})
    _upload(client, bucket, model.weights.prefix, b'{"v": 2}')
    clock.advance(-3600)  # and the node clock steps back an hour: nothing here compares clocks
    assert agent.weights_tick()[model.name] == "downloaded"
    new_key = weights.layout.read_pointer(model.name)["key"]
    assert new_key != old_key and weights.layout.is_complete(model.name, old_key)  # p1 may still read it
    cluster.pods.clear()  # the Deployment rolled onto the new copy
    agent.cleanup()  # the record of the gone pod goes
    assert agent.weights_tick()[model.name] == "ready"
    assert not weights.layout.key_dir(model.name, old_key).exists()
    assert weights.layout.is_complete(model.name, new_key)


def test_a_pod_still_choosing_keeps_every_copy_of_its_model(tmp_path, s3_server, clock, log):
    agent, weights, cluster, settings, client, bucket = _weights_world(tmp_path, s3_server, clock, log, b'{"v": 1}')
    agent.weights_tick()
    model = settings.weights_models[0]
    old_key = weights.layout.read_pointer(model.name)["key"]
    # The entry step wrote "choosing" and may have read the pointer an instant before it moved.
    _record(tmp_path, "node-a", pod_uid("p2"), model.name, phase="choosing")
    _upload(client, bucket, model.weights.prefix, b'{"v": 2}')
    agent.weights_tick()
    assert weights.layout.is_complete(model.name, old_key)


def test_weights_downloads_hold_back_while_a_pod_of_the_node_streams_from_s3(tmp_path, s3_server, clock, log):
    settings = _settings(s3_server.new_bucket()).model_copy(update={"max_weights_defer_seconds": 600})
    cluster = FakeCluster()
    cluster.add_node("node-a", "p5.48xlarge")
    monotonic = Clock(0.0)
    agent, _ = _weights_agent(tmp_path, s3_server, clock, log, settings, cluster)
    agent.monotonic = monotonic
    model = settings.models[0]
    # The pod's entry step chose S3: downloads hold back at once, before any pod list shows the pod.
    _record(tmp_path, "node-a", pod_uid("p1"), model.name, weights={"source": "s3", "key": None, "reason": ""})
    assert agent.streaming_from_s3() == {pod_uid("p1")}
    pod = vllm_pod(name="p1", node="node-a", model=model.name, host_path="/x", ready=False)
    cluster.pods.append(pod)
    agent.tick()
    assert agent.streaming_from_s3() == {pod_uid("p1")}
    monotonic.advance(601)  # a pod stuck past the startup bound holds nothing back any more
    assert agent.streaming_from_s3() == set()
    monotonic.advance(-601)
    pod["status"]["conditions"][0]["status"] = "True"
    agent.tick()
    assert agent.streaming_from_s3() == set()  # Ready: done loading
    _record(tmp_path, "node-a", pod_uid("p2"), model.name, weights={"source": "node", "key": "0" * 16, "reason": ""})
    assert agent.streaming_from_s3() == set()  # a pod reading the node copy competes with nobody


def test_a_crash_looping_pod_holds_downloads_back_once_not_forever(tmp_path, s3_server, clock, log):
    settings = _settings(s3_server.new_bucket()).model_copy(update={"max_weights_defer_seconds": 600})
    cluster = FakeCluster()
    cluster.add_node("node-a", "p5.48xlarge")
    agent, _ = _weights_agent(tmp_path, s3_server, clock, log, settings, cluster)
    agent.monotonic = monotonic = Clock(0.0)
    model = settings.models[0]
    cluster.pods.append(vllm_pod(name="p1", node="node-a", model=model.name, host_path="/x", ready=False))
    for restart in range(5):  # each container start writes a new record (another boot id)
        _record(
            tmp_path,
            "node-a",
            pod_uid("p1"),
            model.name,
            boot=f"{restart:032x}",
            weights={"source": "s3", "key": None, "reason": ""},
        )
        agent.tick()
        monotonic.advance(150)
    assert agent.streaming_from_s3() == set()  # 750 s after it first streamed, restarts or not


def test_listing_failure_keeps_pods_on_s3_until_it_recovers(tmp_path, s3_server, clock, log):
    bucket = s3_server.new_bucket()
    settings = _settings(bucket).model_copy(update={"model_bucket": "no-such-bucket"})
    cluster = FakeCluster()
    cluster.add_node("node-a", "p5.48xlarge")
    agent, weights = _weights_agent(tmp_path, s3_server, clock, log, settings, cluster)
    assert set(agent.weights_tick().values()) == {"failed"}
    assert all(weights.layout.read_pointer(m.name) is None for m in settings.weights_models)
    assert not any(k.startswith("weights.warmstart.io/") for k in cluster.nodes["node-a"]["metadata"]["labels"])


def test_a_removed_model_loses_its_labels_pointer_and_node_data(tmp_path, s3_server, clock, log):
    agent, weights, cluster, settings, client, bucket = _weights_world(tmp_path, s3_server, clock, log, b"{}")
    agent.start()
    agent.weights_tick()
    removed = settings.models[1]
    fill_compile_cache(agent.layout.model_dir(removed.name, removed.compile.fingerprint))
    # The next deploy drops the model: the agent restarts with new settings.
    reduced = settings.model_copy(update={"models": settings.models[:1]})
    cluster.pods.append(vllm_pod(name="old", node="node-a", model=removed.name, host_path="/x", ready=True))
    agent, weights = _weights_agent(tmp_path, s3_server, clock, log, reduced, cluster)
    assert agent.cleanup() == []  # a pod of the removed model still runs: its data stays
    labels = cluster.nodes["node-a"]["metadata"]["labels"]
    assert not any(k.endswith(f"/{removed.name}") for k in labels)
    assert weights.layout.read_pointer(removed.name) is None
    agent.weights_tick()
    assert any(m == removed.name for m, _ in weights.layout.cached_keys())
    cluster.pods.clear()
    assert agent.cleanup() == [removed.name]
    agent.weights_tick()
    assert not any(m == removed.name for m, _ in weights.layout.cached_keys())
    kept = settings.models[0].name
    assert any(m == kept for m, _ in weights.layout.cached_keys())
    assert labels[f"weights.warmstart.io/{kept}"] == "ready"


def test_an_agent_started_on_a_full_disk_writes_every_marker_it_can_and_keeps_going(
    tmp_path, s3_server, bucket, clock, log, small_disk
):
    from node_agent.runtime.layout import NodeCacheLayout

    settings = _settings(bucket)
    cluster = FakeCluster()
    cluster.add_node("node-a", "p5.48xlarge")
    layout = NodeCacheLayout(small_disk / "compile-cache")
    (layout.state / "done").mkdir(parents=True)
    filler = small_disk / "filler"
    with open(filler, "wb") as handle:  # the node's NVMe is full
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError:
            pass
    agent = _agent(settings, CacheStore(s3_server.client(), bucket), cluster, layout, "node-a", clock, log)
    outcomes = agent.start()  # must not raise
    assert set(outcomes) == {m.name for m in settings.compile_models}
    assert log.counters["marker-failed"] == len(settings.compile_models)
    filler.unlink()  # space comes back (eviction, a pod's data removed)
    agent.tick()
    for m in settings.compile_models:
        assert layout.done_marker(m.name, m.compile.fingerprint).exists()


def test_folders_of_older_configurations_go_once_no_pod_mounts_them(tmp_path, s3_server, bucket, clock, log):
    agent, _, cluster, model = _agent_with_compiled_cache(tmp_path, s3_server, bucket, clock, log)
    old = agent.layout.config_dir(model.name, "0123456789abcdef")
    fill_compile_cache(old / "cache")
    agent.layout.mark_done(model.name, "0123456789abcdef", {"status": "restored"})
    cluster.pods.append(
        vllm_pod(
            name="old",
            node="node-a",
            model=model.name,
            ready=True,
            host_path=f"/mnt/k8s-disks/0/compile-cache/{model.name}/0123456789abcdef",
        )
    )
    assert agent.cleanup() == []  # a pod of the older configuration still runs on it
    cluster.pods.clear()
    assert agent.cleanup() == [f"{model.name}/0123456789abcdef"]
    assert not old.exists() and not agent.layout.done_marker(model.name, "0123456789abcdef").exists()
    assert agent.layout.model_dir(model.name, model.compile.fingerprint).exists()  # the current one stays


def test_the_event_log_keeps_bounded_memory():
    import io

    from node_agent.runtime.log import EventLog

    stream = io.StringIO()
    log = EventLog(lambda: 0.0, stream=stream, keep=10)
    for index in range(1000):
        log.event("tick", index=index)
    assert len(log.events) == 10 and log.events[-1]["index"] == 999
    assert log.counters["tick"] == 1000 and stream.getvalue().count("\n") == 1000
