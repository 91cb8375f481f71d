"""What an operator loads into their monitoring, written by `make synth` into dist/<env>/monitoring/ (render.py):

- `cold-starts-dashboard.json`: the dashboard, for Grafana's import or a provisioning folder;
- `cold-starts-dashboard.configmap.yaml`: the same in a ConfigMap labelled for Grafana's dashboard sidecar;
- `warmstart-alerts.rules.yml`: the alert rules as a Prometheus rules file (`rule_files`, or the community
  chart's `serverFiles."alerting_rules.yml"`);
- `warmstart-alerts.prometheusrule.yaml`: the same rules as a PrometheusRule, for the Prometheus Operator.

They are not in the folder's kustomization: the PrometheusRule's CRD and Grafana's sidecar are the cluster
owner's, not warmstart's (docs/monitoring.md).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from observability.alerts import alert_rules
from observability.dashboard import UID, dashboard_json
from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig

FOLDER = "monitoring"
DASHBOARD_FILE = "cold-starts-dashboard.json"
PART_OF = {"app.kubernetes.io/part-of": "warmstart"}


def dashboard_config_map(config: EnvironmentConfig) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": UID,
            "namespace": config.monitoring.namespace,
            "labels": {**PART_OF, **config.monitoring.dashboard_labels},
        },
        "data": {DASHBOARD_FILE: dashboard_json()},
    }


def rules_file(config: EnvironmentConfig, catalog: Catalog) -> dict:
    return {"groups": alert_rules(config, catalog)}


def prometheus_rule(config: EnvironmentConfig, catalog: Catalog) -> dict:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "warmstart-alerts",
            "namespace": config.monitoring.namespace,
            "labels": {**PART_OF, **config.monitoring.rule_labels},
        },
        "spec": rules_file(config, catalog),
    }


def write_monitoring(config: EnvironmentConfig, catalog: Catalog, outdir: Path) -> list[Path]:
    folder = outdir / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    documents = {
        DASHBOARD_FILE: dashboard_json(),
        "cold-starts-dashboard.configmap.yaml": _yaml(dashboard_config_map(config)),
        "warmstart-alerts.rules.yml": _yaml(rules_file(config, catalog)),
        "warmstart-alerts.prometheusrule.yaml": _yaml(prometheus_rule(config, catalog)),
    }
    written = []
    for name, text in documents.items():
        path = folder / name
        path.write_text(text)
        written.append(path)
    return written


def _yaml(document: dict) -> str:
    return yaml.safe_dump(document, sort_keys=False, width=120)
