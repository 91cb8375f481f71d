"""The pruner's report of its last run, an object at the compile-cache bucket's root that each run overwrites
(pruner/runtime/handler.py) and the node agents read into their metrics (`warmstart_pruner_last_run_*`), so that
the Prometheus alert rules see a pruner that fails or stops running (observability/alerts.py).

Written by the pruner's role only; read as untrusted all the same: bounded, every field checked, and anything else
refused whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PRUNER_REPORT_KEY = "pruner-last-run.json"  # beside the pruner's lock, outside the prefix it prunes
REPORT_MAX_BYTES = 4096
REPORT_VERSION = 1
# How a run ended: it pruned; it refused to, the active set being unreadable (nothing deleted); it failed.
PRUNED, ACTIVE_SET_UNAVAILABLE, FAILED = "pruned", "active-set-unavailable", "failed"
OUTCOMES = (PRUNED, ACTIVE_SET_UNAVAILABLE, FAILED)
# Epoch seconds of a plausible run: after 2020, before 2200.
EARLIEST, LATEST = 1.577e9, 7.26e9


@dataclass(frozen=True)
class PrunerReport:
    finished_at: float  # epoch seconds
    outcome: str

    @property
    def ok(self) -> bool:
        return self.outcome == PRUNED

    def to_dict(self) -> dict:
        return {"version": REPORT_VERSION, "finished_at": self.finished_at, "outcome": self.outcome}


def parse_report(document: object) -> PrunerReport | None:
    """The report, or None for anything but a report of this version with a plausible time and a known outcome."""
    if not isinstance(document, dict) or document.get("version") != REPORT_VERSION:
        return None
    finished_at, outcome = document.get("finished_at"), document.get("outcome")
    if isinstance(finished_at, bool) or not isinstance(finished_at, int | float) or not math.isfinite(finished_at):
        return None
    if not EARLIEST <= finished_at <= LATEST or outcome not in OUTCOMES:
        return None
    return PrunerReport(float(finished_at), str(outcome))
