"""Entry point of the node agent (DaemonSet): wires real clients, then runs NodeAgent until stopped."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from contracts.agent_settings import AgentSettings
from node_agent.runtime.agent import NodeAgent
from node_agent.runtime.collector import built_then_frozen
from node_agent.runtime.fs import keep_root_owned, raise_open_files_limit, remove_tree
from node_agent.runtime.kube import InClusterTransport, KubeApi
from node_agent.runtime.layout import NodeCacheLayout
from node_agent.runtime.liveness import Liveness, keep_heartbeat
from node_agent.runtime.log import EventLog
from node_agent.runtime.metrics import AgentMetrics
from node_agent.runtime.pod_records import PodRecords
from node_agent.runtime.s3.client import s3_client
from node_agent.runtime.s3.compile_store import CacheStore
from node_agent.runtime.s3.weights_download import WeightsSource
from node_agent.runtime.start_tracker import StartTracker
from node_agent.runtime.storage import check_host_folder
from node_agent.runtime.weights import NodeCopies, WeightsLayout

CLEANUP_SECONDS = 300
PRUNER_REPORT_SECONDS = 300  # the pruner runs daily by default: a report read every 5 minutes is fresh enough
HEARTBEAT = "/tmp/warmstart-agent-alive"
READY = "/tmp/warmstart-agent-ready"


def main() -> None:
    with built_then_frozen():  # the long-lived objects: no collection walks them (collector.py)
        settings = AgentSettings.model_validate(json.loads(Path(os.environ["WARMSTART_AGENT_SETTINGS"]).read_text()))
        log = EventLog(time.time)
        before, after = raise_open_files_limit()
        log.event("open-files-limit", before=before, after=after)
        agent, weights = build(settings, log)
    heartbeat = Path(os.environ.get("WARMSTART_HEARTBEAT", HEARTBEAT))
    ready = Path(os.environ.get("WARMSTART_READY", READY))
    # /tmp outlives a container restart (an emptyDir): marks from before must not pass the probes.
    heartbeat.unlink(missing_ok=True)
    ready.unlink(missing_ok=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    agent.metrics.serve(settings.metrics_port)  # before the restores, so that their outcomes are scraped
    agent.start()  # restores every model's compile cache (up to the startup probe's 30 minutes)
    ready.touch()  # the readiness probe: start-up is done (and the main loop beats)
    run(agent, weights, settings, stop=stop, heartbeat=heartbeat, log=log)
    log.summary()


def build(settings: AgentSettings, log: EventLog) -> tuple[NodeAgent, NodeCopies | None]:
    """The agent with its real clients (S3, the Kubernetes API) and the node's folders, crash leftovers removed."""
    client = s3_client(settings.region, connections=4 * settings.download_threads)
    layout = NodeCacheLayout(Path(settings.cache_root))
    node = os.environ["NODE_NAME"]
    kube = KubeApi(InClusterTransport(os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]))
    metrics = AgentMetrics()
    remove_tree(layout.state / "tmp")  # whatever a crash left half-done is never used
    roots = [Path(settings.cache_root), Path(settings.weights_root), Path(settings.pod_records)]
    for folder, outcome in keep_root_owned(roots).items():  # root:root, not group- or world-writable
        log.event("folder-permissions", folder=folder, outcome=outcome)
    weights = None
    if settings.weights_models:
        weights = NodeCopies(
            source=WeightsSource(
                client,
                settings.model_bucket,
                part_bytes=settings.download_part_bytes,
                threads=settings.download_threads,
                buffer_bytes=settings.download_buffer_bytes,
            ),
            layout=WeightsLayout(Path(settings.weights_root)),
            clock=time.time,
            log=log,
            storage_problem=lambda: check_host_folder(
                container_path=settings.weights_root,
                host_path=settings.weights_host_path,
                nvme_mount=settings.nvme_mount,
            ),
        )
        weights.clean_temp()
    agent = NodeAgent(
        settings=settings,
        node=node,
        liveness=Liveness(),
        store=CacheStore(
            client, settings.bucket, part_bytes=settings.download_part_bytes, threads=settings.download_threads
        ),
        kube=kube,
        layout=layout,
        clock=time.time,
        log=log,
        weights=weights,
        records=PodRecords(Path(settings.pod_records)),
        metrics=metrics,
        starts=StartTracker(
            kube=kube, node=node, pod_logs=Path(settings.pod_logs), layout=layout, metrics=metrics, log=log
        ),
    )
    return agent, weights


def run(
    agent: NodeAgent,
    weights: NodeCopies | None,
    settings: AgentSettings,
    *,
    stop: threading.Event,
    heartbeat: Path,
    log: EventLog,
) -> None:
    """The agent's loops until `stop`: compile caches, cleanup, and the weights downloads and pointer
    confirmations in threads of their own (a download takes minutes; publishing never waits for it). The heartbeat
    is kept while every loop makes progress (node_agent/runtime/liveness.py)."""
    liveness = agent.liveness
    loops = [
        repeat(agent.tick, settings.poll_seconds, stop=stop, log=log, liveness=liveness),
        repeat(agent.cleanup, CLEANUP_SECONDS, stop=stop, log=log, liveness=liveness),
    ]
    if settings.compile_models:  # the pruner prunes the compile cache: its report is read where it is on
        loops.append(repeat(agent.pruner_report_tick, PRUNER_REPORT_SECONDS, stop=stop, log=log, liveness=liveness))
    if weights is not None:
        loops.append(repeat(agent.weights_tick, settings.weights_poll_seconds, stop=stop, log=log, liveness=liveness))
        loops.append(
            repeat(agent.weights_confirm_tick, settings.weights_poll_seconds, stop=stop, log=log, liveness=liveness)
        )

    def stuck(loops: list[str]) -> None:
        log.event("loop-stuck", loops=loops)

    keep_heartbeat(liveness, heartbeat, stop=stop, on_stuck=stuck)
    stop.wait()
    for thread in loops:
        thread.join(timeout=30)


def repeat(
    action: Callable[[], object], seconds: float, *, stop: threading.Event, log: EventLog, liveness: Liveness
) -> threading.Thread:
    """Runs `action` every `seconds` in a thread until `stop`; an error is logged and the next round retries. The
    loop beats (under the action's name) when a round ends without an error; long actions beat as they go. A loop
    that fails every round stops beating, and the liveness probe restarts the agent."""
    name = getattr(action, "__name__", "loop")
    liveness.register(name, seconds)

    def loop() -> None:
        while not stop.is_set():
            try:
                action()
                liveness.beat(name)  # a round that ended: progress (one that raises every time is no progress)
            except Exception as error:
                log.event("loop-error", action=name, reason=f"{type(error).__name__}: {error}")
            stop.wait(seconds)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":
    main()
