"""The engine tier's shared chain (tests/engine/test_engine.py says what it is)."""

from __future__ import annotations

import json
import time

import pytest

from tests.engine.chain import OTHER_GPU_TYPE, EngineCluster, snapshot, summary
from tests.engine.engine_world import cpu_environment, tiny_model
from tests.engine.scraping import Scraping
from tests.engine.versions import selected


@pytest.fixture(scope="session", params=selected())
def chain(request, s3_server, tmp_path_factory):
    """The three starts, with the environment's Prometheus scraping every agent and vLLM from the first (one chain
    per release for the whole session: test_engine.py judges the starts, test_monitoring.py the series)."""
    env = cpu_environment(request.param)
    scratch = tmp_path_factory.mktemp(f"engine-{request.param}")
    cluster = EngineCluster(s3_server, scratch / "cluster", env, tiny_model(env, scratch / "model"))
    results: dict = {"cluster": cluster, "version": request.param}
    cluster.scraping = Scraping(scratch / "scraping", cluster.config)
    results["scraped_from"] = time.time()
    name = cluster.model.name
    a, b, c = cluster.node("node-a"), cluster.node("node-b"), cluster.node("node-c")
    results["restore_a"] = a.agent.start()[name].status
    results["cold"], _ = cluster.start("cold", a)
    results["restore_b"] = b.agent.start()[name].status
    results["restored"], _ = cluster.start("restored", b)
    results["weights_c"] = c.agent.weights_tick()[name]
    results["restore_c"] = c.agent.start()[name].status
    results["origin_c"] = c.layout.origin(name, cluster.fingerprint)  # what C restored (its own publish follows)
    results["node_copy"], _ = cluster.start("node_copy", c)
    other = cluster.node("node-d", OTHER_GPU_TYPE)
    results["restore_d"] = other.agent.start()[name].status
    results["files_d"] = snapshot(cluster.config_folder(other))
    print(json.dumps({case: summary(results[case]) for case in ("cold", "restored", "node_copy")}, indent=1))
    yield results
    cluster.scraping.stop()
