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

from agent.kube import InClusterTransport, KubeApi
from agent.layout import NodeCacheLayout
from agent.log import EventLog
from agent.node_agent import NodeAgent
from agent.s3_store import CacheStore
from warmstart.agent_settings import AgentSettings


def main() -> None:
    settings = AgentSettings.model_validate(json.loads(Path(os.environ["WARMSTART_AGENT_SETTINGS"]).read_text()))
    client = boto3.client(
        "s3", region_name=settings.region, config=Config(retries={"mode": "adaptive", "max_attempts": 5})
    )
    log = EventLog(time.time)
    agent = NodeAgent(
        settings=settings,
        node=os.environ["NODE_NAME"],
        store=CacheStore(client, settings.bucket, part_bytes=settings.download_part_bytes, threads=settings.download_threads),
        kube=KubeApi(InClusterTransport(os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"])),
        layout=NodeCacheLayout(Path(settings.cache_root)),
        clock=time.time,
        log=log,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    agent.start()
    while not stop.wait(settings.poll_seconds):
        agent.tick()
    log.summary()


if __name__ == "__main__":
    main()
