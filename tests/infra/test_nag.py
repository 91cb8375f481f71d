"""cdk-nag AwsSolutions: zero unacknowledged findings, every acknowledgment justified in one module."""

import inspect
import json
import re

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_s3 as s3

import stacks.nag_acknowledgments as acknowledgments
from tests.synth import ROOT, cdk_context
from warmstart.loader import load_config


def test_every_environment_synthesizes_with_no_unacknowledged_finding(every_env):
    report = json.loads((every_env.outdir / "validation-report.json").read_text())
    violations = [v for plugin in report["pluginReports"] for v in plugin["violations"]]
    assert violations == []


def test_each_acknowledgment_is_recorded_with_a_reason(shipped):
    recorded = {}
    for stack in shipped.stacks.all():
        for construct in stack.node.find_all():
            for entry in construct.node.metadata:
                if entry.type == "aws:cdk:acknowledged-rules":
                    for rule, reason in entry.data.items():
                        recorded[(construct.node.path, rule)] = reason
    rules = {rule for _, rule in recorded}
    assert "AwsSolutions::AwsSolutions-L1" in rules and "CloudFormation-Validate::W3010" in rules
    assert all(rule.split("::")[0] in ("AwsSolutions", "CloudFormation-Validate") for rule in rules)
    for key, reason in recorded.items():
        assert len(reason) > 40, key


def test_acknowledgments_live_in_one_module():
    offenders = []
    for path in (ROOT / "stacks").rglob("*.py"):
        if path.name != "nag_acknowledgments.py" and re.search(r"\.acknowledge\(|Acknowledgment\(", path.read_text()):
            offenders.append(path)
    assert offenders == []
    assert "reason=" in inspect.getsource(acknowledgments)


def test_a_new_unacknowledged_finding_fails_synth(tmp_path):
    """The checks are live: an insecure extra bucket must stop synth."""
    config = load_config(ROOT / "config" / "dev.yaml")

    class Leaky(Stack):
        def __init__(self, scope, id):
            super().__init__(scope, id)
            s3.Bucket(self, "NoLogsNoTls")

    app = App(outdir=str(tmp_path), context=cdk_context())
    from stacks.compose import compose_environment

    compose_environment(app, config)
    Leaky(app, "leaky")
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    rules = {v["ruleName"] for p in report["pluginReports"] for v in p["violations"]}
    assert {"AwsSolutions-S1", "AwsSolutions-S10"} <= rules
