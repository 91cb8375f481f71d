"""The agent's cycle on a node: restore at start, done markers always, publish after a Ready pod."""

from __future__ import annotations

import json

from agent.kube import KubeApi
from agent.node_agent import NodeAgent
from agent.s3_store import CacheStore
from tests.agent.conftest import fill_compile_cache, node_layout, read_tree
from tests.agent.fake_kube import FakeCluster, vllm_pod
from tests.synth import ROOT
from warmstart.agent_settings import AgentSettings, agent_settings
from warmstart.catalog import default_catalog
from warmstart.loader import load_config


def _settings(bucket: str) -> AgentSettings:
    settings = agent_settings(load_config(ROOT / "config" / "prod.yaml"), default_catalog())
    return settings.model_copy(update={"bucket": bucket, "last_use_touch_seconds": 3600})


def _agent(settings, store, cluster, layout, node, clock, log) -> NodeAgent:
    return NodeAgent(settings=settings, node=node, store=store, kube=KubeApi(cluster), layout=layout, clock=clock, log=log)


def test_first_node_compiles_publishes_second_node_restores(tmp_path, s3_server, bucket, clock, log):
    settings = _settings(bucket)
    store = CacheStore(s3_server.client(), bucket)
    cluster = FakeCluster()
    cluster.add_node("node-a", "p5.48xlarge")
    cluster.add_node("node-b", "p5.48xlarge")
    model = settings.models[0]
    layout_a, layout_b = node_layout(tmp_path, "a"), node_layout(tmp_path, "b")

    agent_a = _agent(settings, store, cluster, layout_a, "node-a", clock, log)
    assert {name: o.status for name, o in agent_a.start().items()} == {m.name: "miss" for m in settings.models}
    for m in settings.models:  # pods waiting on node A may start now
        assert json.loads(layout_a.done_marker(m.name, m.fingerprint).read_text())["status"] == "miss"
    assert cluster.nodes["node-a"]["metadata"]["labels"][f"compile-cache.warmstart.io/{model.name}"] == "miss"

    # The first pod compiles into its configuration's folder and becomes Ready.
    folder = layout_a.model_dir(model.name, model.fingerprint)
    compiled = fill_compile_cache(folder)
    host_path = f"/mnt/k8s-disks/0/compile-cache/{model.name}/{model.fingerprint}"
    cluster.pods.append(vllm_pod(name="p1", node="node-a", model=model.name, host_path=host_path, ready=False))
    assert agent_a.tick() == {}  # not Ready: compile may still be running
    cluster.pods[0]["status"]["conditions"][0]["status"] = "True"
    assert agent_a.tick()[model.name].status == "published"
    assert cluster.nodes["node-a"]["metadata"]["labels"][f"compile-cache.warmstart.io/{model.name}"] == "published"
    assert agent_a.tick() == {}  # published once

    agent_b = _agent(settings, store, cluster, layout_b, "node-b", clock, log)
    assert agent_b.start()[model.name].status == "restored"
    assert read_tree(layout_b.model_dir(model.name, model.fingerprint)) == compiled


def test_pod_of_an_older_configuration_is_not_published(tmp_path, s3_server, bucket, clock, log):
    settings = _settings(bucket)
    store = CacheStore(s3_server.client(), bucket)
    cluster = FakeCluster()
    cluster.add_node("node-a", "p5.48xlarge")
    model = settings.models[0]
    layout = node_layout(tmp_path, "a")
    agent = _agent(settings, store, cluster, layout, "node-a", clock, log)
    agent.start()
    fill_compile_cache(layout.model_dir(model.name, model.fingerprint))
    cluster.pods.append(
        vllm_pod(name="old", node="node-a", model=model.name, host_path=f"/x/{model.name}/0123456789abcdef", ready=True)
    )
    assert agent.tick() == {}


def test_last_use_is_recorded_at_most_once_per_interval(tmp_path, s3_server, bucket, clock, log):
    settings = _settings(bucket)
    store = CacheStore(s3_server.client(), bucket)
    cluster = FakeCluster()
    cluster.add_node("node-a", "p5.48xlarge")
    model = settings.models[0]
    layout = node_layout(tmp_path, "a")
    agent = _agent(settings, store, cluster, layout, "node-a", clock, log)
    agent.start()
    fill_compile_cache(layout.model_dir(model.name, model.fingerprint))
    cluster.pods.append(vllm_pod(name="p", node="node-a", model=model.name,
                                 host_path=f"/c/{model.name}/{model.fingerprint}", ready=True))
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
    for m in settings.models:
        assert layout.done_marker(m.name, m.fingerprint).exists()


def test_api_outage_at_start_still_releases_waiting_pods(tmp_path, s3_server, bucket, clock, log):
    settings = _settings(bucket)
    cluster = FakeCluster(fail_with=503)
    layout = node_layout(tmp_path, "a")
    _agent(settings, CacheStore(s3_server.client(), bucket), cluster, layout, "node-a", clock, log).start()
    for m in settings.models:
        assert json.loads(layout.done_marker(m.name, m.fingerprint).read_text())["status"] == "failed"
    assert log.counters["start-failed"] == 1
