"""A real Prometheus for the tiers (the shipped chart's version, tests/monitoring/build.py), started on loopback
with the chart's own `kubernetes-pods` job (tests/fixtures/prometheus/kubernetes-pods-job.yaml, its relabelling
as the chart writes it) and warmstart's rendered global settings and rules.

The job's service discovery is the one thing replaced where a tier has no API server: `pod_target` writes, into a
file_sd file, the `__meta_kubernetes_pod_*` labels Kubernetes' pod discovery gives a pod (its annotations, labels,
namespace, name, IP, node and phase; one target per pod where discovery gives one per declared port, which the
job's relabelling makes the same target), so the chart's relabelling runs on the rendered annotations and labels
unchanged. The control-plane tier uses the real pod discovery against its API server.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from tests.cluster.control_plane import free_port
from tests.monitoring.build import PROMETHEUS

JOB_FILE = Path(__file__).resolve().parents[1] / "fixtures" / "prometheus" / "kubernetes-pods-job.yaml"
ANSWER_LIMIT = 64 * 2**20  # bytes of one API answer


def kubernetes_pods_job(*, discovery: dict, scrape_interval: str | None = None) -> dict:
    """The chart's job with `discovery` (a `*_sd_configs` mapping) in place of its pod discovery."""
    (job,) = yaml.safe_load(JOB_FILE.read_text())
    del job["kubernetes_sd_configs"]
    job.update(discovery)
    if scrape_interval:
        job["scrape_interval"] = scrape_interval
    return job


def _sanitized(name: str) -> str:
    """Prometheus' strutil.SanitizeLabelName: every character outside [a-zA-Z0-9_] becomes '_'."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_target(
    *, namespace: str, name: str, ip: str, node: str, labels: dict[str, str], annotations: dict[str, str]
) -> dict:
    """A file_sd target group with the labels Kubernetes' pod discovery gives a Running pod."""
    meta = {
        "__address__": ip,
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": name,
        "__meta_kubernetes_pod_ip": ip,
        "__meta_kubernetes_pod_node_name": node,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_ready": "true",
    }
    for key, value in labels.items():
        meta[f"__meta_kubernetes_pod_label_{_sanitized(key)}"] = value
        meta[f"__meta_kubernetes_pod_labelpresent_{_sanitized(key)}"] = "true"
    for key, value in annotations.items():
        meta[f"__meta_kubernetes_pod_annotation_{_sanitized(key)}"] = value
        meta[f"__meta_kubernetes_pod_annotationpresent_{_sanitized(key)}"] = "true"
    return {"targets": [ip], "labels": meta}


class PodTargets:
    """The file_sd file of the pods a tier runs; Prometheus rereads it when it changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.groups: dict[str, dict] = {}
        self._write()

    def add(self, key: str, group: dict) -> None:
        self.groups[key] = group
        self._write()

    def remove(self, key: str) -> None:
        self.groups.pop(key, None)
        self._write()

    def _write(self) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(list(self.groups.values())))
        temporary.replace(self.path)  # whole: Prometheus never reads half a file


class PrometheusServer:
    def __init__(self, root: Path, *, config: dict, rules: dict | None = None) -> None:
        self.root = root
        self.config = config
        self.rules = rules
        self.port = 0
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> PrometheusServer:
        if not PROMETHEUS.built():
            raise RuntimeError(f"Prometheus is not built: make monitoring-chain (builds into {PROMETHEUS.folder})")
        self.root.mkdir(parents=True, exist_ok=True)
        config = dict(self.config)
        if self.rules is not None:
            (self.root / "rules.yml").write_text(yaml.safe_dump(self.rules, sort_keys=False))
            config["rule_files"] = [str(self.root / "rules.yml")]
        (self.root / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.port = free_port()
        log = open(self.root / "prometheus.log", "wb")
        self.process = subprocess.Popen(
            [
                str(PROMETHEUS.binary("prometheus")),
                f"--config.file={self.root / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with self._open("/-/ready") as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Prometheus did not start:\n{(self.root / 'prometheus.log').read_text()[-3000:]}")
            time.sleep(0.3)

    def _open(self, path: str, query: dict | None = None):
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, never a proxy
        return opener.open(url, timeout=30)

    def api(self, path: str, **query: str) -> dict:
        """An API answer's data; an error answer raises with Prometheus' own message."""
        try:
            with self._open(f"/api/v1/{path}", query) as answer:
                body = json.loads(answer.read(ANSWER_LIMIT))
        except urllib.error.HTTPError as error:
            body = json.loads(error.read(ANSWER_LIMIT))
        if body.get("status") != "success":
            raise AssertionError(f"{path} {query}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        return self.api("query", query=expr, **({"time": f"{at:.3f}"} if at is not None else {}))["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=f"{step:g}")["result"]

    def targets(self) -> list[dict]:
        return self.api("targets", state="active")["activeTargets"]

    def rule_groups(self) -> list[dict]:
        return self.api("rules")["groups"]

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
