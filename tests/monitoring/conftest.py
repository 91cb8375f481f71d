"""Fixtures of the monitoring tier (make test-monitoring): Prometheus and promtool built from their Go module
(tests/monitoring/build.py)."""

from __future__ import annotations

import pytest

from tests.monitoring.build import PROMETHEUS


@pytest.fixture(scope="session")
def prometheus_built() -> None:
    if not PROMETHEUS.built():
        pytest.fail(f"Prometheus is not built: run `make monitoring-chain` (builds into {PROMETHEUS.folder})")
