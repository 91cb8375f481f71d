"""Manifests the cluster stack applies: custom resources against our schemas, built-in kinds strictly."""

import copy
import json

import jsonschema
import kubernetes_validate
import pytest

from tests.manifest_validation import SCHEMA_FILES, SCHEMAS, custom_schema, validate_manifest
from tests.manifests import of_kind


def validate_custom(manifest: dict) -> None:
    jsonschema.validate(
        manifest, custom_schema(manifest["apiVersion"], manifest["kind"]), cls=jsonschema.Draft202012Validator
    )


def test_schemas_name_their_upstream_source():
    for file in SCHEMA_FILES.values():
        comment = json.loads((SCHEMAS / file).read_text())["$comment"]
        sources = ("karpenter-provider-aws", "amazon-eks-user-guide", "prometheus-operator", "kedacore/keda")
        # A commit, or a release tag of a Go module (the proxy serves it, and the checksum database pins it).
        assert ("commit" in comment or "tag v" in comment) and any(source in comment for source in sources), file
        jsonschema.Draft202012Validator.check_schema(json.loads((SCHEMAS / file).read_text()))


def test_every_manifest_the_cluster_stack_applies_is_valid(every_env):
    manifests = every_env.manifests()
    kinds = {m["kind"] for m in manifests}
    assert {"NodePool", "Namespace", "ServiceAccount", "Deployment", "Service", "PodDisruptionBudget"} <= kinds
    for manifest in manifests:
        validate_manifest(manifest, every_env.config.cluster.kubernetes_version)


def test_custom_resources_match_our_schemas(every_env):
    manifests = every_env.manifests()
    custom = [m for m in manifests if (m["apiVersion"], m["kind"]) in SCHEMA_FILES]
    autoscaled = sum(1 for model in every_env.config.models if model.autoscaling)
    assert len(custom) == 2 + autoscaled  # a node class, a node pool, and a ScaledObject per autoscaled model
    for manifest in custom:
        validate_manifest(manifest, every_env.config.cluster.kubernetes_version)


def test_an_unknown_kind_fails_validation():
    with pytest.raises(kubernetes_validate.SchemaNotFoundError):
        validate_manifest({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}, "1.35")


def test_strict_kubernetes_validation_rejects_unknown_fields():
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x"}, "automount": True}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(account, "1.35.0", strict=True)


def _prod_node_class(prod) -> dict:
    return of_kind(prod.manifests(), "EC2NodeClass")[0]


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
    manifest = copy.deepcopy(of_kind(shipped.manifests(), "NodePool")[0])
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
    manifest = copy.deepcopy(of_kind(dev.manifests(), "NodeClass")[0])
    mutate(manifest)
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(manifest)
