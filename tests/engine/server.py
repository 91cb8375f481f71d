"""vLLM's server in a pod's main container, started by the kubelet stand-in: its output lines with arrival times
(and, as kubelet keeps them, a CRI log file the node agent reads), the first completion it answers, its stop."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

# A prompt of the engine tier's tiny model (tests/engine/tiny_model.py's tokenizer gives it real tokens).
PROMPT = "warmstart restores the compile cache"
# What one completion may take once the server is up (a CPU forward pass of a tiny model takes well under this).
REQUEST_SECONDS = 30


class ServerRun:
    def __init__(self, process) -> None:
        self.process = process
        self.started = time.monotonic()
        self.lines: list[tuple[float, str]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self._on_stop: list[Callable[[], None]] = []

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Called when the server is stopped (before the process is)."""
        self._on_stop.append(callback)

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def tail(self, count: int = 60) -> str:
        return "\n".join(text for _, text in self.lines[-count:])

    def first_completion(
        self, model: str, port: int, timeout: float, prompt: str | list[int] = PROMPT
    ) -> tuple[float, dict]:
        """Seconds from the container's start to vLLM's first answered completion, and the answer. `prompt`: text,
        or token ids for a model without a tokenizer."""
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0}).encode()
        while True:
            if self.process.poll() is not None:
                self.reader.join(timeout=5)
                raise RuntimeError(f"vLLM exited {self.process.returncode}:\n{self.tail()}")
            if time.monotonic() - self.started > timeout:
                raise TimeoutError(f"no completion within {timeout} s:\n{self.tail()}")
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=REQUEST_SECONDS) as response:  # noqa: S310 - loopback
                    answer = json.loads(response.read())
                return time.monotonic() - self.started, answer
            except OSError:
                time.sleep(0.5)

    def write_cri_log(self, path: Path) -> None:
        """The output so far as kubelet's log file of the container (`<RFC3339Nano> stdout F <text>` per line)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as log:
            for when, text in list(self.lines):
                stamp = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                log.write(f"{stamp} stdout F {text}\n")

    def stop(self) -> None:
        for callback in self._on_stop:
            callback()
        self._on_stop.clear()
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=90)
        except Exception:  # noqa: BLE001 - a server that ignores SIGTERM is killed
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
        self.reader.join(timeout=5)
