"""The autoscaling chain warmstart deploys, real end to end: the rendered model's pods are scraped by the real
Prometheus (the shipped chart's version, its `kubernetes-pods` job finding them through pod discovery against the
test API server, their rendered annotations and labels relabelled by the chart's rules), the rendered ScaledObject
is run by KEDA's own operator and metrics adapter (behind the APIService), and the real HPA controller scales the
Deployment over a recorded load curve; warmstart/autoscaling.py's `simulate` predicts the replica counts from the
same curve.

An environment deployed before KEDA has the HPA `vllm` warmstart made for prometheus-adapter: KEDA takes it over
(the same object, the replicas kept), which is the upgrade path (docs/upgrades.md).

Time is compressed so the tier runs in about three minutes, each change named: the controller syncs every 2 s (its
flag; 15 s on EKS), Prometheus scrapes every second, the query's one-minute average is 2 s, and the scale-down
window and period are 20 s (`simulate` is given the same numbers). A pod turns Ready `START` seconds after it is
created (this plane has no kubelet: the stand-in below plays its part, with a pod IP of its own on loopback and
vLLM's queue gauge on the serving port, tests/cluster/vllm_metrics.py). The ScaledObject's Prometheus address is
the test's (no cluster DNS here).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

from contracts.pod_labels import vllm_pod_selector
from tests.cluster.api import Api
from tests.cluster.control_plane import ADMIN_TOKEN
from tests.cluster.crds import crds_for
from tests.cluster.environment import apply_all, object_name, rendered_objects, scale, wait_until
from tests.cluster.keda import KedaChain
from tests.cluster.nodes import gpu_node, mark_running, pods, register
from tests.cluster.vllm_metrics import PodMetrics
from tests.monitoring.prometheus import PrometheusServer, kubernetes_pods_job
from tests.synth import synthesize_shipped
from warmstart import autoscaling
from warmstart.autoscaling import EXTERNAL_METRIC, SIGNAL_WINDOW, scaling_policy
from warmstart.catalog import default_catalog
from warmstart.workload import VLLM_PORT
from warmstart_cli.status import autoscaler_status

pytestmark = pytest.mark.control_plane

MODEL = "llama-3-3-70b"
SYNC = 2  # --horizontal-pod-autoscaler-sync-period (tests/cluster/control_plane.py)
WINDOW = PERIOD = 20  # the scale-down stabilization window and policy period, compressed
START = 8  # seconds from a pod's creation to Ready
SIGNAL = "2s"  # the query's average, compressed from SIGNAL_WINDOW
# The metric's path beyond the controller's: a scrape (1 s), the average (2 s), KEDA's query.
LAG = 4
UPGRADED_REPLICAS = 3  # what the adapter-era HPA had scaled the model to
# (seconds, requests waiting over all pods): on target for 3 pods, a burst, then quiet.
LOAD = [(0, 15.0), (10, 40.0), (50, 5.0), (130, 5.0)]
HPA = f"/apis/autoscaling/v2/namespaces/{MODEL}/horizontalpodautoscalers/vllm"
SCALED_OBJECT = f"/apis/keda.sh/v1alpha1/namespaces/{MODEL}/scaledobjects/vllm"


class StandInKubelet:
    """Marks each of the model's pods Running and Ready START seconds after it appears, with a loopback IP of its
    own where its /metrics serves its share of the load; removes deleted ones."""

    def __init__(self, api: Api) -> None:
        self.api = api
        self.load = 0.0
        self.seen: dict[str, float] = {}
        self.served: dict[str, PodMetrics] = {}
        self.addresses = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for pod in pods(self.api, MODEL, vllm_pod_selector()):
                name = pod["metadata"]["name"]
                if pod["metadata"].get("deletionTimestamp"):
                    if name in self.served:
                        self.served.pop(name).stop()
                    self.api.request("DELETE", f"/api/v1/namespaces/{MODEL}/pods/{name}?gracePeriodSeconds=0")
                    continue
                first = self.seen.setdefault(name, time.monotonic())
                if pod["spec"].get("nodeName") and time.monotonic() - first >= START and name not in self.served:
                    self.addresses += 1
                    address = f"127.0.1.{self.addresses}"  # a pod IP of its own
                    self.served[name] = PodMetrics(address, VLLM_PORT, model=MODEL, waiting=self.share)
                    mark_running(self.api, pod, pod_ip=address)
            self.stop.wait(0.25)

    def share(self) -> float:
        """Each serving pod's queue: the load split over the pods serving."""
        return self.load / max(1, len(self.served))

    def ready(self) -> list[str]:
        return [p["metadata"]["name"] for p in pods(self.api, MODEL, vllm_pod_selector()) if _ready(p)]

    def close(self) -> None:
        self.stop.set()
        for served in self.served.values():
            served.stop()


def _ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def _adapter_era_hpa(policy) -> dict:
    """The HPA warmstart rendered for prometheus-adapter before KEDA (its Pods metric, the same name)."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "vllm", "namespace": MODEL},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm"},
            "minReplicas": policy.min_replicas,
            "maxReplicas": policy.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "vllm_num_requests_waiting"},
                        "target": {"type": "AverageValue", "averageValue": f"{policy.target:g}"},
                    },
                }
            ],
            "behavior": policy.behavior(),
        },
    }


@pytest.fixture(scope="module")
def chain(start_module_plane, tmp_path_factory):
    prod = synthesize_shipped("prod", tmp_path_factory.mktemp("cdk"))
    plane = start_module_plane(controllers=True)
    api = Api(plane)
    for index, zone in enumerate(("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1a")):
        register(api, *gpu_node(f"gpu-{index}", "p5.48xlarge", zone=zone, mode=prod.config.compute.mode))
    objects = rendered_objects(prod, tmp_path_factory.mktemp("dist"))
    scaled = [o for o in objects if o["kind"] == "ScaledObject" and o["metadata"]["namespace"] == MODEL]
    assert len(scaled) >= 1
    # The model as deployed before KEDA: everything but the ScaledObjects, and the adapter-era HPA at 3 pods.
    before = [o for o in objects if o["kind"] != "ScaledObject"]
    assert not apply_all(api, before, crds_for(prod.config), dry_run_first=False)
    policy = scaling_policy(next(m for m in prod.config.models if m.name == MODEL), prod.config, default_catalog())
    assert policy is not None
    assert api.apply(_adapter_era_hpa(policy)).ok
    scale(api, MODEL, UPGRADED_REPLICAS)
    kubelet = StandInKubelet(api)
    kubelet.load = LOAD[0][1]
    threading.Thread(target=kubelet.run, daemon=True).start()
    root = tmp_path_factory.mktemp("monitoring")
    job = kubernetes_pods_job(
        discovery={
            "kubernetes_sd_configs": [
                {
                    "role": "pod",
                    "api_server": plane.url,
                    "tls_config": {"ca_file": str(plane.ca)},
                    "authorization": {"credentials": ADMIN_TOKEN},
                    "namespaces": {"names": [MODEL]},
                }
            ]
        },
        scrape_interval="1s",
    )
    prometheus = PrometheusServer(root / "prometheus", config={"scrape_configs": [job]}).start()
    keda = KedaChain(plane, root).start(api)
    yield prod, api, scaled, kubelet, prometheus, keda, policy
    kubelet.close()
    keda.stop()
    prometheus.stop()


def _apply_scaled_object(api: Api, scaled: list[dict], prometheus: PrometheusServer) -> None:
    """The rendered ScaledObject, compressed: the test's Prometheus, the average and the scale-down window."""
    for obj in scaled:
        if obj["metadata"]["name"] != "vllm":
            continue
        obj = json.loads(json.dumps(obj))
        (trigger,) = obj["spec"]["triggers"]
        trigger["metadata"]["serverAddress"] = prometheus.url
        assert f"[{SIGNAL_WINDOW}]" in trigger["metadata"]["query"]
        trigger["metadata"]["query"] = trigger["metadata"]["query"].replace(f"[{SIGNAL_WINDOW}]", f"[{SIGNAL}]")
        down = obj["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
        down["stabilizationWindowSeconds"] = WINDOW
        for item in down["policies"]:
            item["periodSeconds"] = PERIOD
        answer = api.apply(obj)
        assert answer.ok, (object_name(obj), answer.message)


def test_keda_takes_over_the_adapter_era_hpa_and_keeps_its_replicas(chain):
    prod, api, scaled, kubelet, prometheus, keda, policy = chain
    wait_until(lambda: len(kubelet.served) == UPGRADED_REPLICAS, timeout=90, what="the upgraded replicas serving")
    # Prometheus finds them through pod discovery (its updates come in batches of 5 s) before KEDA reads them.
    waiting = f'vllm:num_requests_waiting{{namespace="{MODEL}"}}'
    wait_until(
        lambda: len(prometheus.query(waiting)) == UPGRADED_REPLICAS, timeout=60, what="Prometheus scraping the pods"
    )
    before = api.get(HPA)
    _apply_scaled_object(api, scaled, prometheus)

    def taken_over() -> bool:
        metrics = api.get(HPA)["spec"]["metrics"]
        return metrics[0]["type"] == "External"

    wait_until(taken_over, timeout=90, what=f"KEDA taking over the HPA:\n{keda.logs()}")
    after = api.get(HPA)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]  # the same object, not a new one
    assert after["spec"]["metrics"][0]["external"]["metric"]["name"] == EXTERNAL_METRIC
    assert after["spec"]["metrics"][0]["external"]["target"] == {"type": "AverageValue", "averageValue": "5"}
    owners = after["metadata"].get("ownerReferences", [])
    assert [(o["kind"], o["name"]) for o in owners] == [("ScaledObject", "vllm")]
    # On target (15 waiting over 3 pods, 5 each): the replicas the old HPA left stay.
    wait_until(
        lambda: any(
            c["type"] == "ScalingActive" and c["status"] == "True"
            for c in api.get(HPA).get("status", {}).get("conditions", [])
        ),
        timeout=60,
        what=f"the HPA reading KEDA's metric through Prometheus:\n{keda.logs()}",
    )
    assert api.get(f"/apis/apps/v1/namespaces/{MODEL}/deployments/vllm")["spec"]["replicas"] == UPGRADED_REPLICAS


def test_prometheus_scrapes_the_pods_through_their_rendered_annotations(chain):
    _, _, _, kubelet, prometheus, _, _ = chain
    targets = [t for t in prometheus.targets() if t["labels"].get("namespace") == MODEL]
    assert sorted(t["labels"]["pod"] for t in targets) == sorted(kubelet.served)
    for target in targets:
        assert target["health"] == "up", target
        assert target["scrapeUrl"].endswith(f":{VLLM_PORT}/metrics")
        assert target["labels"]["node"].startswith("gpu-")  # the chart's relabelling of the pod's node
    values = prometheus.query(f'sum(vllm:num_requests_waiting{{namespace="{MODEL}"}})')
    assert abs(float(values[0]["value"][1]) - LOAD[0][1]) < 1e-6


def test_the_real_controller_scales_on_kedas_metric_as_simulate_predicts(chain, monkeypatch):
    prod, api, _, kubelet, prometheus, keda, policy = chain
    started = time.monotonic()
    observed: list[tuple[float, int]] = []
    while (elapsed := time.monotonic() - started) <= LOAD[-1][0]:
        kubelet.load = next(v for at, v in reversed(LOAD) if at <= elapsed)
        observed.append((elapsed, api.get(f"/apis/apps/v1/namespaces/{MODEL}/deployments/vllm")["spec"]["replicas"]))
        time.sleep(0.5)

    monkeypatch.setattr(autoscaling, "SYNC_SECONDS", SYNC)
    monkeypatch.setattr(autoscaling, "SCALE_DOWN_PERIOD", PERIOD)
    compressed = dataclasses.replace(policy, scale_down_window=WINDOW)
    predicted = autoscaling.simulate(compressed, LOAD, start=START, initial=UPGRADED_REPLICAS)

    def changes(series: list[tuple[float, int]]) -> list[tuple[float, int]]:
        out = [series[0]]
        for at, count in series[1:]:
            if count != out[-1][1]:
                out.append((at, count))
        return out

    real = changes(observed)
    expected = changes([(step.t, step.replicas) for step in predicted])
    hpa = api.get(HPA)
    if [count for _, count in real] != [count for _, count in expected]:
        events = [(e["reason"], e["message"]) for e in api.get(f"/api/v1/namespaces/{MODEL}/events")["items"]]
        report = {"real": real, "expected": expected, "hpa": hpa["status"], "events": events[-20:]}
        pytest.fail(json.dumps(report, indent=1) + "\n" + keda.logs())
    # Each change within a few syncs of the prediction: the controller's sync phase and the metric's path
    # (a scrape, the average, KEDA's query, the aggregator) are not the simulation's.
    for (at, count), (predicted_at, _) in zip(real[1:], expected[1:], strict=True):
        assert abs(at - predicted_at) <= 3 * SYNC + 2 + LAG, (count, at, predicted_at, real, expected)
    reasons = {c["type"]: c.get("reason") for c in hpa["status"].get("conditions", [])}
    assert reasons.get("ScalingActive") == "ValidMetricFound", reasons
    # `warmstart status` reads KEDA's HPA as it is.
    line = str(autoscaler_status(next(m for m in prod.config.models if m.name == MODEL), {"items": [hpa]}))
    assert line.startswith(f"{hpa['status']['currentReplicas']}/{hpa['status']['desiredReplicas']} (")
    assert "num_requests_waiting" in line and "/5 per pod" in line
