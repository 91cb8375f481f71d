"""Structured logs: one JSON object per line, with running counters, for CloudWatch / Loki queries."""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter, deque
from collections.abc import Callable
from typing import Any, TextIO

# The agent runs for the node's lifetime: it keeps only the latest events in memory (the stream has them all).
RECENT_EVENTS = 1000


class EventLog:
    def __init__(self, clock: Callable[[], float], stream: TextIO | None = None, *, keep: int = RECENT_EVENTS) -> None:
        self._clock = clock
        self._stream = stream or sys.stdout
        self._lock = threading.Lock()  # several agent loops log at once: one whole line each
        self.counters: Counter[str] = Counter()
        self.events: deque[dict[str, Any]] = deque(maxlen=keep)

    def event(self, name: str, **fields: Any) -> dict[str, Any]:
        record = {"time": round(self._clock(), 3), "event": name, **fields}
        line = json.dumps(record, sort_keys=True, default=str) + "\n"
        with self._lock:
            self.counters[name] += 1
            self.events.append(record)
            self._stream.write(line)
            self._stream.flush()
        return record

    def summary(self) -> dict[str, Any]:
        return self.event("summary", counters=dict(self.counters))
