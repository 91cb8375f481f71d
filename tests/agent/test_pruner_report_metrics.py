"""The agent reads the pruner's report of its last run from the bucket into `warmstart_pruner_last_run_*`, the
series behind WarmstartPrunerFailing and WarmstartPrunerNotRunning; a report of any other shape, or too large, is
refused whole and counted, never half-used."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from contracts.pruner_report import PRUNER_REPORT_KEY, REPORT_MAX_BYTES, PrunerReport
from node_agent.runtime.agent import NodeAgent
from node_agent.runtime.kube import KubeApi
from node_agent.runtime.s3.compile_store import CacheStore
from tests.agent.compile_world import node_layout
from tests.agent.fake_kube import FakeCluster
from tests.synth import ROOT
from warmstart.agent_config import agent_settings
from warmstart.catalog import default_catalog
from warmstart.loader import load_config


@pytest.fixture
def agent(tmp_path, s3_server, bucket, clock, log) -> NodeAgent:
    """An agent of prod's settings on the real S3 server; the test writes the report as the pruner would."""
    settings = agent_settings(load_config(ROOT / "config" / "prod.yaml"), default_catalog())
    settings = settings.model_copy(update={"bucket": bucket})
    store = CacheStore(s3_server.client(), bucket)
    return NodeAgent(
        settings=settings, node="node-a", store=store, kube=KubeApi(FakeCluster()),
        layout=node_layout(tmp_path, "a"), clock=clock, log=log,
    )  # fmt: skip


def _value(agent: NodeAgent, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(agent.metrics.exposition()):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


@pytest.fixture
def put(s3_server, bucket):
    return lambda body: s3_server.client().put_object(Bucket=bucket, Key=PRUNER_REPORT_KEY, Body=body)


def test_before_the_pruners_first_run_there_is_nothing_to_report(agent):
    assert agent.pruner_report_tick() is None
    # No series at all: a gauge at 0 would read as a failed run.
    assert _value(agent, "warmstart_pruner_last_run_ok") is None
    assert _value(agent, "warmstart_pruner_last_run_timestamp_seconds") is None


def test_each_report_sets_when_the_last_run_ended_and_whether_it_pruned(agent, put):
    put(json.dumps(PrunerReport(1796600000.0, "pruned").to_dict()).encode())
    assert agent.pruner_report_tick() == PrunerReport(1796600000.0, "pruned")
    assert _value(agent, "warmstart_pruner_last_run_ok") == 1
    assert _value(agent, "warmstart_pruner_last_run_timestamp_seconds") == 1796600000.0
    put(json.dumps(PrunerReport(1796686400.0, "active-set-unavailable").to_dict()).encode())
    agent.pruner_report_tick()
    assert _value(agent, "warmstart_pruner_last_run_ok") == 0
    assert _value(agent, "warmstart_pruner_last_run_timestamp_seconds") == 1796686400.0


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        json.dumps({"version": 1, "finished_at": "soon", "outcome": "pruned"}).encode(),
        json.dumps({"version": 9, "finished_at": 1796600000.0, "outcome": "pruned"}).encode(),
        b" " * (REPORT_MAX_BYTES + 1),  # never read whole
    ],
)
def test_a_report_of_any_other_shape_is_refused_and_the_last_good_one_stays(agent, put, log, body):
    put(json.dumps(PrunerReport(1796600000.0, "pruned").to_dict()).encode())
    agent.pruner_report_tick()
    put(body)
    assert agent.pruner_report_tick() is None
    assert _value(agent, "warmstart_untrusted_inputs_refused_total", source="pruner-report") == 1
    assert [e for e in log.events if e["event"] == "input-refused"][-1]["source"] == "pruner-report"
    assert _value(agent, "warmstart_pruner_last_run_ok") == 1  # what the last readable report said


class DeniedStore:
    """S3 as IAM answers an agent whose role predates the report's read permission: AccessDenied."""

    def get_json(self, key: str, *, max_bytes: int) -> dict | None:
        raise PermissionError("AccessDenied: GetObject")


def test_a_report_s3_will_not_serve_is_logged_and_the_loop_makes_progress(agent, log):
    agent.store = DeniedStore()
    assert agent.pruner_report_tick() is None  # returns: the loop beats, the liveness probe stays green
    assert [e for e in log.events if e["event"] == "pruner-report-unreadable"]
    assert _value(agent, "warmstart_pruner_last_run_ok") is None
