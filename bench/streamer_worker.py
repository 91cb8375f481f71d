"""The pod's weight loading, in its own process: the Run:ai Model Streamer (vLLM's runai_streamer loader)
reading every tensor of the given safetensors files (s3:// URIs or local paths), with the environment the
pod would have. Prints bytes and seconds as JSON."""

from __future__ import annotations

import json
import sys
import time


def main(paths: list[str]) -> None:
    from runai_model_streamer import SafetensorsStreamer

    started = time.perf_counter()
    total = 0
    with SafetensorsStreamer() as streamer:
        streamer.stream_files(paths)
        for _, tensor in streamer.get_tensors():
            total += tensor.numel() * tensor.element_size()
    print(json.dumps({"bytes": total, "seconds": time.perf_counter() - started}))


if __name__ == "__main__":
    main(sys.argv[1:])
