"""The pruner's entry point: settings from the environment, structured log lines with EMF metrics."""

import json
from datetime import timedelta

from pruner.runtime import handler
from pruner.runtime.settings import PrunerEnvironment


def test_settings_come_from_the_function_environment(monkeypatch):
    written = PrunerEnvironment(
        bucket="b",
        active_set_parameters=("/warmstart/dev/compile-cache/active-keys", "/warmstart/qa/compile-cache/active-keys"),
        retention_days=14,
        orphan_age_hours=24,
        max_deletions=10_000,
        dry_run=True,
        environment="dev",
    )
    for name, value in written.variables().items():  # as the construct writes them
        monkeypatch.setenv(name, value)
    assert PrunerEnvironment.read(written.variables()) == written
    settings = handler.settings_from_environment()
    assert settings.active_set_parameters == (
        "/warmstart/dev/compile-cache/active-keys",
        "/warmstart/qa/compile-cache/active-keys",
    )
    assert settings.retention == timedelta(days=14) and settings.orphan_age == timedelta(hours=24)
    assert settings.max_deletions == 10_000 and settings.dry_run is True


def test_summary_line_carries_cloudwatch_metrics(capsys, monkeypatch):
    monkeypatch.setenv("WARMSTART_ENVIRONMENT", "dev")
    handler.emit(
        {
            "event": "pruned",
            "scanned": 10,
            "deleted_objects": 3,
            "bytes_freed": 1000,
            "malformed": 1,
            "malformed_examples": ["compile-cache/x"],
        }
    )
    record = json.loads(capsys.readouterr().out)
    directive = record["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "Warmstart/CompileCachePruner" and directive["Dimensions"] == [["Environment"]]
    names = {m["Name"]: m["Unit"] for m in directive["Metrics"]}
    assert names["deleted_objects"] == "Count" and names["bytes_freed"] == "Bytes"
    assert record["Environment"] == "dev" and record["deleted_objects"] == 3 and record["kept_active"] == 0


def test_fail_closed_line_raises_its_own_metric(capsys):
    handler.emit({"event": "active-set-unavailable", "parameter": "/p", "reason": "ParameterNotFound"})
    record = json.loads(capsys.readouterr().out)
    assert [m["Name"] for m in record["_aws"]["CloudWatchMetrics"][0]["Metrics"]] == ["active_set_unavailable"]
    assert record["active_set_unavailable"] == 1
