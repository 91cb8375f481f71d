"""Validate any manifest warmstart emits: built-in kinds strictly against the official schemas of the
cluster's Kubernetes version, custom resources against our own schemas (tests/schemas). A kind that is in
neither raises (kubernetes_validate.SchemaNotFoundError), so an unknown kind always fails."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import kubernetes_validate

SCHEMAS = Path(__file__).resolve().parent / "schemas"
SCHEMA_FILES = {
    ("karpenter.sh/v1", "NodePool"): "karpenter.sh_v1_nodepool.json",
    ("karpenter.k8s.aws/v1", "EC2NodeClass"): "karpenter.k8s.aws_v1_ec2nodeclass.json",
    ("eks.amazonaws.com/v1", "NodeClass"): "eks.amazonaws.com_v1_nodeclass.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "monitoring.coreos.com_v1_prometheusrule.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "keda.sh_v1alpha1_scaledobject.json",
}


def custom_schema(api_version: str, kind: str) -> dict:
    return json.loads((SCHEMAS / SCHEMA_FILES[(api_version, kind)]).read_text())


def validate_manifest(manifest: dict, kubernetes_version: str) -> None:
    key = (manifest["apiVersion"], manifest["kind"])
    if key in SCHEMA_FILES:
        jsonschema.validate(manifest, custom_schema(*key), cls=jsonschema.Draft202012Validator)
    else:
        kubernetes_validate.validate(manifest, f"{kubernetes_version}.0", strict=True)
