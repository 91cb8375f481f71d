"""Pod start timelines assembled from recorded API responses (pod, node, events) and recorded vLLM log files
(tests/fixtures/starts/<case>/). The log lines are vLLM 0.21.0's, the events and log format kubelet's and
containerd's (docs/upstream-facts.md, "Pod start timeline"); durations are asserted exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.start_record import TIMELINE_PHASES, StartTimeline
from node_agent.runtime.timeline import assemble, go_duration
from node_agent.runtime.vllm_log import VLLM_LOG_FORMAT, cri_lines, cri_time, parse_start, read_container_log

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "starts"


def recorded(case: str, *, outcome: str = "ready", weights: str | None = "s3", restore: str | None = "restored"):
    folder = RECORDED / case
    lines = read_container_log(folder / "vllm.log")
    return assemble(
        pod=json.loads((folder / "pod.json").read_text()),
        node=json.loads((folder / "node.json").read_text()),
        events=json.loads((folder / "events.json").read_text())["items"],
        vllm=parse_start(lines) if lines is not None else None,
        weights_source=weights,
        restore_outcome=restore,
        outcome=outcome,
    )


def test_a_cold_start_on_a_new_node_pays_for_everything():
    timeline = recorded("cold", restore="miss")
    assert timeline.phases == {
        "node": 410.0,  # created at 0, the node created after it (95) and Ready at 410
        "scheduling": 2.0,
        "image": 302.512,  # kubelet's own pull duration, not the event spacing
        "restore": 2.0,  # the wait init container's start and end
        "weights": 43.5,  # "Model loading took ... and 43.500000 seconds"
        "compile": 65.0,  # "torch.compile took 65.00 s in total"
        "engine": 30.0,  # init engine 95 s less its compilation 65 s
        "other": 44.988,  # the rest of the 900 s to Ready
    }
    assert timeline.total == 900.0 and sum(timeline.phases.values()) == pytest.approx(900.0)
    assert (timeline.new_node, timeline.image, timeline.compile_cache, timeline.restore) == (
        True,
        "pulled",
        "miss",
        "miss",
    )
    assert timeline.missing == () and timeline.outcome == "ready" and timeline.vllm_log_format == VLLM_LOG_FORMAT


def test_a_new_node_with_a_restored_cache_loads_the_compiled_graphs():
    timeline = recorded("restored")
    assert timeline.compile_cache == "hit"  # "Directly load AOT compilation from path", split by kubelet (P, F)
    assert timeline.phases["compile"] == 16.0 and timeline.phases["engine"] == 30.0
    assert timeline.phases["image"] == 298.25 and timeline.phases["restore"] == 5.0
    assert timeline.total == 840.0


def test_a_warm_node_finds_the_image_and_serves_the_node_copy():
    timeline = recorded("warm", weights="node", restore="present")
    assert (timeline.new_node, timeline.image, timeline.weights_source) == (False, "present", "node")
    assert timeline.phases["node"] == 0.0 and timeline.phases["image"] == 0.0
    assert timeline.phases["weights"] == 2.5 and timeline.phases["compile"] == 6.0
    assert timeline.total == 62.0


def test_missing_lines_and_events_leave_their_phases_empty_and_named():
    timeline = recorded("sparse", weights=None, restore=None)
    assert timeline.phases["weights"] == 25.0
    assert timeline.phases["compile"] is None and timeline.phases["engine"] is None and timeline.phases["image"] is None
    assert set(timeline.missing) == {"events:Pulled", "vllm-log:compile", "vllm-log:engine"}
    # Everything unexplained is `other`: the total stays true.
    assert timeline.phases["other"] == pytest.approx(90 - 1 - 1 - 25)
    assert timeline.compile_cache is None


def test_without_a_log_file_the_vllm_phases_are_missing_not_guessed():
    folder = RECORDED / "warm"
    timeline = assemble(
        pod=json.loads((folder / "pod.json").read_text()),
        node=json.loads((folder / "node.json").read_text()),
        events=[],
        vllm=None,
        weights_source=None,
        restore_outcome=None,
        outcome="ready",
    )
    assert "vllm-log" in timeline.missing and timeline.phases["weights"] is None


def test_a_pod_that_never_became_ready_keeps_the_phases_it_reached():
    timeline = recorded("stuck", outcome="not-ready")
    assert timeline.outcome == "not-ready" and timeline.ready is None and timeline.total is None
    assert timeline.phases["node"] == 413.0 and timeline.phases["image"] == 301.25
    assert timeline.phases["weights"] == 70.25 and timeline.phases["other"] is None
    assert {"vllm-log:compile", "vllm-log:engine", "vllm-log:server"} <= set(timeline.missing)


def test_the_record_round_trips_and_other_versions_are_skipped():
    timeline = recorded("cold")
    assert StartTimeline.from_dict(json.loads(json.dumps(timeline.to_dict()))) == timeline
    assert StartTimeline.from_dict({**timeline.to_dict(), "version": 99}) is None
    assert StartTimeline.from_dict({"version": 1, "model": "x"}) is None
    assert list(timeline.phases) == list(TIMELINE_PHASES)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("850ms", 0.85), ("1.204s", 1.204), ("1m2.345s", 62.345), ("1h2m3.4s", 3723.4), ("12.5s", 12.5), ("3µs", 3e-6)],
)
def test_go_durations_as_kubelet_prints_them(text, seconds):
    assert go_duration(text) == pytest.approx(seconds)


def test_a_malformed_duration_is_refused():
    with pytest.raises(ValueError):
        go_duration("5 minutes")


def test_cri_lines_join_pieces_and_keep_carriage_returns_inside_a_line():
    data = (
        "2026-11-30T09:00:01.5Z stdout P first half \n"
        "2026-11-30T09:00:02Z stdout F and the rest\n"
        "2026-11-30T09:00:03.123456789Z stderr F progress 10%\rprogress 20%\n"
        "2026-11-30T09:00:04Z stdout F torn last li"
    )
    lines = cri_lines(data)
    assert [text for _, text in lines] == ["first half and the rest", "progress 10%\rprogress 20%", "torn last li"]
    assert lines[0][0] == cri_time("2026-11-30T09:00:01.5Z")
    assert cri_time("2026-11-30T09:00:03.123456789Z") - cri_time("2026-11-30T09:00:03Z") == pytest.approx(0.123456789)


def test_a_miss_wins_over_hits_in_one_start():
    """A start that loaded some graphs from the cache but compiled one anew paid for a compile."""
    lines = [
        (
            1.0,
            "(EngineCore pid=7) INFO 11-30 09:00:01 [backends.py:292] Directly load the compiled graph(s) for "
            "compile range (1, 512) from the cache, took 0.812 s",
        ),
        (
            2.0,
            "(EngineCore pid=7) INFO 11-30 09:00:02 [backends.py:393] Compiling a graph for compile range "
            "(513, 8192) takes 12.10 s",
        ),
        (3.0, "(EngineCore pid=7) INFO 11-30 09:00:03 [monitor.py:53] torch.compile took 14.02 s in total"),
    ]
    start = parse_start(lines)
    assert start.compile_cache == "miss" and start.compile_seconds == 14.02
    assert start.engine_seconds is None and "vllm-log:engine" in start.missing
