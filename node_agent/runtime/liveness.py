"""Whether every loop of the agent is making progress, for its liveness probe.

Each loop (compile caches, cleanup, weights downloads, weights confirmations) beats when a round starts and
ends, and long work beats as it goes (a download on every buffer, a restore on every part). A loop whose last
beat is older than its bound is stuck: on a bad input, a silent S3 endpoint, a deadlock. The heartbeat file the
probe reads is touched only while no loop is stuck, so kubelet restarts an agent whose loop stopped, even while
the others go on (docs/trust-model.md gives the bounds).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

# A loop may go this long without a beat beyond its period before it counts as stuck. Every AWS call ends
# within (connect + read timeout) x attempts, under two minutes (node_agent/runtime/s3/client.py), and every
# Kubernetes call within 10 s, so a loop that has not beaten for 10 minutes is waiting on nothing that ends.
STALL_SECONDS = 600
HEARTBEAT_INTERVAL_SECONDS = 20


class Liveness:
    def __init__(self, clock: Callable[[], float] = time.monotonic, stall_seconds: float = STALL_SECONDS) -> None:
        self.clock = clock
        self.stall_seconds = stall_seconds
        self._bounds: dict[str, float] = {}
        self._beats: dict[str, float] = {}
        self._lock = threading.Lock()

    def register(self, loop: str, period_seconds: float) -> None:
        with self._lock:
            self._bounds[loop] = period_seconds + self.stall_seconds
            self._beats[loop] = self.clock()

    def beat(self, loop: str) -> None:
        with self._lock:
            if loop in self._bounds:
                self._beats[loop] = self.clock()

    def beater(self, loop: str) -> Callable[..., None]:
        """A callback for long work (any arguments ignored): each call is a beat of `loop`."""
        return lambda *_: self.beat(loop)

    def progress(self) -> dict[str, tuple[float, float]]:
        """Each loop's seconds since its last beat, and its bound (for the agent's metrics)."""
        now = self.clock()
        with self._lock:
            return {loop: (now - self._beats[loop], bound) for loop, bound in self._bounds.items()}

    def stuck(self) -> list[str]:
        now = self.clock()
        with self._lock:
            return sorted(loop for loop, bound in self._bounds.items() if now - self._beats[loop] > bound)


def keep_heartbeat(
    liveness: Liveness,
    heartbeat: Path,
    *,
    stop: threading.Event,
    on_stuck: Callable[[list[str]], None],
    interval: float = HEARTBEAT_INTERVAL_SECONDS,
) -> threading.Thread:
    """Touches `heartbeat` every `interval` seconds while no loop is stuck; tells `on_stuck` which are."""

    def run() -> None:
        while not stop.is_set():
            stuck = liveness.stuck()
            if stuck:
                on_stuck(stuck)
            else:
                heartbeat.touch()
            stop.wait(interval)

    thread = threading.Thread(target=run, name="heartbeat", daemon=True)
    thread.start()
    return thread
