"""The agent times each vLLM pod start once, publishes its node's recent starts, and exposes metrics in the
Prometheus format (parsed back with prometheus_client's own parser)."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contracts.start_record import STARTS_KEY, STARTS_LABEL, starts_config_map_name
from node_agent.runtime.kube import KubeApi
from node_agent.runtime.log import EventLog
from node_agent.runtime.metrics import AgentMetrics
from node_agent.runtime.pod_records import PodRecord
from node_agent.runtime.start_tracker import StartTracker
from node_agent.runtime.vllm_log import container_log_path
from tests.agent.fake_kube import FakeCluster

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "starts"
NODE = "ip-10-30-64-11.ec2.internal"


def recorded(case: str) -> tuple[dict, dict, list[dict]]:
    folder = RECORDED / case
    return (
        json.loads((folder / "pod.json").read_text()),
        json.loads((folder / "node.json").read_text()),
        json.loads((folder / "events.json").read_text())["items"],
    )


def tracker_for(cluster: FakeCluster, metrics: AgentMetrics, *, pod_logs: Path, started: float = 0.0) -> StartTracker:
    """`started`: when the agent started (0: before every recorded pod)."""
    return StartTracker(
        kube=KubeApi(cluster),
        node=NODE,
        pod_logs=pod_logs,
        layout=None,
        metrics=metrics,
        log=EventLog(lambda: 0.0),
        clock=lambda: started,
    )


@pytest.fixture
def world(tmp_path):
    pod, node, events = recorded("cold")
    cluster = FakeCluster(nodes={NODE: node}, events=events)
    logs = tmp_path / "pod-logs"
    meta = pod["metadata"]
    log_file = container_log_path(logs, meta["namespace"], meta["name"], meta["uid"], "vllm", 0)
    log_file.parent.mkdir(parents=True)
    shutil.copy(RECORDED / "cold" / "vllm.log", log_file)
    metrics = AgentMetrics()
    tracker = tracker_for(cluster, metrics, pod_logs=logs)
    return cluster, tracker, metrics, pod


def starting(pod: dict) -> dict:
    pod = copy.deepcopy(pod)
    for condition in pod["status"]["conditions"]:
        if condition["type"] in ("Ready", "ContainersReady"):
            condition["status"] = "False"
    return pod


def record(pod: dict, source: str) -> dict[str, PodRecord]:
    uid = pod["metadata"]["uid"]
    return {uid: PodRecord(uid, "qwen3-6-35b-a3b", "started", "b1", source, None, None, [])}


def published(cluster: FakeCluster) -> list[dict]:
    body = cluster.config_maps[("warmstart-system", starts_config_map_name(NODE))]
    return json.loads(body["data"][STARTS_KEY])


def test_a_start_is_timed_once_when_ready_and_published_for_its_node(world):
    cluster, tracker, metrics, pod = world
    assert tracker.observe([starting(pod)], {}) == []  # not Ready yet: nothing timed, nothing written
    assert not cluster.config_maps
    (timeline,) = tracker.observe([pod], record(pod, "s3"))
    assert timeline.total == 900.0 and timeline.weights_source == "s3" and timeline.compile_cache == "miss"
    assert tracker.observe([pod], record(pod, "s3")) == []  # timed once
    body = cluster.config_maps[("warmstart-system", starts_config_map_name(NODE))]
    assert body["metadata"]["labels"][STARTS_LABEL[0]] == STARTS_LABEL[1]
    # Deleted with its node by the garbage collector.
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "9a0b7c1d-aaaa-4bbb-8ccc-00000000000a"}
    ]
    assert [s["pod"] for s in published(cluster)] == ["vllm-7d9f-cold"]
    events_asked = [r for r in cluster.requests if r.path.endswith("/events")]
    assert events_asked[0].query == {"fieldSelector": f"involvedObject.uid={pod['metadata']['uid']}"}


def test_a_start_that_ends_without_ready_is_timed_as_not_ready(world):
    cluster, tracker, _, pod = world
    tracker.observe([starting(pod)], {})
    restarted = starting(pod)
    restarted["status"]["containerStatuses"][0]["restartCount"] = 1
    (failed,) = tracker.observe([restarted], {})  # start 0 ended: its container restarted
    assert (failed.outcome, failed.start, failed.total) == ("not-ready", 0, None)
    (gone,) = tracker.observe([], {})  # start 1 ended too: the pod went away
    assert (gone.outcome, gone.start) == ("not-ready", 1)
    # One record per pod that never became Ready: its latest start (a crash loop does not fill the ConfigMap).
    assert [(s["start"], s["outcome"]) for s in published(cluster)] == [(1, "not-ready")]


def test_a_restarted_agent_keeps_what_it_published_and_does_not_time_it_again(world):
    cluster, tracker, metrics, pod = world
    tracker.observe([pod], {})
    again = tracker_for(cluster, metrics, pod_logs=Path("/nonexistent"))
    assert again.observe([pod], {}) == []
    assert [t.pod for t in again.recent] == ["vllm-7d9f-cold"]


def test_pods_ready_before_the_agent_started_are_not_timed_again(world):
    """Its predecessor timed them (or their events and logs are no longer whole)."""
    cluster, _, metrics, pod = world
    later = tracker_for(cluster, metrics, pod_logs=Path("/nonexistent"), started=4_102_444_800.0)  # 2100
    assert later.observe([pod], {}) == [] and later.observe([pod], {}) == []
    assert not cluster.config_maps


def test_a_failed_or_deleted_pod_is_timed_as_not_ready_at_once(world):
    _, tracker, _, pod = world
    failed = starting(pod)
    failed["status"]["phase"] = "Failed"
    (timeline,) = tracker.observe([failed], {})
    assert timeline.outcome == "not-ready"
    deleted = starting(pod)
    deleted["metadata"]["uid"] = "uid-deleted"
    deleted["metadata"]["deletionTimestamp"] = "2026-11-30T09:20:00Z"
    (timeline,) = tracker.observe([deleted], {})
    assert timeline.outcome == "not-ready" and timeline.uid == "uid-deleted"


def test_a_crash_loop_keeps_one_record_its_latest_start(world):
    cluster, tracker, _, pod = world
    for restarts in range(6):
        looping = starting(pod)
        status = looping["status"]["containerStatuses"][0]
        status["restartCount"] = restarts
        status["lastState"] = {"terminated": {"finishedAt": f"2026-11-30T09:{15 + restarts:02d}:00Z"}}
        tracker.observe([looping], {})
    tracker.observe([], {})
    (record,) = published(cluster)
    assert (record["start"], record["outcome"]) == (5, "not-ready")
    # A restart's start begins when the previous run ended; the pod's node, image and restore are not part of it.
    assert record["created"] == pytest.approx(1_796_029_200.0)  # 2026-11-30T09:20:00Z
    assert record["phases"]["node"] is None and record["phases"]["image"] is None and not record["new_node"]


def test_a_restarted_container_that_becomes_ready_is_timed_from_its_previous_run(world):
    _, tracker, _, pod = world
    restarted = copy.deepcopy(pod)
    status = restarted["status"]["containerStatuses"][0]
    status["restartCount"] = 1
    status["lastState"] = {"terminated": {"finishedAt": "2026-11-30T09:14:00Z"}}  # Ready at 09:15:00
    (timeline,) = tracker.observe([restarted], {})
    assert timeline.start == 1 and timeline.total == 60.0
    assert timeline.phases["node"] is None and timeline.phases["other"] == pytest.approx(
        60.0 - 43.5 - 65.0 - 30.0, abs=200
    )


def test_nothing_is_published_without_the_nodes_owner_reference(world):
    """An apply without ownerReferences would remove the owner: wait until the node's uid is known."""
    cluster, tracker, _, pod = world
    node = cluster.nodes.pop(NODE)
    tracker.observe([pod], {})
    assert not cluster.config_maps
    assert "starts-unpublished" in [event["event"] for event in tracker.log.events]
    cluster.nodes[NODE] = node
    second = copy.deepcopy(pod)
    second["metadata"]["uid"] = "uid-second"
    tracker.observe([pod, second], {})
    assert [s["pod"] for s in published(cluster)] == ["vllm-7d9f-cold", "vllm-7d9f-cold"]


def test_the_node_keeps_its_last_starts_only(world):
    cluster, tracker, _, pod = world
    tracker.recent = type(tracker.recent)(maxlen=3)
    pods = []
    for index in range(5):
        copy_ = copy.deepcopy(pod)
        copy_["metadata"]["uid"] = f"uid-{index}"
        copy_["metadata"]["name"] = f"vllm-{index}"
        pods.append(copy_)
    tracker.observe(pods, {})
    assert [s["pod"] for s in published(cluster)] == ["vllm-2", "vllm-3", "vllm-4"]


def test_an_api_failure_is_logged_and_the_timeline_still_counts(world):
    cluster, tracker, metrics, pod = world
    cluster.fail_with = 500
    (timeline,) = tracker.observe([pod], {})
    assert timeline.image is None and "events:Pulled" in timeline.missing  # no events: the image phase is unknown
    names = [event["event"] for event in tracker.log.events]
    assert "start-events-unreadable" in names and "starts-unpublished" in names
    assert _sample(metrics, "warmstart_pod_starts_total", {"model": "qwen3-6-35b-a3b", "outcome": "ready"}) == 1


def _sample(metrics: AgentMetrics, name: str, labels: dict[str, str]) -> float:
    for family in text_string_to_metric_families(metrics.exposition()):
        for sample in family.samples:
            if sample.name == name and labels.items() <= sample.labels.items():
                return sample.value
    raise AssertionError(f"no {name} {labels}")


def test_metrics_in_the_exposition_format_with_names_and_labels(world):
    cluster, tracker, metrics, pod = world
    tracker.observe([pod], record(pod, "s3"))
    metrics.restored("qwen3-6-35b-a3b", "restored", 15_000_000)
    metrics.published("qwen3-6-35b-a3b", "published", 14_000_000)
    metrics.judged("qwen3-6-35b-a3b", "hit", "loaded")
    metrics.judged("qwen3-6-35b-a3b", "none", "none")  # not a cache use: not counted
    metrics.weights_synced("qwen3-6-35b-a3b", "downloaded", 67_000_000_000)
    families = {family.name: family for family in text_string_to_metric_families(metrics.exposition())}
    assert {
        "warmstart_pod_start_phase_seconds",
        "warmstart_pod_start_seconds",
        "warmstart_pod_starts",
        "warmstart_compile_cache_restores",
        "warmstart_compile_cache_publishes",
        "warmstart_compile_cache_use",
        "warmstart_compile_cache_bytes",
        "warmstart_weights_syncs",
        "warmstart_weights_downloaded_bytes",
    } <= set(families)
    assert families["warmstart_pod_start_phase_seconds"].type == "histogram"
    model = {"model": "qwen3-6-35b-a3b"}
    assert (
        _sample(metrics, "warmstart_pod_start_phase_seconds_sum", {**model, "phase": "image", "source": "pulled"})
        == 302.512
    )
    assert (
        _sample(metrics, "warmstart_pod_start_phase_seconds_sum", {**model, "phase": "compile", "source": "miss"})
        == 65.0
    )
    assert (
        _sample(metrics, "warmstart_pod_start_phase_seconds_sum", {**model, "phase": "weights", "source": "s3"}) == 43.5
    )
    assert (
        _sample(metrics, "warmstart_pod_start_phase_seconds_count", {**model, "phase": "node", "source": "new-node"})
        == 1
    )
    assert _sample(metrics, "warmstart_pod_start_seconds_bucket", {**model, "node_kind": "new", "le": "900.0"}) == 1
    assert _sample(metrics, "warmstart_pod_start_seconds_bucket", {**model, "node_kind": "new", "le": "600.0"}) == 0
    assert _sample(metrics, "warmstart_compile_cache_bytes_total", {**model, "direction": "restored"}) == 15_000_000
    assert _sample(metrics, "warmstart_compile_cache_use_total", {**model, "outcome": "hit", "cause": "loaded"}) == 1
    with pytest.raises(AssertionError):
        _sample(metrics, "warmstart_compile_cache_use_total", {**model, "outcome": "none"})
    assert _sample(metrics, "warmstart_weights_downloaded_bytes_total", model) == 67_000_000_000
