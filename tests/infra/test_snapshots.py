"""One scrubbed snapshot per stack per shipped environment. Review every diff; never bulk-update blindly."""

import json
import re

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from stacks.network_stack import owns_network_resources
from tests.synth import ROOT, SHIPPED_ENVIRONMENTS, config_of
from warmstart.loader import load_config

STACK_KINDS = ["network", "data", "cluster", "pruner", "ci"]
ASSET_HASH = re.compile(r"[0-9a-f]{64}")
# A gate Job's name is a digest over its image and the agent image's asset hash (warmstart.workload.image_gate_name).
GATE_NAME = re.compile(r"image-gate-[0-9a-f]{12}")


def scrub(template: dict) -> dict:
    """Asset hashes change with aws-cdk-lib's bundled code and the agent's source, not with the templates we write;
    so do the names derived from them."""
    text = ASSET_HASH.sub("<asset-hash>", json.dumps(template))
    return json.loads(GATE_NAME.sub("image-gate-<digest>", text))


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


def _has_stack(environment: str, stack_kind: str) -> bool:
    """An existing VPC has a network stack only for the endpoint warmstart adds; the CI stack needs GitHub access."""
    config = config_of(environment)
    if stack_kind == "network":
        return owns_network_resources(config.network)
    return stack_kind != "ci" or config.deploy.github is not None


STACKS = [(env, kind) for env in SHIPPED_ENVIRONMENTS for kind in STACK_KINDS if _has_stack(env, kind)]


@pytest.mark.parametrize("environment, stack_kind", STACKS)
def test_stack_snapshot(synthesized_env, environment, stack_kind, snapshot_json):
    assert scrub(synthesized_env(environment).template_json(stack_kind)) == snapshot_json


MODEL_STACKS = [
    (env, model.name) for env in SHIPPED_ENVIRONMENTS for model in load_config(ROOT / "config" / f"{env}.yaml").models
]


@pytest.mark.parametrize("environment, model", MODEL_STACKS)
def test_model_stack_snapshot(synthesized_env, environment, model, snapshot_json):
    assert scrub(synthesized_env(environment).model_template_json(model)) == snapshot_json
