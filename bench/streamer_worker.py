"""The pod's weight loading, in its own process: the Run:ai Model Streamer (vLLM's runai_streamer loader)
reading every tensor of the given safetensors files (s3:// URIs or local paths), with the environment the
pod would have. Prints the bytes, and the seconds and CPU seconds of the read (imports before it left out), as JSON.

`--plugin <s3 prefix>`: the files warmstart's vLLM plugin has the loader stream for that model URI
(model_workload/runtime/node_copy_loader.py, from WARMSTART_NODE_COPY_DIR/_MODEL as the entry step sets them),
listed inside the timed span as the loader lists them."""

from __future__ import annotations

import json
import sys
import time


def main(paths: list[str]) -> None:
    from runai_model_streamer import SafetensorsStreamer

    started, cpu_started = time.perf_counter(), time.process_time()
    if paths[0] == "--plugin":
        import os

        from model_workload.runtime.node_copy_loader import node_copy_files

        listed = node_copy_files(paths[1], os.environ)
        if not listed:
            raise SystemExit(f"the plugin lists no node-copy files for {paths[1]}")
        paths = listed
    total = 0
    with SafetensorsStreamer() as streamer:
        streamer.stream_files(paths)
        for _, tensor in streamer.get_tensors():
            total += tensor.numel() * tensor.element_size()
    # The CPU of the read alone (every thread of the process, the streamer's own included), start-up left out.
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    print(json.dumps({"bytes": total, "seconds": seconds, "cpu_seconds": cpu_seconds}))


if __name__ == "__main__":
    main(sys.argv[1:])
