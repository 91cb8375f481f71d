"""A serving pod's /metrics in the control-plane tier, where no vLLM runs: vLLM's queue gauge under vLLM's name and
labels (`vllm:num_requests_waiting{model_name, engine}`, as the engine tier reads them from the real vLLM), served
on the pod's IP and the serving port its scrape annotations name, so the real Prometheus finds it through its pod
discovery and the chart's relabelling."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class PodMetrics:
    def __init__(self, address: str, port: int, *, model: str, waiting: Callable[[], float]) -> None:
        served = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = served.exposition().encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.model = model
        self.waiting = waiting
        self.server = ThreadingHTTPServer((address, port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def exposition(self) -> str:
        labels = f'engine="0",model_name="{self.model}"'
        return (
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{labels}}} {self.waiting()}\n"
        )

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
