"""The alert rules an operator acts on, as Prometheus rule groups: one copy of each expression, written out as a
plain rules file and as a PrometheusRule (observability/files.py), unit-tested with `promtool test rules`
(tests/monitoring) and evaluated by a real Prometheus in the engine tier.

What each alert means and what to do: docs/monitoring.md. The series are the node agent's (docs/metrics.md), as the
community chart's `kubernetes-pods` job labels them (`namespace`, `pod`, `node`).
"""

from __future__ import annotations

import math
import re

from contracts.agent_settings import AgentSettings
from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import ModelSpec
from warmstart.estimate import estimate_instance, network_gb_per_s, s3_prefix_gb_per_s
from warmstart.node_caches import weights_cached

GROUP = "warmstart"
# What each alert means and what to do, by the alert's name in lower case.
RUNBOOK = "docs/monitoring.md"
# A start is cold when torch.compile ran (node_agent/runtime/metrics.py start_case). Alert when, over the window,
# at least COLD_STARTS_MIN of a model's starts were cold and they were more than COLD_SHARE of them: one cold start
# is a new configuration's first (nothing to restore yet), not a fallback.
COLD_WINDOW, COLD_STARTS_MIN, COLD_SHARE = "1h", 2, 0.5
# The prefetch bound: PREFETCH_MARGIN times the download at the fastest S3 allows the node (the instance network
# and the prefix's request rate), after the wait before it may start (a poll, and a pod streaming from S3 holding
# downloads back), whole minutes, at least PREFETCH_FLOOR_SECONDS.
PREFETCH_MARGIN, PREFETCH_FLOOR_SECONDS = 3, 900
# Outcomes that mean the agent's cache work failed, counted over the window.
FAILURE_WINDOW = "30m"
# A publish failing is retried every 10 minutes (node_agent/runtime/agent.py): three in an hour is not a blip.
PUBLISH_FAILURES_MIN, PUBLISH_WINDOW = 3, "1h"
# A loop's stall is short-lived on the scrape (the liveness probe restarts the agent): hold it for this long.
STALL_HOLD = "15m"
# The pruner is late when no run has ended for two of its periods and an hour (a run takes minutes; one missed
# run is a blip, two are not). Known for `rate(...)` schedules; a cron schedule gets only the failure alert.
PRUNER_PERIODS_LATE, PRUNER_SLACK_SECONDS = 2, 3600
RATE_UNITS = {"minute": 60, "hour": 3600, "day": 86400}


def pruner_period_seconds(schedule: str) -> int | None:
    """EventBridge Scheduler's `rate(<n> <unit>)` in seconds; None for a cron schedule."""
    match = re.fullmatch(r"rate\((\d+) (minute|hour|day)s?\)", schedule.strip())
    return int(match.group(1)) * RATE_UNITS[match.group(2)] if match else None


def prefetch_bound_seconds(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog) -> int:
    instance = estimate_instance(model, config, catalog)
    fastest = min(network_gb_per_s(instance), s3_prefix_gb_per_s(config.estimate))
    wait = config.caches.weights_poll_seconds + AgentSettings.model_fields["max_weights_defer_seconds"].default
    bound = wait + PREFETCH_MARGIN * model.size_gb / fastest
    return max(PREFETCH_FLOOR_SECONDS, math.ceil(bound / 60) * 60)


def _rule(
    name: str, expr: str, *, severity: str, summary: str, description: str, labels: dict[str, str] | None = None
) -> dict:
    return {
        "alert": name,
        "expr": expr,
        "for": "0m",  # each expression measures its own duration (a window, a gauge of seconds)
        "labels": {"severity": severity, "app_kubernetes_io_part_of": "warmstart", **(labels or {})},
        "annotations": {"summary": summary, "description": description, "runbook": f"{RUNBOOK}#{name.lower()}"},
    }


def cold_starts_expr() -> str:
    cold = f'sum by (model) (increase(warmstart_pod_start_seconds_count{{case="cold"}}[{COLD_WINDOW}]))'
    every = f"sum by (model) (increase(warmstart_pod_start_seconds_count[{COLD_WINDOW}]))"
    return f"({cold} >= {COLD_STARTS_MIN}) and ({cold} / {every} > {COLD_SHARE})"


def alert_rules(config: EnvironmentConfig, catalog: Catalog) -> list[dict]:
    rules = [
        _rule(
            "WarmstartStartsFallingBackToCold",
            cold_starts_expr(),
            severity="warning",
            summary="{{ $labels.model }}: most starts of the last hour compiled (cold)",
            description="{{ $value | humanize }} of the model's starts in the last hour ran torch.compile "
            "though warmstart caches it: the compile cache missed (a changed image, config or hash, a failed "
            "restore or load). The dashboard's 'Compile cache per start' panel names the cause.",
        ),
        _rule(
            "WarmstartAgentLoopStalled",
            f"max by (namespace, pod, node, loop) (max_over_time(warmstart_agent_loop_stalled[{STALL_HOLD}])) == 1",
            severity="warning",
            summary="{{ $labels.node }}: the node agent's {{ $labels.loop }} loop stopped making progress",
            description="The loop made no progress past its bound; the liveness probe restarts the agent. Until it "
            "runs again the node restores, publishes and downloads nothing. Read the agent's log on the node.",
        ),
        _rule(
            "WarmstartCompileCacheLoadFailures",
            f'sum by (model) (increase(warmstart_compile_cache_use_total{{cause="load-failure"}}[{FAILURE_WINDOW}]))'
            " > 0",
            severity="warning",
            summary="{{ $labels.model }}: vLLM found the compiled graph and could not load it",
            description="Starts compiled again after vLLM failed to load the restored artifact (the pod-start "
            "event names vLLM's reason): the cache costs its restore and saves nothing.",
        ),
        _rule(
            "WarmstartCompileCacheRestoresFailing",
            f'sum by (model) (increase(warmstart_compile_cache_restores_total{{outcome="failed"}}[{FAILURE_WINDOW}]))'
            " > 0",
            severity="warning",
            summary="{{ $labels.model }}: compile-cache restores are failing",
            description="New nodes start without the compile cache and compile. The agent's `restore` events "
            "with status `failed` name the cause (S3 access, a refused archive).",
        ),
        _rule(
            "WarmstartCompileCachePublishFailing",
            f'sum by (model) (increase(warmstart_compile_cache_publishes_total{{outcome="failed"}}[{PUBLISH_WINDOW}]))'
            f" >= {PUBLISH_FAILURES_MIN}",
            severity="warning",
            summary="{{ $labels.model }}: compile-cache publishes keep failing",
            description="A node that compiled cannot publish (S3 access, or an archive over "
            "caches.compile_cache_reserve_gb): the next new nodes compile too. The agent's `publish` events "
            "with status `failed` name the cause.",
        ),
        _rule(
            "WarmstartPrunerFailing",
            "min(warmstart_pruner_last_run_ok) == 0",
            severity="warning",
            summary="The compile-cache pruner's last run did not prune",
            description="The pruner failed or could not read the active set, so it deleted nothing: stale keys "
            "stay in the bucket. Its log group (and the pruner stack's CloudWatch alarms) give the reason.",
        ),
    ]
    period = pruner_period_seconds(config.pruning.schedule)
    if period is not None:
        late = PRUNER_PERIODS_LATE * period + PRUNER_SLACK_SECONDS
        rules.append(
            _rule(
                "WarmstartPrunerNotRunning",
                f"time() - max(warmstart_pruner_last_run_timestamp_seconds) > {late}",
                severity="warning",
                summary="The compile-cache pruner has not run for {{ $value | humanizeDuration }}",
                description=f"No run of the pruner ended in {late} s ({PRUNER_PERIODS_LATE} of its periods, "
                f"`{config.pruning.schedule}`, and an hour): its schedule is disabled, or every run dies before "
                "it reports. Read its schedule and its log group.",
            )
        )
    for model in config.models:
        if not weights_cached(model, config):
            continue
        bound = prefetch_bound_seconds(model, config, catalog)
        rules.append(
            _rule(
                "WarmstartNodeCopyMissing",
                f'max by (namespace, pod, node, model) (warmstart_node_copy_missing_seconds{{model="{model.name}"}})'
                f" > {bound}",
                severity="warning",
                labels={"model": model.name},  # one rule per model: the same name, told apart by its labels
                summary="{{ $labels.node }}: no copy of {{ $labels.model }}'s weights after "
                "{{ $value | humanizeDuration }}",
                description="The node has been without a complete copy of the model's weights past the prefetch "
                f"bound ({bound} s: "
                f"{PREFETCH_MARGIN} x the {model.size_gb:g} GB download at the node's fastest, after the agent's "
                "wait). Pods there load from S3. The agent's `weights-sync` events name the outcome (refused, "
                "failed, stale).",
            )
        )
    return [{"name": GROUP, "rules": rules}]
