"""Plain manifests for GitOps users: `python -m kube.render --config config/dev.yaml --out dist/dev`.

The same VllmModel charts the ClusterStack deploys, rendered to one YAML file per model.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import cdk8s

from model_workload.chart import VllmAutoscaler, VllmModel
from warmstart.autoscaling import scaling_policy
from warmstart.catalog import Catalog, default_catalog
from warmstart.config import EnvironmentConfig
from warmstart.loader import ConfigError, load_config
from warmstart.workload import plan_model


def render_workloads(config: EnvironmentConfig, outdir: Path, catalog: Catalog | None = None) -> list[Path]:
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
    return sorted(outdir.glob("*.yaml"))


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
    for path in render_workloads(config, args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
