"""The agent's metrics in the Prometheus exposition format (prometheus_client), on its own registry.

Names (docs/metrics.md): every pod start's phases and total, the outcomes and bytes of the caches' work, whether
the node holds each model's caches, and whether each of the agent's loops makes progress. Labels stay bounded:
models are the configured ones, phases, sources, outcomes and loops fixed sets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from contracts.connection_guard import ConnectionGuard, GuardedRequestHandler, GuardedThreadingMixIn
from contracts.pruner_report import PrunerReport
from contracts.start_record import StartTimeline
from node_agent.runtime.compile_cache import Status
from node_agent.runtime.compile_judgement import Cause
from node_agent.runtime.liveness import Liveness

# Seconds, from a warm start's few seconds to a cold large model's half hour.
PHASE_BUCKETS = (1, 2, 5, 10, 20, 30, 60, 120, 180, 300, 600, 900, 1200, 1800, 3600)
START_BUCKETS = (10, 30, 60, 90, 120, 180, 300, 450, 600, 900, 1200, 1800, 2700, 3600)
# Scrapes served at once (Prometheus scrapes a target once per interval; a burst of scrapers fits the listen
# backlog), and the seconds a scraper has for its request, then for the answer (a few KiB).
MAX_SCRAPES = 256
SCRAPE_SECONDS = 10
# What a start was, in the estimate's three cases (warmstart/estimate.py CASES): torch.compile ran (a miss, on any
# node), or its cache served a pod on a node created for it, or on a node that was there.
COLD, NEW_NODE, WARM = "cold", "new-node", "warm"
# What each outcome says about the node holding a model's cache (absent: says nothing, the gauge keeps its value).
COMPILE_HELD = {"restored": 1, "present": 1, "published": 1, "republished": 1, "exists": 1, "miss": 0, "failed": 0}
# busy: the copy is withdrawn while a pod reads it; new pods stream from S3 meanwhile.
# Every sync outcome (node_agent/runtime/weights.py SyncOutcome) says whether the node has a copy.
WEIGHTS_HELD = {"ready": 1, "downloaded": 1, "refused": 0, "stale": 0, "failed": 0, "busy": 0}
START_CASES = (("new", COLD), ("new", NEW_NODE), ("existing", COLD), ("existing", WARM))
RESTORE_OUTCOMES = (Status.RESTORED, Status.PRESENT, Status.BUSY, Status.MISS, Status.FAILED)
PUBLISH_OUTCOMES = (Status.PUBLISHED, Status.REPUBLISHED, Status.EXISTS, Status.LOST_RACE, Status.EMPTY, Status.FAILED)


def start_case(timeline: StartTimeline) -> str:
    if timeline.compile_cache == "miss":
        return COLD
    return NEW_NODE if timeline.new_node else WARM


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
            # not "node": Prometheus's endpoints jobs set that target label. case: start_case.
            ["model", "node_kind", "case"],
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
            "warmstart_weights_syncs", "Node copy syncs with S3", ["model", "outcome"], registry=self.registry
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
        self.cache_held = Gauge(
            "warmstart_node_cache_ready",
            "1 while this node holds the model's cache (compile: restored, present or published; weights: a complete "
            "node copy), 0 after an outcome that leaves it without",
            ["model", "cache"],
            registry=self.registry,
        )
        self.pruner = PrunerLastRun()
        self.registry.register(self.pruner)
        self.copies = NodeCopyWait()
        self.registry.register(self.copies)
        self._loops: LoopProgress | None = None

    def know_models(self, *, starts: list[str], compile: list[str], weights: list[str]) -> None:
        """Every counter series a configured model can have, at 0, from the agent's start: Prometheus' increase()
        sees an event only against an earlier sample, so a series born at 1 (a model's first cold start, its first
        failed restore) would show no increase at all."""
        for model in starts:
            for outcome in ("ready", "not-ready"):
                self.starts.labels(model, outcome)
            for node_kind, case in START_CASES:
                self.start_seconds.labels(model, node_kind, case)
        for model in compile:
            self.compile_use.labels(model, "hit", Cause.LOADED)
            for cause in (Cause.LOAD_FAILURE, Cause.HASH_CHANGED, Cause.NOT_RESTORED, Cause.COMPILED):
                self.compile_use.labels(model, "miss", cause)
            for outcome in RESTORE_OUTCOMES:
                self.restores.labels(model, outcome)
            for outcome in PUBLISH_OUTCOMES:
                self.publishes.labels(model, outcome)
            for direction in ("restored", "published"):
                self.cache_bytes.labels(model, direction)
        for model in weights:
            for outcome in WEIGHTS_HELD:
                self.weights.labels(model, outcome)
            self.weights_bytes.labels(model)
            # Without a copy until a sync says otherwise: a first download that is slow or hangs shows as it goes.
            self.copies.synced(model, held=False)

    def watch_loops(self, liveness: Liveness) -> None:
        """Each loop's progress, read at each scrape (node_agent/runtime/liveness.py); one agent's loops."""
        if self._loops is None:
            self._loops = LoopProgress(liveness)
            self.registry.register(self._loops)

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
            node_kind = "new" if timeline.new_node else "existing"
            self.start_seconds.labels(model, node_kind, start_case(timeline)).observe(timeline.total)

    def restored(self, model: str, outcome: str, size: int) -> None:
        self.restores.labels(model, outcome).inc()
        self._held(model, "compile", COMPILE_HELD.get(outcome))
        if size:
            self.cache_bytes.labels(model, "restored").inc(size)

    def published(self, model: str, outcome: str, size: int) -> None:
        self.publishes.labels(model, outcome).inc()
        self._held(model, "compile", COMPILE_HELD.get(outcome))
        if size:
            self.cache_bytes.labels(model, "published").inc(size)

    def judged(self, model: str, outcome: str, cause: str) -> None:
        if outcome in ("hit", "miss"):
            self.compile_use.labels(model, outcome, cause).inc()

    def weights_synced(self, model: str, outcome: str, size: int) -> None:
        self.weights.labels(model, outcome).inc()
        held = WEIGHTS_HELD.get(outcome)
        self._held(model, "weights", held)
        if held is not None:
            self.copies.synced(model, held=bool(held))
        if size:
            self.weights_bytes.labels(model).inc(size)

    def _held(self, model: str, cache: str, value: int | None) -> None:
        if value is not None:
            self.cache_held.labels(model, cache).set(value)

    def pruner_reported(self, report: PrunerReport) -> None:
        self.pruner.report = report

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


class NodeCopyWait(Collector):
    """`warmstart_node_copy_missing_seconds{model}`: seconds the node has been without a complete copy of the
    model's weights (from the agent's start, or the first sync that found none), 0 once it has one; read at each
    scrape, so a download of many minutes shows as it goes."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._missing_since: dict[str, float | None] = {}
        self._lock = threading.Lock()

    def synced(self, model: str, *, held: bool) -> None:
        with self._lock:
            if held:
                self._missing_since[model] = None
            elif self._missing_since.get(model) is None:
                self._missing_since[model] = self.clock()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "warmstart_node_copy_missing_seconds",
            "Seconds this node has been without a complete copy of the model's weights (0: it has one)",
            labels=["model"],
        )
        now = self.clock()
        with self._lock:
            for model, since in sorted(self._missing_since.items()):
                family.add_metric([model], 0.0 if since is None else now - since)
        yield family


class PrunerLastRun(Collector):
    """`warmstart_pruner_last_run_timestamp_seconds` and `warmstart_pruner_last_run_ok` from the pruner's latest
    report (contracts/pruner_report.py); nothing before the first (a gauge at 0 would read as a failed run)."""

    def __init__(self) -> None:
        self.report: PrunerReport | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        report = self.report
        if report is None:
            return
        yield GaugeMetricFamily(
            "warmstart_pruner_last_run_timestamp_seconds",
            "When the compile-cache pruner's last run ended (its report in the bucket), epoch seconds",
            value=report.finished_at,
        )
        yield GaugeMetricFamily(
            "warmstart_pruner_last_run_ok",
            "1 when the pruner's last run pruned, 0 when it failed or could not read the active set",
            value=1.0 if report.ok else 0.0,
        )


class LoopProgress(Collector):
    """`warmstart_agent_loop_seconds_since_progress{loop}` and `warmstart_agent_loop_stalled{loop}` (1 past the
    loop's bound: the liveness probe then fails and kubelet restarts the agent)."""

    def __init__(self, liveness: Liveness) -> None:
        self.liveness = liveness

    def collect(self) -> Iterator[GaugeMetricFamily]:
        since = GaugeMetricFamily(
            "warmstart_agent_loop_seconds_since_progress",
            "Seconds since the agent's loop last made progress (a round ended, or long work beat)",
            labels=["loop"],
        )
        stalled = GaugeMetricFamily(
            "warmstart_agent_loop_stalled",
            "1 while the loop has made no progress for longer than its period and the stall bound",
            labels=["loop"],
        )
        for loop, (seconds, bound) in sorted(self.liveness.progress().items()):
            since.add_metric([loop], seconds)
            stalled.add_metric([loop], 1.0 if seconds > bound else 0.0)
        yield since
        yield stalled


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
