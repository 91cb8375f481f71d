"""One scrubbed snapshot per stack per shipped environment. Review every diff; never bulk-update blindly."""

import json
import re

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from tests.synth import SHIPPED_ENVIRONMENTS

STACK_KINDS = ["network", "data", "cluster", "pruner"]
ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def scrub(template: dict) -> dict:
    """Asset hashes change with aws-cdk-lib's bundled code, not with anything we wrote."""
    return json.loads(ASSET_HASH.sub("<asset-hash>", json.dumps(template)))


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("stack_kind", STACK_KINDS)
@pytest.mark.parametrize("environment", SHIPPED_ENVIRONMENTS)
def test_stack_snapshot(synthesized_env, environment, stack_kind, snapshot_json):
    assert scrub(synthesized_env(environment).template_json(stack_kind)) == snapshot_json
