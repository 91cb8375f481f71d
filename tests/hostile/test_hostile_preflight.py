"""An existing cluster's objects, as the preflight reads them through the cluster's API and the AWS CLI: the P2 of
issue 45. Deeply nested add-on configuration values crashed `make diff` with RecursionError, and text from the
cluster (a Karpenter's environment, its image) reached the findings with control characters."""

from __future__ import annotations

import pytest

from tests.synth import ROOT
from warmstart.loader import load_config
from warmstart_cli.existing_cluster_objects import karpenter_findings, network_policy_findings

CONFIG = load_config(ROOT / "config" / "existing.yaml")


@pytest.mark.parametrize("values", ["[" * 100_000, "{a: " * 50_000, "enableNetworkPolicy: 'true'\n" + "#" * 2**17])
def test_configuration_values_past_any_reader_are_not_a_setting(values):
    found, _ = network_policy_findings(CONFIG, {"configurationValues": values}, None)
    assert len(found) == 1 and "does not enforce NetworkPolicy" in found[0].message


def test_the_clusters_text_reaches_a_finding_escaped():
    namespace = CONFIG.compute.existing_controller.namespace
    env = [{"name": "CLUSTER_NAME", "value": "\x1b[2J\x1b[Hother\nfake finding"}]
    container = {"name": "controller", "image": "public.ecr.aws/karpenter/controller:1.14.1\x1b[31m", "env": env}
    deployment = {
        "metadata": {"name": "karpenter", "namespace": namespace, "labels": {"app.kubernetes.io/name": "karpenter"}},
        "spec": {"template": {"spec": {"containers": [container]}}},
    }
    found, _ = karpenter_findings(CONFIG, {"items": [deployment]})
    text = " ".join(f"{f.message} {f.fix}" for f in found)
    assert len(found) == 2 and all(c.isprintable() for c in text)
    assert "\\x1b[2J\\x1b[Hother\\x0afake finding" in text and "1.14.1\\x1b[31m" in text
