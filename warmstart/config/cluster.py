"""The `cluster` section: the EKS cluster warmstart creates, or an existing one it adds to."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    model_validator,
)

from warmstart.checks.fix import removing
from warmstart.config.base import DNS_LABEL, SUPPORTED_KUBERNETES_VERSIONS, CidrBlock, RoleArn, Strict
from warmstart.problem import Refused

# An EKS prerequisite of an existing cluster: already there (make preflight checks it), added by warmstart, or
# missing (refused, with the command that adds it).
Prerequisite = Literal["present", "add", "none"]
IAM_ROLE_NAME = r"^[\w+=,.@-]{1,64}$"


class ExistingCluster(Strict):
    """An EKS cluster warmstart did not create: warmstart adds its own parts to it and never changes the cluster
    itself (its endpoint, logging, version, access entries other than its own)."""

    # The cluster security group EKS created (DescribeCluster: resourcesVpcConfig.clusterSecurityGroupId): GPU
    # nodes join with it, and the kubectl handler reaches a private endpoint through it.
    security_group_id: str = Field(pattern=r"^sg-[0-9a-f]{8,17}$")
    # cdk: warmstart applies its Kubernetes objects through its own kubectl handler, whose role gets a
    # cluster-admin access entry (the cluster's authentication mode must include API); gitops: `make synth`
    # writes them to dist/<env>/ with a kustomization, for Argo CD or Flux, and the stacks hold the AWS parts only.
    kubernetes_objects: Literal["cdk", "gitops"] = "cdk"
    # Security groups the GPU nodes join with beside the cluster security group: those the cluster's other nodes
    # have (terraform-aws-eks gives nodes their own group, which alone admits CoreDNS; make preflight compares).
    node_security_group_ids: list[Annotated[str, Field(pattern=r"^sg-[0-9a-f]{8,17}$")]] = Field(
        default_factory=list, max_length=4
    )
    # Karpenter mode (Auto Mode runs both itself): the EKS Pod Identity agent, through which every warmstart pod
    # gets its role, and the NVIDIA device plugin, which makes the GPUs schedulable.
    pod_identity_agent: Prerequisite | None = None
    nvidia_device_plugin: Prerequisite | None = None


class ClusterConfig(Strict):
    name: str = Field(pattern=r"^[a-zA-Z][-a-zA-Z0-9]{0,99}$")
    kubernetes_version: Literal[SUPPORTED_KUBERNETES_VERSIONS] = "1.35"  # type: ignore[valid-type]
    endpoint_access: Literal["public_and_private", "private"] = "public_and_private"
    # Only with public_and_private; empty means the EKS default (0.0.0.0/0).
    public_access_cidrs: list[CidrBlock] = Field(default_factory=list)
    # IAM roles that get cluster-admin through an EKS access entry.
    admin_role_arns: list[RoleArn] = Field(default_factory=list)
    # A cluster that exists already (name, version and endpoint_access above say what it is).
    existing: ExistingCluster | None = None
    # Namespaces whose node agents the cluster trusts as the node's root (monitoring and security agents:
    # CloudWatch, Datadog, Falco): warmstart's host-path policy leaves their mounts of `/`, `/mnt` or /proc to the
    # cluster's Pod Security. Elsewhere only a container that cannot become root, or is privileged, mounts them
    # (docs/trust-model.md, "What a cluster must allow").
    trusted_node_readers: list[Annotated[str, Field(pattern=DNS_LABEL)]] = Field(default_factory=list, max_length=20)

    @model_validator(mode="after")
    def _owned_settings(self) -> ClusterConfig:
        given = [name for name in ("public_access_cidrs", "admin_role_arns") if getattr(self, name)]
        if self.existing is not None and given:
            raise Refused(
                f"{', '.join(given)} beside existing: they configure a cluster warmstart creates",
                "remove them (grant access to your cluster where it is managed)",
                removing(*given),
            )
        return self

    @property
    def owned(self) -> bool:
        """Whether warmstart creates the cluster."""
        return self.existing is None

    @property
    def applies_kubernetes_objects(self) -> bool:
        """Whether the stacks apply the Kubernetes objects (else a GitOps tool applies dist/<env>/)."""
        return self.existing is None or self.existing.kubernetes_objects == "cdk"
