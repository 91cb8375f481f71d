"""Synthesize an environment the way `cdk synth` does (same cdk.json context), once per test session."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml
from aws_cdk import App
from aws_cdk.assertions import Template

from stacks.compose import EnvironmentStacks, compose_environment
from warmstart.config.environment import EnvironmentConfig
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

    def applied_manifests(self) -> list[dict]:
        """Every Kubernetes object the environment's stacks apply (cluster and model stacks)."""
        from tests.manifests import deployed_manifests

        return [m for path in self.template_paths() for m in deployed_manifests(json.loads(path.read_text()))]

    def manifests(self) -> list[dict]:
        """Every Kubernetes object warmstart puts in the cluster: what its stacks apply, or, where a GitOps tool
        applies them (cluster.existing.kubernetes_objects: gitops), what `make synth` renders to dist/<env>/."""
        if self.config.cluster.applies_kubernetes_objects:
            return self.applied_manifests()
        from render import render_workloads

        files = render_workloads(self.config, self.outdir / "dist")
        return [m for path in files for m in yaml.safe_load_all(path.read_text()) if m]


def synthesize(config: EnvironmentConfig, outdir: Path, name: str) -> Synthesized:
    app = App(outdir=str(outdir), context=cdk_context())
    stacks = compose_environment(app, config)
    app.synth()  # raises ValidationFailed on any unacknowledged cdk-nag finding
    return Synthesized(name=name, config=config, app=app, stacks=stacks, outdir=outdir)


def synthesize_shipped(name: str, outdir: Path) -> Synthesized:
    return synthesize(load_config(ROOT / "config" / f"{name}.yaml"), outdir, name)


def _shipped_raw(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())


def bottlerocket_snapshot_raw() -> dict:
    """prod on Bottlerocket with image_preload snapshot: the path no shipped environment takes (yet), checked by
    the same environment-wide tests (cdk-nag, cfn-lint, condition keys, manifest schemas)."""
    raw = _shipped_raw("prod")
    raw["compute"]["ami_alias"] = "bottlerocket@v1.57.0"
    raw["image_preload"] = {"mode": "snapshot"}
    return raw


def existing_auto_mode_raw() -> dict:
    """The existing-cluster example on an EKS Auto Mode cluster with a public endpoint and an S3 gateway endpoint
    already on its route tables: the other compute mode of the same path."""
    raw = _shipped_raw("existing")
    raw["network"]["existing"]["s3_gateway_endpoint"] = "present"
    raw["cluster"]["endpoint_access"] = "public_and_private"
    raw["cluster"]["existing"] = {"security_group_id": raw["cluster"]["existing"]["security_group_id"]}
    raw["compute"] = {
        "mode": "auto",
        "gpu_pool": raw["compute"]["gpu_pool"],
        "node_role_name": "AmazonEKSAutoNodeRole",
        "cluster_role_name": "AmazonEKSAutoClusterRole",
    }
    return raw


def existing_gitops_raw() -> dict:
    """The existing-cluster example for a team whose GitOps tool applies the Kubernetes objects: the stacks hold
    the AWS parts, dist/<env>/ the rest."""
    raw = _shipped_raw("existing")
    raw["cluster"]["existing"].update(
        kubernetes_objects="gitops", pod_identity_agent="add", nvidia_device_plugin="present"
    )
    raw["deploy"] = {"agent_image": f"345678901234.dkr.ecr.eu-west-1.amazonaws.com/warmstart-agent@sha256:{'ab' * 32}"}
    return raw


# Each variant's settings, as a file would hold them, and what it stands for.
VARIANT_SETTINGS = {
    "prod-bottlerocket-snapshot": (bottlerocket_snapshot_raw, "prod, Bottlerocket, image snapshot"),
    "existing-auto-mode": (existing_auto_mode_raw, "existing, on an Auto Mode cluster"),
    "existing-gitops": (existing_gitops_raw, "existing, Kubernetes objects by GitOps"),
}


def settings_of(name: str) -> dict:
    """An environment's settings as its file holds them (a variant's made from its shipped file)."""
    return VARIANT_SETTINGS[name][0]() if name in VARIANT_SETTINGS else _shipped_raw(name)


VARIANTS = {
    name: (lambda build=build, source=source: parse_config(build(), source=source))
    for name, (build, source) in VARIANT_SETTINGS.items()
}
EVERY_ENVIRONMENT = [*SHIPPED_ENVIRONMENTS, *VARIANTS]


def config_of(name: str) -> EnvironmentConfig:
    return VARIANTS[name]() if name in VARIANTS else load_config(ROOT / "config" / f"{name}.yaml")


# The shipped environments whose cluster and VPC warmstart creates, and every environment (variants too) that adds
# warmstart to a cluster it did not create.
CREATED_CLUSTER_ENVIRONMENTS = [name for name in SHIPPED_ENVIRONMENTS if config_of(name).cluster.owned]
EXISTING_CLUSTER_ENVIRONMENTS = [name for name in EVERY_ENVIRONMENT if not config_of(name).cluster.owned]


def synthesize_any(name: str, outdir: Path) -> Synthesized:
    if name in VARIANTS:
        return synthesize(VARIANTS[name](), outdir, name)
    return synthesize_shipped(name, outdir)
