"""Plain manifests for GitOps users: `python -m render --config config/dev.yaml --out dist/dev`.

The same charts the stacks apply, rendered to one YAML file per chart, with a kustomization.yaml that lists them:
the models' workloads for every environment; and where a GitOps tool applies the cluster's objects
(cluster.existing.kubernetes_objects: gitops), everything else the stacks would have applied too: the GPU NodePool
and its node class, the warmstart-system namespace, the node agent, the prepull DaemonSets. Beside them, in
monitoring/, the cold-start dashboard and the alert rules (observability/files.py).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

import cdk8s
import yaml

from model_workload.chart import VllmAutoscaler, VllmModel
from observability.files import write_monitoring
from warmstart.autoscaling import scaling_policy
from warmstart.catalog import Catalog, default_catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.config_file import ConfigError
from warmstart.loader import load_config
from warmstart.workload import plan_model

KUSTOMIZATION = "kustomization.yaml"
CDK_JSON = Path(__file__).resolve().parent / "cdk.json"


def render_workloads(config: EnvironmentConfig, outdir: Path, catalog: Catalog | None = None) -> list[Path]:
    """Writes the environment's manifests to outdir (emptied first) and returns their files, the kustomization
    left out."""
    catalog = catalog or default_catalog()
    if outdir.exists():
        shutil.rmtree(outdir)  # a removed model must not leave its manifest behind
    app = cdk8s.App(outdir=str(outdir), output_file_extension=".yaml")
    for model in config.models:
        scaling = scaling_policy(model, config, catalog)
        VllmModel(app, model.name, plan=plan_model(model, config, catalog), scaling=scaling)
        if scaling is not None:
            VllmAutoscaler(app, f"{model.name}-autoscaler", scaling=scaling)
    app.synth()
    files = sorted(outdir.glob("*.yaml"))
    if not config.cluster.applies_kubernetes_objects:
        files = _cluster_charts(config, outdir) + files
    return files


def _file_name(chart_id: str) -> str:
    """WarmstartSystem -> warmstart-system.yaml."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", chart_id).lower() + ".yaml"


def _cluster_charts(config: EnvironmentConfig, outdir: Path) -> list[Path]:
    """The charts the cluster stack builds and, with GitOps, does not apply: from the stacks' own composition, so
    that the objects are the ones `cdk deploy` would have applied."""
    from aws_cdk import App

    from stacks.compose import compose_environment

    # cdk.json's context (its feature flags), as `cdk synth` gives the app.
    context = json.loads(CDK_JSON.read_text())["context"]
    stacks = compose_environment(App(context=context), config)
    written = []
    for chart in stacks.cluster.charts.charts:
        path = outdir / _file_name(chart.node.id)
        path.write_text(yaml.safe_dump_all(chart.to_json(), sort_keys=False))
        written.append(path)
    return written


def write_kustomization(outdir: Path, files: list[Path]) -> Path:
    """A kustomization.yaml of every file, so that Argo CD, Flux or `kubectl apply -k` apply them as one set."""
    path = outdir / KUSTOMIZATION
    document = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [file.name for file in files],
    }
    path.write_text("# Written by `make synth` (render.py); do not edit.\n" + yaml.safe_dump(document, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(error, file=sys.stderr)
        return 2
    files = render_workloads(config, args.out)
    monitoring = write_monitoring(config, default_catalog(), args.out)
    for path in [*files, write_kustomization(args.out, files), *monitoring]:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
