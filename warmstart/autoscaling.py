"""Autoscaling on vLLM's own load signals: the HorizontalPodAutoscaler each autoscaled model gets, derived from
its start time, and the HPA controller's arithmetic to check a policy against a load curve before deploying it.

The metrics come from each vLLM pod's /metrics (vLLM 0.21.0 and 0.34.0, `PrometheusStatLogger`,
v1/metrics/loggers.py): `vllm:num_requests_waiting` (a gauge: requests queued, not yet running) and
`vllm:kv_cache_usage_perc` (a gauge, 0 to 1). Prometheus scrapes them; KEDA's Prometheus scaler queries their sum
over the model's pods, and its metrics adapter serves it to the HPA as the external metric `s0-prometheus`, with an
AverageValue target: the controller divides it by the replicas (docs/upstream-facts.md, "Autoscaling").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import Autoscaling, ModelSpec

# vLLM's series each target reads.
METRICS = {"waiting_requests": "vllm:num_requests_waiting", "kv_cache_usage": "vllm:kv_cache_usage_perc"}
# The external metric KEDA's adapter serves for a ScaledObject's first trigger (s<index>-<scaler>), and the label
# that selects a ScaledObject's series (pkg/scaling/executor, pkg/provider of KEDA v2.21.0).
EXTERNAL_METRIC = "s0-prometheus"
SCALED_OBJECT_LABEL = "scaledobject.keda.sh/name"
# One noisy 15 s sample must not start a GPU node: the signal is the last minute's average.
SIGNAL_WINDOW = "1m"
DEFAULT_TARGETS = {"waiting_requests": 5.0, "kv_cache_usage": 0.8}
# Where the environment's Prometheus and KEDA run (construct_kit/serving_metrics.py), and the Prometheus chart's
# server Service (<release>-server, port 80) that KEDA queries.
MONITORING_NAMESPACE = "warmstart-monitoring"
PROMETHEUS_RELEASE = "prometheus"
PROMETHEUS_URL = f"http://{PROMETHEUS_RELEASE}-server.{MONITORING_NAMESPACE}.svc"
# KEDA's chart (kedacore/keda) at the version of KEDA it runs: its version follows KEDA's (docs/upstream-facts.md).
KEDA_CHART_VERSION = "2.21.0"
# The HPA of a model, KEDA's since warmstart autoscales through it (the name the HPA had before), and the
# annotation with which a ScaledObject takes over an HPA that exists (KEDA's admission webhook requires it).
HPA_NAME = "vllm"
TRANSFER_HPA_OWNERSHIP = "scaledobject.keda.sh/transfer-hpa-ownership"
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
    metric: str  # the external metric the HPA reads (KEDA's name)
    source_metric: str  # vLLM's own series
    target: float  # per pod (AverageValue: the query's sum over the pods, divided by the replicas)
    scale_up_window: int
    scale_down_window: int
    start_seconds: float  # the estimated start it was derived from

    def query(self, namespace: str) -> str:
        """What KEDA asks Prometheus: the series summed over the model's pods (one series: the scaler refuses
        several), each averaged over SIGNAL_WINDOW, as the kubernetes-pods job labels them."""
        return f'sum(avg_over_time({self.source_metric}{{namespace="{namespace}"}}[{SIGNAL_WINDOW}]))'

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
    return ScalingPolicy(
        model=model.name,
        min_replicas=settings.min_replicas,
        max_replicas=settings.max_replicas,
        metric=EXTERNAL_METRIC,
        source_metric=METRICS[settings.metric],
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


def recommend(current: int, load: float, target: float) -> int:
    """One sync's raw recommendation for an External metric with an AverageValue target, as replica_calculator.go
    (GetExternalPerPodMetricReplicas) computes it: the metric's total over the target per pod, unless the ratio to
    the current replicas (pending and loading pods count: the Deployment's status replicas) is within the
    tolerance."""
    if current == 0:
        return current
    ratio = load / (target * current)
    return current if abs(1 - ratio) <= TOLERANCE else math.ceil(load / target)


def simulate(policy: ScalingPolicy, load: list[tuple[int, float]], *, start: int, initial: int) -> list[Step]:
    """Runs the controller every SYNC_SECONDS over a load curve ((t, load) points, each held until the next: the
    requests waiting in the model's queues, whatever the pods serving), as horizontal.go does: the raw
    recommendation is stored, then stabilized (the current count raised to the lowest recommendation of the
    scale-up window, lowered to the highest of the scale-down window), then limited by the behavior's policies
    (from the count at the period's start: current less the pods added plus the pods removed within the period)
    and by min/max. A new pod serves `start` seconds after the sync that added it; a scale-down removes the newest
    pods first. With no pod serving there is no series: the query's sum is empty, KEDA reports 0."""
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
        raw = recommend(replicas, current_load if ready else 0.0, policy.target)
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
