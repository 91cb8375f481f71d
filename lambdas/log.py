"""The log line of every warmstart Lambda: one JSON object per line, which CloudWatch Logs Insights parses and
CloudWatch reads embedded-metric-format fields from; flushed at once, so a timeout loses nothing printed."""

from __future__ import annotations

import json
from typing import Any


def log_line(record: dict[str, Any]) -> None:
    print(json.dumps(record, default=str), flush=True)
