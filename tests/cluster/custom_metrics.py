"""A stand-in for prometheus-adapter: the custom metrics API (custom.metrics.k8s.io/v1beta2) for one Pods metric,
registered with the test API server as an APIService, so the real HPA controller reads it through the aggregation
layer as it reads the adapter's on EKS.

The load is a recorded curve ((seconds, total) points, each held until the next): every Ready pod of the model
reports an equal share, as each vLLM pod reports its own queue; a pod that is not Ready reports nothing (vLLM is not
serving yet, so Prometheus has no series for it). The API server reaches the stand-in by an EndpointSlice address,
which may not be a loopback one: it listens on this machine's own address.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.cluster.api import Api
from tests.cluster.control_plane import free_port, machine_address

GROUP, VERSION = "custom.metrics.k8s.io", "v1beta2"
SERVICE = "custom-metrics-stand-in"


class CustomMetrics:
    def __init__(self, api: Api, *, metric: str, ready_pods: Callable[[str, str], list[str]], folder: Path) -> None:
        self.api = api
        self.metric = metric
        self.ready_pods = ready_pods  # (namespace, label selector) -> names of the Ready pods
        self.load: Callable[[], float] = lambda: 0.0
        self.requests: list[str] = []
        self.address = machine_address()
        self.port = free_port()
        self._folder = folder
        self._server: ThreadingHTTPServer | None = None

    def answer(self, path: str, query: dict) -> tuple[int, dict]:
        parts = [urllib.parse.unquote(part) for part in path.strip("/").split("/")]  # the controller sends %2A
        if parts == ["apis", GROUP, VERSION]:
            resource = {"name": f"pods/{self.metric}", "singularName": "", "namespaced": True,
                        "kind": "MetricValueList", "verbs": ["get"]}  # fmt: skip
            return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{GROUP}/{VERSION}",
                         "resources": [resource]}  # fmt: skip
        # /apis/custom.metrics.k8s.io/v1beta2/namespaces/<ns>/pods/*/<metric>
        if len(parts) == 8 and parts[3] == "namespaces" and parts[5] == "pods" and parts[7] == self.metric:
            namespace, selector = parts[4], query.get("labelSelector", "")
            names = [n for n in self.ready_pods(namespace, selector) if parts[6] in ("*", n)]
            share = self.load() / len(names) if names else 0.0
            now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            items = [
                {
                    "describedObject": {"kind": "Pod", "namespace": namespace, "name": name, "apiVersion": "/v1"},
                    "metric": {"name": self.metric},
                    "timestamp": now,
                    "windowSeconds": 60,
                    "value": f"{round(share * 1000)}m",
                }
                for name in names
            ]
            return 200, {"kind": "MetricValueList", "apiVersion": f"{GROUP}/{VERSION}", "metadata": {}, "items": items}
        return 404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404, "message": path}

    def start(self) -> CustomMetrics:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                parsed = urllib.parse.urlparse(self.path)
                query = {k: v[0] for k, v in urllib.parse.parse_qs(parsed.query).items()}
                stand_in.requests.append(parsed.path)
                status, body = stand_in.answer(parsed.path, query)
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        key, cert = self._folder / "metrics.key", self._folder / "metrics.crt"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=custom-metrics",
             "-addext", f"subjectAltName=IP:{self.address}", "-keyout", str(key), "-out", str(cert)],
            check=True, capture_output=True,
        )  # fmt: skip
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer((self.address, self.port), Handler)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def register(self, namespace: str) -> None:
        """A Service without a selector, its EndpointSlice (this machine's address) and the APIService."""
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": SERVICE, "namespace": namespace},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": self.port, "protocol": "TCP"}]},
        }
        slice_ = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": SERVICE, "namespace": namespace, "labels": {"kubernetes.io/service-name": SERVICE}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": self.port, "protocol": "TCP"}],
        }
        api_service = {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{VERSION}.{GROUP}"},
            "spec": {
                "group": GROUP,
                "version": VERSION,
                "service": {"namespace": namespace, "name": SERVICE, "port": 443},
                "insecureSkipTLSVerify": True,
                "groupPriorityMinimum": 100,
                "versionPriority": 200,
            },
        }
        for obj in (service, slice_, api_service):
            answer = self.api.apply(obj)
            assert answer.ok, answer.message

    def stop(self) -> None:
        if self._server:
            self._server.shutdown()
