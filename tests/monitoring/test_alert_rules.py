"""Every alert rule under `promtool test rules` (the real promtool of the shipped chart's Prometheus), for each
shipped environment's rules file as `make synth` writes it: each alert fires on the recorded shapes it is for, with
its labels and its annotations as Prometheus renders them, and stays quiet on the ones it is not for."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from observability.alerts import (
    PRUNER_PERIODS_LATE,
    PRUNER_SLACK_SECONDS,
    alert_rules,
    prefetch_bound_seconds,
    pruner_period_seconds,
)
from observability.files import write_monitoring
from tests.monitoring.alert_cases import cases, promtool_tests
from tests.monitoring.build import PROMETHEUS
from tests.synth import SHIPPED_ENVIRONMENTS
from warmstart.catalog import default_catalog
from warmstart.loader import load_config
from warmstart.node_caches import weights_cached

pytestmark = pytest.mark.monitoring


@pytest.mark.parametrize("name", SHIPPED_ENVIRONMENTS)
def test_promtool_fires_each_alert_where_it_should_and_nowhere_else(name, prometheus_built, tmp_path):
    config = load_config(f"config/{name}.yaml")
    catalog = default_catalog()
    write_monitoring(config, catalog, tmp_path)
    rules_path = tmp_path / "monitoring" / "warmstart-alerts.rules.yml"
    check = subprocess.run(
        [str(PROMETHEUS.binary("promtool")), "check", "rules", str(rules_path)], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    (group,) = alert_rules(config, catalog)
    model = next((m for m in config.models if weights_cached(m, config)), config.models[0])
    bound = prefetch_bound_seconds(model, config, catalog) if weights_cached(model, config) else None
    period = pruner_period_seconds(config.pruning.schedule)
    late = None if period is None else PRUNER_PERIODS_LATE * period + PRUNER_SLACK_SECONDS
    document = promtool_tests(rules_path.name, group["rules"], model.name, bound, late)
    every_alert = {rule["alert"] for rule in group["rules"]}
    every_case = cases(model.name, bound, late)
    assert {c.alert for c in every_case if c.expected} == every_alert  # each fires in a case
    assert {c.alert for c in every_case if not c.expected} == every_alert  # and is quiet in one
    test_file = rules_path.parent / "alerts_test.yml"
    test_file.write_text(yaml.safe_dump(document, sort_keys=False))
    result = subprocess.run(
        [str(PROMETHEUS.binary("promtool")), "test", "rules", test_file.name],
        capture_output=True,
        text=True,
        cwd=rules_path.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr
