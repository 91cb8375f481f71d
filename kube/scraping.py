"""How a pod asks Prometheus to scrape it: the annotations the community Prometheus chart's kubernetes-pods job
keeps (prometheus.io/scrape, port, path). The node agent and the autoscaled vLLM pods carry them."""

from __future__ import annotations

METRICS_PATH = "/metrics"


def scrape_annotations(port: int) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": METRICS_PATH}
