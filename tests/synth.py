"""Synthesize an environment the way `cdk synth` does (same cdk.json context), once per test session."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from aws_cdk import App
from aws_cdk.assertions import Template

from stacks.compose import EnvironmentStacks, compose_environment
from warmstart.config import EnvironmentConfig
from warmstart.loader import load_config, parse_config

ROOT = Path(__file__).resolve().parent.parent
SHIPPED_ENVIRONMENTS = sorted(path.stem for path in (ROOT / "config").glob("*.yaml"))


def cdk_context() -> dict:
    return json.loads((ROOT / "cdk.json").read_text())["context"]


@dataclass
class Synthesized:
    name: str
    config: EnvironmentConfig
    app: App
    stacks: EnvironmentStacks
    outdir: Path

    def template_json(self, stack_kind: str) -> dict:
        stack = getattr(self.stacks, stack_kind)
        return json.loads((self.outdir / f"{stack.stack_name}.template.json").read_text())

    def template(self, stack_kind: str) -> Template:
        return Template.from_json(self.template_json(stack_kind))

    def template_paths(self) -> list[Path]:
        return sorted(self.outdir.glob("*.template.json"))

    def model_template_json(self, model: str) -> dict:
        stack = self.stacks.models[model]
        return json.loads((self.outdir / f"{stack.stack_name}.template.json").read_text())

    def manifests(self) -> list[dict]:
        """Every Kubernetes object the environment's stacks apply (cluster and model stacks)."""
        from tests.manifests import deployed_manifests

        return [m for path in self.template_paths() for m in deployed_manifests(json.loads(path.read_text()))]


def synthesize(config: EnvironmentConfig, outdir: Path, name: str) -> Synthesized:
    app = App(outdir=str(outdir), context=cdk_context())
    stacks = compose_environment(app, config)
    app.synth()  # raises ValidationFailed on any unacknowledged cdk-nag finding
    return Synthesized(name=name, config=config, app=app, stacks=stacks, outdir=outdir)


def synthesize_shipped(name: str, outdir: Path) -> Synthesized:
    return synthesize(load_config(ROOT / "config" / f"{name}.yaml"), outdir, name)


def bottlerocket_snapshot_config() -> EnvironmentConfig:
    """prod on Bottlerocket with image_preload snapshot: the path no shipped environment takes (yet), checked by
    the same environment-wide tests (cdk-nag, cfn-lint, condition keys, manifest schemas)."""
    raw = yaml.safe_load((ROOT / "config" / "prod.yaml").read_text())
    raw["compute"]["ami_alias"] = "bottlerocket@v1.50.0"
    raw["image_preload"] = {"mode": "snapshot"}
    return parse_config(raw, source="prod, Bottlerocket, image snapshot")


VARIANTS = {"prod-bottlerocket-snapshot": bottlerocket_snapshot_config}
EVERY_ENVIRONMENT = [*SHIPPED_ENVIRONMENTS, *VARIANTS]


def synthesize_any(name: str, outdir: Path) -> Synthesized:
    if name in VARIANTS:
        return synthesize(VARIANTS[name](), outdir, name)
    return synthesize_shipped(name, outdir)
