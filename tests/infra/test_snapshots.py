"""One scrubbed snapshot per stack per shipped environment. Review every diff; never bulk-update blindly."""

import json
import re

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from tests.synth import ROOT, SHIPPED_ENVIRONMENTS
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


@pytest.mark.parametrize("stack_kind", STACK_KINDS)
@pytest.mark.parametrize("environment", SHIPPED_ENVIRONMENTS)
def test_stack_snapshot(synthesized_env, environment, stack_kind, snapshot_json):
    assert scrub(synthesized_env(environment).template_json(stack_kind)) == snapshot_json


MODEL_STACKS = [
    (env, model.name) for env in SHIPPED_ENVIRONMENTS for model in load_config(ROOT / "config" / f"{env}.yaml").models
]


@pytest.mark.parametrize("environment, model", MODEL_STACKS)
def test_model_stack_snapshot(synthesized_env, environment, model, snapshot_json):
    assert scrub(synthesized_env(environment).model_template_json(model)) == snapshot_json
