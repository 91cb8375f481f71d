"""Manifests the cluster stack applies: custom resources against our schemas, built-in kinds strictly."""

import copy
import json
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest

from tests.manifests import deployed_manifests, of_kind

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
SCHEMA_FILES = {
    ("karpenter.sh/v1", "NodePool"): "karpenter.sh_v1_nodepool.json",
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): "karpenter.k8s.aws_v1_ec2nodeclass.json",
    ("eks.amazonaws.com/v1", "NodeClass"): "eks.amazonaws.com_v1_nodeclass.json",
}
BUILT_IN = {("v1", "Namespace"), ("v1", "ServiceAccount")}


def schema(api_version: str, kind: str) -> dict:
    return json.loads((SCHEMAS / SCHEMA_FILES[(api_version, kind)]).read_text())


def validate_custom(manifest: dict) -> None:
    jsonschema.validate(manifest, schema(manifest["apiVersion"], manifest["kind"]), cls=jsonschema.Draft202012Validator)


def test_schemas_name_their_upstream_source():
    for file in SCHEMA_FILES.values():
        comment = json.loads((SCHEMAS / file).read_text())["$comment"]
        assert "commit" in comment and ("karpenter-provider-aws" in comment or "amazon-eks-user-guide" in comment)
        jsonschema.Draft202012Validator.check_schema(json.loads((SCHEMAS / file).read_text()))


def test_every_manifest_is_of_a_kind_we_can_validate(shipped):
    for manifest in deployed_manifests(shipped.template_json("cluster")):
        key = (manifest["apiVersion"], manifest["kind"])
        assert key in SCHEMA_FILES or key in BUILT_IN, key


def test_custom_resources_match_our_schemas(shipped):
    manifests = deployed_manifests(shipped.template_json("cluster"))
    custom = [m for m in manifests if (m["apiVersion"], m["kind"]) in SCHEMA_FILES]
    assert len(custom) == 2  # a node class and a node pool
    for manifest in custom:
        validate_custom(manifest)


def test_built_in_kinds_pass_strict_kubernetes_validation(shipped):
    version = shipped.config.cluster.kubernetes_version + ".0"
    for manifest in deployed_manifests(shipped.template_json("cluster")):
        if (manifest["apiVersion"], manifest["kind"]) in BUILT_IN:
            kubernetes_validate.validate(manifest, version, strict=True)


def test_strict_kubernetes_validation_rejects_unknown_fields():
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x"}, "automount": True}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(account, "1.35.0", strict=True)


def _prod_node_class(prod) -> dict:
    return of_kind(deployed_manifests(prod.template_json("cluster")), "EC2NodeClass")[0]


@pytest.mark.parametrize(
    "path, bad_value",
    [
        (("spec", "instanceStorePolicy"), "RAID1"),
        (("spec", "metadataOptions", "httpTokens"), "sometimes"),
        (("spec", "amiSelectorTerms"), [{"alias": "ubuntu@latest"}]),
        (("spec", "blockDeviceMappings", 0, "ebs", "volumeSize"), "200GB"),
        (("spec", "subnetSelectorTerms", 0, "id"), "vpc-123"),
        (("spec", "instanceStore"), "RAID0"),
    ],
)
def test_ec2_node_class_schema_rejects_what_karpenter_would(prod, path, bad_value):
    manifest = copy.deepcopy(_prod_node_class(prod))
    target = manifest
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = bad_value
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(manifest)


def test_ec2_node_class_needs_exactly_one_of_role_or_instance_profile(prod):
    manifest = copy.deepcopy(_prod_node_class(prod))
    manifest["spec"]["instanceProfile"] = "profile"
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(manifest)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda m: m["spec"]["template"]["spec"]["taints"][0].update(effect="NoRun"),
        lambda m: m["spec"]["disruption"].update(consolidationPolicy="Always"),
        lambda m: m["spec"]["template"]["spec"]["requirements"][0].update(operator="Equals"),
        lambda m: m["spec"]["template"]["spec"].pop("nodeClassRef"),
        lambda m: m["spec"]["disruption"].update(consolidateAfter="10 minutes"),
    ],
)
def test_node_pool_schema_rejects_invalid_values(shipped, mutate):
    manifest = copy.deepcopy(of_kind(deployed_manifests(shipped.template_json("cluster")), "NodePool")[0])
    mutate(manifest)
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(manifest)


@pytest.mark.parametrize(
    "mutate",
    [
        lambda m: m["spec"]["ephemeralStorage"].update(iops=2000),
        lambda m: m["spec"]["ephemeralStorage"].update(size="80GiB"),
        lambda m: m["metadata"].update(name="default"),
        lambda m: m["spec"].pop("role"),
        lambda m: m["spec"]["tags"].update({"karpenter.sh/nodepool": "x"}),
    ],
)
def test_auto_mode_node_class_schema_rejects_invalid_values(dev, mutate):
    manifest = copy.deepcopy(of_kind(deployed_manifests(dev.template_json("cluster")), "NodeClass")[0])
    mutate(manifest)
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(manifest)
