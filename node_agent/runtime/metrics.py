"""The agent's metrics in the Prometheus exposition format (prometheus_client), on its own registry.

Names (docs/metrics.md): every pod start's phases and total, and the outcomes and bytes of the caches' work.
Labels stay bounded: models are the configured ones, phases, sources and outcomes fixed sets.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, Counter, Histogram, make_wsgi_app
from prometheus_client.exposition import generate_latest

from contracts.connection_guard import ConnectionGuard, GuardedRequestHandler, GuardedThreadingMixIn
from contracts.start_record import StartTimeline

# Seconds, from a warm start's few seconds to a cold large model's half hour.
PHASE_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 180, 300, 600, 900, 1200, 1800, 3600)
START_BUCKETS = (10, 30, 60, 90, 120, 180, 300, 450, 600, 900, 1200, 1800, 2700, 3600)
# Scrapes served at once (Prometheus scrapes a target once per interval; a burst of scrapers fits the listen
# backlog), and the seconds a scraper has for its request, then for the answer (a few KiB).
MAX_SCRAPES = 256
SCRAPE_SECONDS = 10


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.phase_seconds = Histogram(
            "warmstart_pod_start_phase_seconds",
            "Seconds a vLLM pod start spent in each phase",
            ["model", "phase", "source"],
            buckets=PHASE_BUCKETS,
            registry=self.registry,
        )
        self.start_seconds = Histogram(
            "warmstart_pod_start_seconds",
            "Seconds from a vLLM pod's creation to Ready",
            ["model", "node_kind"],  # not "node": Prometheus's endpoints jobs set that target label
            buckets=START_BUCKETS,
            registry=self.registry,
        )
        self.starts = Counter(
            "warmstart_pod_starts", "vLLM pod starts timed on this node", ["model", "outcome"], registry=self.registry
        )
        self.restores = Counter(
            "warmstart_compile_cache_restores", "Compile-cache restores", ["model", "outcome"], registry=self.registry
        )
        self.publishes = Counter(
            "warmstart_compile_cache_publishes", "Compile-cache publishes", ["model", "outcome"], registry=self.registry
        )
        self.compile_use = Counter(
            "warmstart_compile_cache_use",
            "vLLM pod starts that used a compile cache (hit) or compiled (miss), as the agent judged them (vLLM's log "
            "lines first); cause: loaded, load-failure, hash-changed, not-restored or compiled",
            ["model", "outcome", "cause"],
            registry=self.registry,
        )
        self.engine_cache_use = Counter(
            "warmstart_engine_cache_use",
            "vLLM pod starts by what they did with each of the engine's other caches (DeepGEMM, FlashInfer, the "
            "startup plan, ...); use: loaded, written, present or refused",
            ["model", "cache", "use"],
            registry=self.registry,
        )
        self.cache_bytes = Counter(
            "warmstart_compile_cache_bytes",
            "Compile-cache archive bytes moved",
            ["model", "direction"],
            registry=self.registry,
        )
        self.weights = Counter(
            "warmstart_weights_syncs", "Weights copy syncs with S3", ["model", "outcome"], registry=self.registry
        )
        self.refusals = Counter(
            "warmstart_untrusted_inputs_refused",
            "Files and objects the agent refused to use (a pod's record, an S3 manifest, ...), by where they came from",
            ["source"],
            registry=self.registry,
        )
        self.weights_bytes = Counter(
            "warmstart_weights_downloaded_bytes",
            "Weights bytes downloaded to the node copy",
            ["model"],
            registry=self.registry,
        )

    def observe_start(self, timeline: StartTimeline) -> None:
        model = timeline.model or "unknown"
        self.starts.labels(model, timeline.outcome).inc()
        sources = {
            "node": "new-node" if timeline.new_node else "existing-node",
            "image": timeline.image or "unknown",
            "restore": timeline.restore or "none",
            "weights": timeline.weights_source or "s3",
            "compile": timeline.compile_cache or "unknown",
        }
        for phase, seconds in timeline.phases.items():
            if seconds is not None:
                self.phase_seconds.labels(model, phase, sources.get(phase, "-")).observe(seconds)
        for cache, use in timeline.engine_caches.items():
            # Bounded: names are the inventory's (contracts/engine_caches.py) or "unlisted", uses a fixed set.
            self.engine_cache_use.labels(model, cache, use).inc()
        if timeline.total is not None:
            self.start_seconds.labels(model, "new" if timeline.new_node else "existing").observe(timeline.total)

    def restored(self, model: str, outcome: str, size: int) -> None:
        self.restores.labels(model, outcome).inc()
        if size:
            self.cache_bytes.labels(model, "restored").inc(size)

    def published(self, model: str, outcome: str, size: int) -> None:
        self.publishes.labels(model, outcome).inc()
        if size:
            self.cache_bytes.labels(model, "published").inc(size)

    def judged(self, model: str, outcome: str, cause: str) -> None:
        if outcome in ("hit", "miss"):
            self.compile_use.labels(model, outcome, cause).inc()

    def weights_synced(self, model: str, outcome: str, size: int) -> None:
        self.weights.labels(model, outcome).inc()
        if size:
            self.weights_bytes.labels(model).inc(size)

    def refused(self, source: str) -> None:
        self.refusals.labels(source).inc()

    def exposition(self) -> str:
        return generate_latest(self.registry).decode()

    def serve(self, port: int, address: str = "0.0.0.0", *, max_connections: int = MAX_SCRAPES) -> WSGIServer:
        """The /metrics endpoint, in a daemon thread of its own, a thread per scrape up to `max_connections`
        (past that 503, or the slot of the connection that has waited longest for its request). The listen backlog
        holds a burst of scrapes (the socketserver default of 5 refused 2 of 1,000 concurrent ones); a scraper has
        SCRAPE_SECONDS for its request and as much again for the answer, however it sends or reads."""
        server = _MetricsServer((address, port), _QuietHandler, guard=ConnectionGuard(max_connections))
        server.set_app(make_wsgi_app(self.registry))
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
        return server


class _MetricsServer(GuardedThreadingMixIn, WSGIServer):
    request_queue_size = 256
    head_seconds = SCRAPE_SECONDS
    busy_reply = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"

    def __init__(self, address: tuple[str, int], handler: type, *, guard: ConnectionGuard) -> None:
        self.guard = guard
        super().__init__(address, handler)


class _QuietHandler(GuardedRequestHandler, WSGIRequestHandler):
    timeout = SCRAPE_SECONDS  # seconds a connection may stay silent
    serving_seconds = SCRAPE_SECONDS

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass
