"""Structured logs: one JSON object per line, with running counters, for CloudWatch / Loki queries."""

from __future__ import annotations

import json
import sys
from collections import Counter
from typing import Any, Callable, TextIO


class EventLog:
    def __init__(self, clock: Callable[[], float], stream: TextIO | None = None) -> None:
        self._clock = clock
        self._stream = stream or sys.stdout
        self.counters: Counter[str] = Counter()
        self.events: list[dict[str, Any]] = []

    def event(self, name: str, **fields: Any) -> dict[str, Any]:
        self.counters[name] += 1
        record = {"time": round(self._clock(), 3), "event": name, **fields}
        self.events.append(record)
        self._stream.write(json.dumps(record, sort_keys=True, default=str) + "\n")
        self._stream.flush()
        return record

    def summary(self) -> dict[str, Any]:
        return self.event("summary", counters=dict(self.counters))
