"""The custom resource definitions the test control plane serves, as the real clusters would:

- Karpenter's NodePool, NodeClaim and EC2NodeClass CRDs, with their CEL rules, from the Go module of
  `github.com/aws/karpenter-provider-aws` at the chart version the config pins (`pkg/apis/crds/`; the
  `karpenter-crd` chart ships the same files). Auto Mode's NodePools are the same `karpenter.sh/v1` kind.
- KEDA's CRDs, from its Go module at the shipped chart's version (`config/crd/bases/`), where a model autoscales.
- Auto Mode's `eks.amazonaws.com/v1` NodeClass: no CRD is published, so this is OURS: the JSON schema of
  tests/schemas/ (its sources named there) turned into a structural CRD schema (`const` as a one-value enum, a map's
  `propertyNames` as CEL rules on its keys; what a structural schema cannot say, `additionalProperties: false` and
  `not`, is left to strict field validation and the schema test).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from tests.cluster.control_plane import go_module_source
from tests.cluster.keda import keda_crds

SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"
KARPENTER_CRDS = (
    "karpenter.sh_nodepools.yaml",
    "karpenter.sh_nodeclaims.yaml",
    "karpenter.k8s.aws_ec2nodeclasses.yaml",
)


def karpenter_crds(version: str) -> list[dict]:
    """Karpenter's CRDs at `version` (the Helm chart's, e.g. 1.14.1), downloaded once through the Go proxy."""
    tag = version if version.startswith("v") else f"v{version}"
    folder = go_module_source("github.com/aws/karpenter-provider-aws", tag) / "pkg" / "apis" / "crds"
    return [yaml.safe_load((folder / name).read_text()) for name in KARPENTER_CRDS]


def _structural(schema: object) -> object:
    if isinstance(schema, list):
        return [_structural(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    converted: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("$schema", "$id", "$comment", "not") or (key == "additionalProperties" and value is False):
            continue
        if key == "propertyNames":  # a map's keys: a CEL rule on the map (structural schemas have no propertyNames)
            converted.setdefault("x-kubernetes-validations", []).extend(_key_rules(value))
            # The rule's cost must be bounded: EC2 takes at most 50 tags per resource, keys of up to 128 characters.
            converted.setdefault("maxProperties", 50)
            continue
        if key == "const":
            converted["enum"] = [value]
            converted.setdefault("type", "string" if isinstance(value, str) else "integer")
            continue
        converted[key] = _structural(value)
    if "enum" in converted and "type" not in converted:  # a structural schema types every field
        converted["type"] = "string" if all(isinstance(v, str) for v in converted["enum"]) else "integer"
    return converted


def _key_rules(names: dict) -> list[dict]:
    rules = []
    if "pattern" in names:
        rules.append({"rule": f"self.all(k, k.matches({json.dumps(names['pattern'])}))", "message": "key pattern"})
    if "minLength" in names:
        rules.append({"rule": f"self.all(k, size(k) >= {names['minLength']})", "message": "key too short"})
    if "maxLength" in names:
        rules.append({"rule": f"self.all(k, size(k) <= {names['maxLength']})", "message": "key too long"})
    refused = names.get("not", {})
    if "pattern" in refused:
        rules.append(
            {"rule": f"!self.exists(k, k.matches({json.dumps(refused['pattern'])}))", "message": "key refused"}
        )
    return rules


def auto_mode_node_class_crd() -> dict:
    schema = json.loads((SCHEMAS / "eks.amazonaws.com_v1_nodeclass.json").read_text())
    properties = _structural(schema["properties"])
    assert isinstance(properties, dict)
    properties["metadata"] = {"type": "object"}  # a CRD may constrain only name and generateName there
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "nodeclasses.eks.amazonaws.com",
            "annotations": {"warmstart.io/source": "ours: tests/schemas/eks.amazonaws.com_v1_nodeclass.json"},
        },
        "spec": {
            "group": "eks.amazonaws.com",
            "names": {
                "kind": "NodeClass",
                "listKind": "NodeClassList",
                "plural": "nodeclasses",
                "singular": "nodeclass",
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": properties, "required": ["spec"]}},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


def crds_for(config) -> list[dict]:
    """The CRDs an environment's cluster serves before warmstart applies its objects: KEDA's come with its chart
    where a model autoscales."""
    version = getattr(config.compute, "karpenter_version", None) or "1.14.1"
    crds = karpenter_crds(version)
    if config.compute.mode == "auto":
        crds.append(auto_mode_node_class_crd())
    if any(model.autoscaling for model in config.models):
        crds.extend(keda_crds())
    return crds
