"""The HPA warmstart renders, run by the real HPA controller against a stand-in custom metrics API, over a recorded
load curve; warmstart/autoscaling.py's `simulate` predicts the replica counts from the same curve.

Time is compressed so the tier runs in about two minutes: the controller syncs every 2 s (its flag; 15 s on EKS),
the scale-down window and period are cut to 20 s in the applied HPA, and `simulate` is given the same numbers. What
is compared is the controller's arithmetic (recommendation, stabilization, the behavior's limits, pending pods) on
the object warmstart renders; the minutes are the config's. A pod turns Ready `START` seconds after it is created
(this plane has no kubelet: tests/cluster/nodes.mark_running plays its part).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

from contracts.pod_labels import vllm_pod_selector
from tests.cluster.api import Api
from tests.cluster.crds import crds_for
from tests.cluster.custom_metrics import CustomMetrics
from tests.cluster.environment import apply_all, rendered_objects, wait_until
from tests.cluster.nodes import gpu_node, mark_running, pods, register
from tests.synth import synthesize_shipped
from warmstart import autoscaling
from warmstart.autoscaling import MONITORING_NAMESPACE, scaling_policy
from warmstart.catalog import default_catalog

pytestmark = pytest.mark.control_plane

MODEL = "llama-3-3-70b"
SYNC = 2  # --horizontal-pod-autoscaler-sync-period (tests/cluster/control_plane.py)
WINDOW = PERIOD = 20  # the scale-down stabilization window and policy period, compressed
START = 8  # seconds from a pod's creation to Ready
# (seconds, requests waiting over all pods): steady, a burst, then quiet.
LOAD = [(0, 10.0), (10, 40.0), (50, 5.0), (130, 5.0)]


class StandInKubelet:
    """Marks each of the model's pods Running and Ready START seconds after it appears; removes deleted ones."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for pod in pods(self.api, MODEL, vllm_pod_selector()):
                name = pod["metadata"]["name"]
                if pod["metadata"].get("deletionTimestamp"):
                    self.api.request("DELETE", f"/api/v1/namespaces/{MODEL}/pods/{name}?gracePeriodSeconds=0")
                    continue
                first = self.seen.setdefault(name, time.monotonic())
                if pod["spec"].get("nodeName") and time.monotonic() - first >= START and not _ready(pod):
                    mark_running(self.api, pod)
            self.stop.wait(0.25)

    def ready(self, namespace: str, selector: str) -> list[str]:
        return [p["metadata"]["name"] for p in pods(self.api, namespace, selector) if _ready(p)]


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


@pytest.fixture(scope="module")
def autoscaled(start_module_plane, tmp_path_factory):
    prod = synthesize_shipped("prod", tmp_path_factory.mktemp("cdk"))
    plane = start_module_plane(controllers=True)
    api = Api(plane)
    for index, zone in enumerate(("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1a")):
        register(api, *gpu_node(f"gpu-{index}", "p5.48xlarge", zone=zone, mode=prod.config.compute.mode))
    objects = rendered_objects(prod, tmp_path_factory.mktemp("dist"))
    assert not apply_all(api, objects, crds_for(prod.config), dry_run_first=False)
    kubelet = StandInKubelet(api)
    threading.Thread(target=kubelet.run, daemon=True).start()
    model = next(m for m in prod.config.models if m.name == MODEL)
    policy = scaling_policy(model, prod.config, default_catalog())
    assert policy is not None
    metrics = CustomMetrics(api, metric=policy.metric, ready_pods=kubelet.ready, folder=tmp_path_factory.mktemp("m"))
    metrics.start().register(MONITORING_NAMESPACE)
    yield prod, api, objects, kubelet, metrics, policy
    kubelet.stop.set()
    metrics.stop()


def _compress(api: Api, policy) -> None:
    """The rendered HPA with the scale-down window and period cut to WINDOW and PERIOD seconds."""
    hpa = api.get(f"/apis/autoscaling/v2/namespaces/{MODEL}/horizontalpodautoscalers/vllm")
    behavior = hpa["spec"]["behavior"]
    assert behavior == policy.behavior(), "the applied HPA is the rendered one"
    behavior["scaleDown"]["stabilizationWindowSeconds"] = WINDOW
    for item in behavior["scaleDown"]["policies"]:
        item["periodSeconds"] = PERIOD
    api.merge_patch(
        f"/apis/autoscaling/v2/namespaces/{MODEL}/horizontalpodautoscalers/vllm", {"spec": {"behavior": behavior}}
    )


def _replicas(api: Api) -> int:
    return api.get(f"/apis/apps/v1/namespaces/{MODEL}/deployments/vllm")["spec"]["replicas"]


def test_the_real_controller_scales_as_simulate_predicts(autoscaled, monkeypatch):
    prod, api, _, kubelet, metrics, policy = autoscaled
    _compress(api, policy)
    # Steady state first: min_replicas pods serving, the metric read.
    metrics.load = lambda: LOAD[0][1]
    wait_until(lambda: len(kubelet.ready(MODEL, vllm_pod_selector())) == policy.min_replicas, timeout=90,
               what="the minimum replicas serving")  # fmt: skip
    wait_until(lambda: any(MODEL in r for r in metrics.requests), timeout=60, what="the controller reading the metric")
    started = time.monotonic()
    metrics.load = lambda: next(v for at, v in reversed(LOAD) if at <= time.monotonic() - started)
    observed: list[tuple[float, int]] = []
    while (elapsed := time.monotonic() - started) <= LOAD[-1][0]:
        observed.append((elapsed, _replicas(api)))
        time.sleep(0.5)

    monkeypatch.setattr(autoscaling, "SYNC_SECONDS", SYNC)
    monkeypatch.setattr(autoscaling, "SCALE_DOWN_PERIOD", PERIOD)
    compressed = dataclasses.replace(policy, scale_down_window=WINDOW)
    predicted = autoscaling.simulate(compressed, LOAD, start=START, initial=policy.min_replicas)

    def changes(series: list[tuple[float, int]]) -> list[tuple[float, int]]:
        out = [series[0]]
        for at, count in series[1:]:
            if count != out[-1][1]:
                out.append((at, count))
        return out

    real = changes(observed)
    expected = changes([(step.t, step.replicas) for step in predicted])
    hpa = api.get(f"/apis/autoscaling/v2/namespaces/{MODEL}/horizontalpodautoscalers/vllm")
    events = [(e["reason"], e["message"]) for e in api.get(f"/api/v1/namespaces/{MODEL}/events")["items"]]
    if [count for _, count in real] != [count for _, count in expected]:
        pytest.fail(json.dumps({"real": real, "expected": expected, "hpa": hpa["status"], "events": events}, indent=1))
    # Each change within a few syncs of the prediction: the controller's sync phase and the metric's path
    # (aggregator, stand-in) are not the simulation's.
    for (at, count), (predicted_at, _) in zip(real[1:], expected[1:], strict=True):
        assert abs(at - predicted_at) <= 3 * SYNC + 2, (count, at, predicted_at, real, expected)
    hpa = api.get(f"/apis/autoscaling/v2/namespaces/{MODEL}/horizontalpodautoscalers/vllm")
    reasons = {c["type"]: c.get("reason") for c in hpa["status"].get("conditions", [])}
    assert reasons.get("ScalingActive") == "ValidMetricFound", reasons
    assert prod.config.models
