"""The repository's own source as asset content (the Lambda code and the agent image's build context), and a
typing bridge for the cluster."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import cast

from aws_cdk import aws_eks_v2 as eks

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]


def only(*paths: str, leaving_out: tuple[str, ...] = ()) -> list[str]:
    """Docker-style exclude patterns that keep just these folders or files (paths from the repository root) and
    the `__init__.py` of every package above them, so that a component's runtime keeps its import path, less the
    paths `leaving_out` names; no bytecode caches."""
    kept: list[str] = []
    for path in paths:
        for parent in reversed(PurePosixPath(path).parents[:-1]):
            init = f"{parent}/__init__.py"
            if init not in kept:
                kept.append(init)
        kept.append(path)
    return ["*", *(f"!{path}" for path in kept), *leaving_out, "**/__pycache__"]


def applies_objects(cluster: eks.Cluster) -> bool:
    """Whether warmstart applies Kubernetes objects to the cluster: it has a kubectl handler (a cluster warmstart
    created, or an existing one with kubernetes_objects: cdk); otherwise a GitOps tool applies dist/<env>/."""
    return cluster_ref(cluster).kubectl_provider is not None


def cluster_ref(cluster: eks.Cluster) -> eks.ICluster:
    """The cluster as the ICluster it is: jsii's Python typing of aws-cdk-lib 2.275 leaves kubectl_provider_options
    off Cluster, so mypy cannot see that Cluster implements ICluster."""
    return cast(eks.ICluster, cluster)
