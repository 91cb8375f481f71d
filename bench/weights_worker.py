"""One weights prefetch as the node agent does it, in its own process (so its CPU and memory are its own).

Reports the sync's own duration to the folder's publication (the agent publishes a verified copy from the page
cache, then puts it on disk) and to the end (the copy durable), and the moment the folder was published
(time.monotonic(), one clock for every process on the machine): the agent is a long-running daemon, so Python's
start-up and imports (about 0.4 s here) are paid once per node, and it never exits after a download, so the
interpreter's teardown (about 0.1 s) is no part of what a pod waits for.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from node_agent.runtime.collector import built_then_frozen  # noqa: E402
from node_agent.runtime.log import EventLog  # noqa: E402
from node_agent.runtime.s3.client import s3_client
from node_agent.runtime.s3.weights_download import WeightsSource
from node_agent.runtime.weights import NodeCopies, WeightsLayout  # noqa: E402


def main(
    endpoint: str,
    access_key: str,
    secret_key: str,
    bucket: str,
    prefix: str,
    root: str,
    threads: int,
    part_mib: int,
    buffer_bytes: int,
    pause_file: str | None = None,
) -> None:
    # Built as the agent builds its clients (node_agent/runtime/__main__.py): the collector off, then frozen.
    with built_then_frozen():
        # The agent's own client (its timeouts, retries and pool), pointed at the local server.
        client = s3_client(
            "us-east-1",
            connections=2 * threads,
            endpoint_url=endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
        )
        source = WeightsSource(client, bucket, part_bytes=part_mib * 2**20, threads=threads, buffer_bytes=buffer_bytes)
        cache = NodeCopies(
            source=source,
            layout=WeightsLayout(Path(root)),
            clock=time.time,
            log=EventLog(time.time, stream=open("/dev/null", "w")),
            reserve_bytes=0,
        )
    started, started_monotonic = time.perf_counter(), time.monotonic()
    # The agent holds back while a pod of the node streams from S3 (it reads the pod's record before each
    # part); here the benchmark's pod announces itself with a file.
    pause = (lambda: Path(pause_file).exists()) if pause_file else None
    outcome = cache.sync("bench", f"s3://{bucket}/{prefix}", prefix, lambda m, k: False, pause=pause)
    durable_s = time.perf_counter() - started
    published_s = outcome.published_seconds if outcome.published_seconds is not None else durable_s
    cpu = time.process_time()
    print(
        json.dumps(
            {
                "status": outcome.status,
                "reason": outcome.reason,
                "bytes": outcome.bytes,
                "sync_s": published_s,
                "durable_s": durable_s,
                "published_monotonic": started_monotonic + published_s,
                "process_cpu_s": cpu,
                "folder": str(cache.layout.key_dir("bench", outcome.key)),
            }
        )
    )


if __name__ == "__main__" and sys.argv[1:] == ["--imports-only"]:
    pass  # the modules above read from disk into the page cache, as a node's freshly pulled image has them
elif __name__ == "__main__":
    main(*sys.argv[1:7], int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9]), *sys.argv[10:11])
