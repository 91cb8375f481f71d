"""Scale by design: 100 models synthesize into templates CloudFormation accepts (each model in a stack of its
own), and what would pass a CloudFormation limit is refused after synth with the same message form."""

import json

import pytest

from tests.scale_config import many_models
from tests.synth import synthesize
from warmstart.scale import TEMPLATE_BYTES, TEMPLATE_OUTPUTS, TEMPLATE_RESOURCES, template_problems


@pytest.mark.slow
def test_a_hundred_models_fit_cloudformations_limits(tmp_path):
    synthesized = synthesize(many_models(100), tmp_path, "hundred")  # cdk-nag included: raises on findings
    paths = synthesized.template_paths()
    assert len(paths) == 4 + 100 + 1  # network, data, cluster, pruner, one per model, ci
    for path in paths:
        text = path.read_text()
        assert template_problems(path.stem, text) == []
        template = json.loads(text)
        assert len(text.encode()) < TEMPLATE_BYTES / 2 and len(template["Resources"]) < TEMPLATE_RESOURCES / 2
        assert len(template.get("Outputs", {})) < TEMPLATE_OUTPUTS / 2
    manifests = synthesized.manifests()
    assert len([m for m in manifests if m["kind"] == "Deployment"]) == 100


def test_a_template_past_a_limit_is_refused_with_its_numbers():
    template = {
        "Resources": {f"R{i}": {"Type": "AWS::SNS::Topic"} for i in range(501)},
        "Outputs": {f"O{i}": {"Value": "x"} for i in range(201)},
    }
    text = json.dumps(template) + " " * TEMPLATE_BYTES
    found = {p.message for p in template_problems("warmstart-x-cluster", text)}
    assert any("501 resources, over CloudFormation's 500" in m for m in found)
    assert any("201 outputs, over CloudFormation's 200" in m for m in found)
    assert any("bytes, over CloudFormation's 1000000" in m for m in found)
