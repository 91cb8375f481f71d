"""Kubernetes manifests as the cluster stack deploys them, with CloudFormation values filled in.

A manifest in the template is a JSON string, or an Fn::Join of string parts and intrinsics (subnet IDs,
the cluster security group, role names). Intrinsics become well-formed stand-ins so the manifests can be
schema-checked as the API server would see them after deployment.
"""

from __future__ import annotations

import json

STAND_INS = (
    ("dkr.ecr", "123456789012.dkr.ecr.us-west-2.amazonaws.com/cdk-hnb659fds-container-assets:0123abcd"),
    ("Subnet", "subnet-0123456789abcdef0"),
    ("SecurityGroup", "sg-0123456789abcdef0"),
    ("Role", "warmstart-node-role"),
    ("Queue", "warmstart-interruption-queue"),
    ("ImageSnapshot", "snap-0123456789abcdef0"),
)


def _stand_in(intrinsic: dict) -> str:
    text = json.dumps(intrinsic)
    for marker, value in STAND_INS:
        if marker in text:
            return value
    return "resolved-value"


def _resolve(value) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_resolve(part) for part in parts)
    return _stand_in(value)


def deployed_manifests(template: dict) -> list[dict]:
    objects = []
    for resource in template["Resources"].values():
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource":
            objects.extend(json.loads(_resolve(resource["Properties"]["Manifest"])))
    return objects


def helm_charts(template: dict) -> dict[str, dict]:
    return {
        resource["Properties"]["Release"]: resource["Properties"]
        for resource in template["Resources"].values()
        if resource["Type"] == "Custom::AWSCDK-EKS-HelmChart"
    }


def of_kind(manifests: list[dict], kind: str) -> list[dict]:
    return [m for m in manifests if m["kind"] == kind]
