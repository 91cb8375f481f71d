"""Entry point of the node agent (DaemonSet): wires real clients, then runs NodeAgent until stopped."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import boto3
from botocore.config import Config

from agent.fs import remove_tree
from agent.kube import InClusterTransport, KubeApi
from agent.layout import NodeCacheLayout
from agent.log import EventLog
from agent.node_agent import NodeAgent
from agent.pod_records import PodRecords
from agent.s3_store import CacheStore, WeightsSource
from agent.storage import check_host_folder
from agent.weights import WeightsCache, WeightsLayout
from warmstart.agent_settings import AgentSettings

CLEANUP_SECONDS = 300


def main() -> None:
    settings = AgentSettings.model_validate(json.loads(Path(os.environ["WARMSTART_AGENT_SETTINGS"]).read_text()))
    client = boto3.client(
        "s3",
        region_name=settings.region,
        config=Config(
            retries={"mode": "adaptive", "max_attempts": 5}, max_pool_connections=4 * settings.download_threads
        ),
    )
    log = EventLog(time.time)
    layout = NodeCacheLayout(Path(settings.cache_root))
    remove_tree(layout.state / "tmp")  # whatever a crash left half-done is never used
    weights = None
    if settings.weights_models:
        weights = WeightsCache(
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
        node=os.environ["NODE_NAME"],
        store=CacheStore(
            client, settings.bucket, part_bytes=settings.download_part_bytes, threads=settings.download_threads
        ),
        kube=KubeApi(InClusterTransport(os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])),
        layout=layout,
        clock=time.time,
        log=log,
        weights=weights,
        records=PodRecords(Path(settings.pod_records)),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # /tmp outlives a container restart (an emptyDir): a beat from before must not pass the startup probe.
    heartbeat = Path(os.environ.get("WARMSTART_HEARTBEAT", "/tmp/warmstart-agent-alive"))
    heartbeat.unlink(missing_ok=True)
    agent.start()

    def every(seconds: float, action, *, beat: bool = False) -> threading.Thread:
        def loop() -> None:
            while not stop.is_set():
                try:
                    action()
                except Exception as error:  # keep the loop alive; the next round retries
                    log.event("loop-error", action=action.__name__, reason=f"{type(error).__name__}: {error}")
                if beat:  # the liveness probe restarts an agent whose main loop stopped turning
                    heartbeat.touch()
                stop.wait(seconds)

        thread = threading.Thread(target=loop, name=action.__name__, daemon=True)
        thread.start()
        return thread

    # Weights downloads take minutes: their own thread, so compile-cache publishing never waits for them, and
    # a second one keeps the other models' pointers confirmed meanwhile.
    threads = [every(settings.poll_seconds, agent.tick, beat=True), every(CLEANUP_SECONDS, agent.cleanup)]
    if weights is not None:
        threads.append(every(settings.weights_poll_seconds, agent.weights_tick))
        threads.append(every(settings.weights_poll_seconds, agent.weights_confirm_tick))
    stop.wait()
    for thread in threads:
        thread.join(timeout=30)
    log.summary()


if __name__ == "__main__":
    main()
