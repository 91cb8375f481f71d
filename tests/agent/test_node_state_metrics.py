"""The agent's metrics of the node's state, for the dashboard's warm-versus-cold panel and the alerts: which case
each start was, whether the node holds each model's caches, how long it has been without a node copy, and
whether each loop makes progress."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contracts.start_record import StartTimeline
from node_agent.runtime.liveness import Liveness
from node_agent.runtime.metrics import AgentMetrics, NodeCopyWait, start_case

MODEL = "qwen3-6-35b-a3b"


def samples(metrics: AgentMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.exposition())
        for sample in family.samples
    }


def value(metrics: AgentMetrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


def timeline(*, new_node: bool, compile_cache: str | None, ready: float | None = 100.0) -> StartTimeline:
    return StartTimeline(
        model=MODEL, namespace=MODEL, pod="vllm-0", uid="u", node="n", start=0, outcome="ready", created=0.0,
        ready=ready, new_node=new_node, image="present", restore=None, weights_source="node",
        compile_cache=compile_cache, vllm_log_format="0.21.0",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("new_node", "compile_cache", "case"),
    [
        (True, "miss", "cold"),  # a new node that compiled: the cold start warmstart exists to avoid
        (False, "miss", "cold"),  # an existing node that compiled (a new image, a changed config): cold too
        (True, "hit", "new-node"),
        (False, "hit", "warm"),
        (True, None, "new-node"),  # compile cache off, or vLLM said nothing: not called cold
        (False, None, "warm"),
    ],
)
def test_each_start_is_one_of_the_estimates_three_cases(new_node, compile_cache, case):
    assert start_case(timeline(new_node=new_node, compile_cache=compile_cache)) == case


def test_the_start_histogram_carries_the_case():
    metrics = AgentMetrics()
    metrics.observe_start(timeline(new_node=True, compile_cache="miss", ready=400.0))
    metrics.observe_start(timeline(new_node=False, compile_cache="hit", ready=40.0))
    assert value(metrics, "warmstart_pod_start_seconds_count", model=MODEL, node_kind="new", case="cold") == 1
    assert value(metrics, "warmstart_pod_start_seconds_sum", model=MODEL, node_kind="new", case="cold") == 400
    assert value(metrics, "warmstart_pod_start_seconds_count", model=MODEL, node_kind="existing", case="warm") == 1


def test_the_node_holds_a_cache_after_the_outcomes_that_leave_one_and_not_after_the_others():
    metrics = AgentMetrics()
    assert value(metrics, "warmstart_node_cache_ready", model=MODEL, cache="compile") is None  # nothing said yet
    metrics.restored(MODEL, "miss", 0)
    assert value(metrics, "warmstart_node_cache_ready", model=MODEL, cache="compile") == 0
    metrics.restored(MODEL, "busy", 0)  # another restore holds the folder: says nothing about it
    assert value(metrics, "warmstart_node_cache_ready", model=MODEL, cache="compile") == 0
    metrics.published(MODEL, "published", 10)  # the node compiled and published: it holds the cache now
    assert value(metrics, "warmstart_node_cache_ready", model=MODEL, cache="compile") == 1
    metrics.restored(MODEL, "failed", 0)
    assert value(metrics, "warmstart_node_cache_ready", model=MODEL, cache="compile") == 0
    metrics.weights_synced(MODEL, "downloaded", 5)
    assert value(metrics, "warmstart_node_cache_ready", model=MODEL, cache="weights") == 1
    metrics.weights_synced(MODEL, "stale", 0)  # S3 moved on: the copy is not the model's any more
    assert value(metrics, "warmstart_node_cache_ready", model=MODEL, cache="weights") == 0


def test_the_time_without_a_copy_counts_from_the_first_sync_that_found_none_and_resets_with_one():
    now = [1000.0]
    wait = NodeCopyWait(clock=lambda: now[0])
    metrics = AgentMetrics()
    metrics.copies = wait
    metrics.registry.register(wait)
    metrics.weights_synced(MODEL, "failed", 0)
    now[0] = 1600.0
    metrics.weights_synced(MODEL, "refused", 0)  # still none: the wait goes on from the first
    now[0] = 1900.0
    assert value(metrics, "warmstart_node_copy_missing_seconds", model=MODEL) == 900
    metrics.weights_synced(MODEL, "busy", 0)  # withdrawn while a pod reads it: still none for new pods
    assert value(metrics, "warmstart_node_copy_missing_seconds", model=MODEL) == 900
    metrics.weights_synced(MODEL, "downloaded", 1)
    assert value(metrics, "warmstart_node_copy_missing_seconds", model=MODEL) == 0
    now[0] = 5000.0
    metrics.weights_synced(MODEL, "stale", 0)
    now[0] = 5030.0
    assert value(metrics, "warmstart_node_copy_missing_seconds", model=MODEL) == 30


def test_each_loop_reports_its_progress_and_a_stall_past_its_bound():
    now = [0.0]
    liveness = Liveness(clock=lambda: now[0], stall_seconds=600)
    liveness.register("tick", 10)
    liveness.register("weights_tick", 60)
    metrics = AgentMetrics()
    metrics.watch_loops(liveness)
    metrics.watch_loops(liveness)  # once per agent: a second call registers nothing twice
    now[0] = 650.0
    liveness.beat("weights_tick")
    assert value(metrics, "warmstart_agent_loop_seconds_since_progress", loop="tick") == 650
    assert value(metrics, "warmstart_agent_loop_stalled", loop="tick") == 1  # 650 > 10 + 600
    assert value(metrics, "warmstart_agent_loop_stalled", loop="weights_tick") == 0
    liveness.beat("tick")
    assert value(metrics, "warmstart_agent_loop_stalled", loop="tick") == 0


def test_the_wait_for_a_copy_counts_from_the_agents_start_so_a_long_first_download_shows():
    now = [100.0]
    metrics = AgentMetrics()
    metrics.copies = NodeCopyWait(clock=lambda: now[0])
    metrics.registry.register(metrics.copies)
    metrics.know_models(starts=[MODEL], compile=[], weights=[MODEL])
    now[0] = 1300.0  # the first sync is still downloading
    assert value(metrics, "warmstart_node_copy_missing_seconds", model=MODEL) == 1200
    metrics.weights_synced(MODEL, "downloaded", 1)
    assert value(metrics, "warmstart_node_copy_missing_seconds", model=MODEL) == 0


def test_a_configured_models_counters_are_there_at_zero_before_its_first_event():
    """So that Prometheus' increase() sees the first cold start or failed restore (a series born at 1 would show
    none)."""
    metrics = AgentMetrics()
    metrics.know_models(starts=[MODEL, "other"], compile=[MODEL], weights=["other"])
    assert value(metrics, "warmstart_pod_starts_total", model=MODEL, outcome="ready") == 0
    assert value(metrics, "warmstart_pod_start_seconds_count", model=MODEL, node_kind="new", case="cold") == 0
    assert value(metrics, "warmstart_compile_cache_use_total", model=MODEL, outcome="miss", cause="load-failure") == 0
    assert value(metrics, "warmstart_compile_cache_restores_total", model=MODEL, outcome="failed") == 0
    assert value(metrics, "warmstart_compile_cache_publishes_total", model=MODEL, outcome="failed") == 0
    assert value(metrics, "warmstart_weights_syncs_total", model="other", outcome="refused") == 0
    assert value(metrics, "warmstart_compile_cache_restores_total", model="other", outcome="failed") is None
    assert value(metrics, "warmstart_weights_syncs_total", model=MODEL, outcome="refused") is None
    # A start on a new node is never "warm", one on an existing node never "new-node".
    assert value(metrics, "warmstart_pod_start_seconds_count", model=MODEL, node_kind="new", case="warm") is None
    metrics.restored(MODEL, "failed", 0)
    assert value(metrics, "warmstart_compile_cache_restores_total", model=MODEL, outcome="failed") == 1
