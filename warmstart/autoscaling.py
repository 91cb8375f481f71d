"""Autoscaling on vLLM's own load signals: the HorizontalPodAutoscaler each autoscaled model gets, derived from
its start time, and the HPA controller's arithmetic to check a policy against a load curve before deploying it.

The metrics come from each vLLM pod's /metrics (vLLM 0.21.0 and 0.34.0, `PrometheusStatLogger`,
v1/metrics/loggers.py): `vllm:num_requests_waiting` (a gauge: requests queued, not yet running) and
`vllm:kv_cache_usage_perc` (a gauge, 0 to 1). Prometheus scrapes
them; prometheus-adapter serves them through the custom metrics API as `vllm_num_requests_waiting` and
`vllm_kv_cache_usage_perc` per pod (docs/upstream-facts.md, "Autoscaling").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import Autoscaling, ModelSpec

# What the custom metrics API calls each target (prometheus-adapter renames vLLM's "vllm:" series).
METRICS = {
    "waiting_requests": ("vllm:num_requests_waiting", "vllm_num_requests_waiting"),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm_kv_cache_usage_perc"),
}
DEFAULT_TARGETS = {"waiting_requests": 5.0, "kv_cache_usage": 0.8}
# Where the environment's Prometheus and prometheus-adapter run (construct_kit/serving_metrics.py).
MONITORING_NAMESPACE = "warmstart-monitoring"
# The prometheus chart's labels on its server's pods: an autoscaled model's pods admit these, not the namespace.
PROMETHEUS_SERVER_LABELS = {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/component": "server"}
# The HPA controller's defaults (kubernetes pkg/controller/podautoscaler, pkg/apis/autoscaling/v2/defaults.go).
SYNC_SECONDS = 15
TOLERANCE = 0.1
DEFAULT_SCALE_DOWN_WINDOW = 300
MAX_WINDOW = 3600  # the API's bound on stabilizationWindowSeconds
# Scale-down: one pod a minute, so a burst's capacity leaves gradually (the HPA deletes pods without asking the
# PodDisruptionBudget; the min_replicas floor keeps the spread's nodes).
SCALE_DOWN_PODS, SCALE_DOWN_PERIOD = 1, 60
# Scale-up: the controller's default rate (double, or 4 pods, per 15 s): pods wait for GPU nodes anyway.
SCALE_UP_PERCENT, SCALE_UP_PODS, SCALE_UP_PERIOD = 100, 4, 15


@dataclass(frozen=True)
class ScalingPolicy:
    model: str
    min_replicas: int
    max_replicas: int
    metric: str  # the custom metrics API name
    source_metric: str  # vLLM's own series
    target: float  # per pod (AverageValue)
    scale_up_window: int
    scale_down_window: int
    start_seconds: float  # the estimated start it was derived from

    def behavior(self) -> dict:
        return {
            "scaleUp": {
                "stabilizationWindowSeconds": self.scale_up_window,
                "selectPolicy": "Max",
                "policies": [
                    {"type": "Percent", "value": SCALE_UP_PERCENT, "periodSeconds": SCALE_UP_PERIOD},
                    {"type": "Pods", "value": SCALE_UP_PODS, "periodSeconds": SCALE_UP_PERIOD},
                ],
            },
            "scaleDown": {
                "stabilizationWindowSeconds": self.scale_down_window,
                "selectPolicy": "Max",
                "policies": [{"type": "Pods", "value": SCALE_DOWN_PODS, "periodSeconds": SCALE_DOWN_PERIOD}],
            },
        }


def target_value(settings: Autoscaling) -> float:
    return settings.target_value if settings.target_value is not None else DEFAULT_TARGETS[settings.metric]


def scale_down_window(start_seconds: float) -> int:
    """Longer than a start: a pod removed and needed again within one start time would cost a whole start. One
    and a half times the estimated start on a new node (the slowest way back), whole sync periods, at least the
    controller's 5 minutes and at most the API's hour."""
    window = math.ceil(1.5 * start_seconds / SYNC_SECONDS) * SYNC_SECONDS
    return min(MAX_WINDOW, max(DEFAULT_SCALE_DOWN_WINDOW, window))


def scaling_policy(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog) -> ScalingPolicy | None:
    from warmstart.estimate import CASES, estimate_model  # the estimator builds on the workload plan

    settings = model.autoscaling
    if settings is None:
        return None
    start = estimate_model(model, config, catalog).case(CASES[1]).total_seconds  # a new node, with warmstart
    source, metric = METRICS[settings.metric]
    return ScalingPolicy(
        model=model.name,
        min_replicas=settings.min_replicas,
        max_replicas=settings.max_replicas,
        metric=metric,
        source_metric=source,
        target=target_value(settings),
        scale_up_window=0,  # react at once: a new pod takes minutes before it serves
        scale_down_window=scale_down_window(start),
        start_seconds=start,
    )


# ---- the HPA controller's arithmetic, for checking a policy against a load curve ----


@dataclass(frozen=True)
class Step:
    t: int  # seconds
    load: float  # the metric summed over the model's pods (e.g. requests waiting in all queues)
    ready: int  # pods serving (reporting the metric)
    replicas: int  # the Deployment's replicas after this sync


def recommend(current: int, ready: int, load: float, target: float, *, pending: int | None = None) -> int:
    """One sync's raw recommendation for a Pods metric with an AverageValue target, as replica_calculator.go
    (calcPlainMetricReplicas, groupPods) computes it. `ready` pods report the metric; `pending` ones (a new GPU
    pod is Pending through its node's launch, the image pull and the restore wait) are left out, but count as 0
    when the others would scale up; Running pods without the metric (vLLM still loading: the rest of `current`)
    count as 0 for a scale-up and as the target for a scale-down. A change the filled-in pods reverse or bring
    within the tolerance is dropped; no pod reporting: no change. By default every starting pod is pending."""
    pending = current - ready if pending is None else pending
    missing = current - ready - pending
    if ready == 0:
        return current
    ratio = (load / ready) / target
    unready_up = pending > 0 and ratio > 1
    if not unready_up and missing == 0:
        return current if abs(1 - ratio) <= TOLERANCE else math.ceil(ratio * ready)
    filled, counted = load, ready
    if missing:
        filled += missing * target if ratio < 1 else 0.0
        counted += missing
    if unready_up:
        counted += pending  # as 0
    new_ratio = (filled / counted) / target
    if abs(1 - new_ratio) <= TOLERANCE or (ratio < 1 < new_ratio) or (new_ratio < 1 < ratio):
        return current
    proposed = math.ceil(new_ratio * counted)
    if (new_ratio < 1 and proposed > current) or (new_ratio > 1 and proposed < current):
        return current
    return proposed


def simulate(policy: ScalingPolicy, load: list[tuple[int, float]], *, start: int, initial: int) -> list[Step]:
    """Runs the controller every SYNC_SECONDS over a load curve ((t, load) points, each held until the next), as
    horizontal.go does: the raw recommendation is stored, then stabilized (the current count raised to the lowest
    recommendation of the scale-up window, lowered to the highest of the scale-down window), then limited by the
    behavior's policies (from the count at the period's start: current less the pods added plus the pods removed
    within the period) and by min/max. A new pod is pending for `start` seconds after the sync that added it,
    then serves; a scale-down removes the newest pods first."""
    replicas = max(policy.min_replicas, min(policy.max_replicas, initial))
    ready_at: list[int] = [0] * replicas
    recommendations: list[tuple[int, int]] = []
    changes: list[tuple[int, int]] = []  # (t, pods added (+) or removed (-))
    steps = []

    def period_start(t: int, period: int) -> int:
        added = sum(n for at, n in changes if n > 0 and at > t - period)
        removed = -sum(n for at, n in changes if n < 0 and at > t - period)
        return replicas - added + removed

    for t in range(0, load[-1][0] + 1, SYNC_SECONDS):
        current_load = next(value for at, value in reversed(load) if at <= t)
        ready = sum(1 for at in ready_at if at <= t)
        raw = recommend(replicas, ready, current_load, policy.target)
        recommendations.append((t, raw))
        up = min(r for at, r in recommendations if at > t - policy.scale_up_window or at == t)
        down = max(r for at, r in recommendations if at > t - policy.scale_down_window or at == t)
        desired = max(replicas, up) if replicas < up else replicas
        desired = min(desired, down) if desired > down else desired
        if desired > replicas:
            base = period_start(t, SCALE_UP_PERIOD)
            desired = min(desired, max(math.ceil(base * (1 + SCALE_UP_PERCENT / 100)), base + SCALE_UP_PODS))
        elif desired < replicas:
            desired = max(desired, period_start(t, SCALE_DOWN_PERIOD) - SCALE_DOWN_PODS)
        desired = max(policy.min_replicas, min(policy.max_replicas, desired))
        if desired > replicas:
            ready_at += [t + start] * (desired - replicas)
        elif desired < replicas:
            ready_at = sorted(ready_at)[:desired]
        if desired != replicas:
            changes.append((t, desired - replicas))
        replicas = desired
        steps.append(Step(t, current_load, ready, replicas))
    return steps
