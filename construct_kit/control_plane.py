"""The EKS control plane (aws_eks_v2): logging, endpoint access, secrets encryption, admin access; or an existing
cluster's, imported, with the kubectl handler warmstart applies its objects through."""

from __future__ import annotations

from typing import Protocol

import jsii
from aws_cdk import Aspects, IAspect
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from constructs import Construct, IConstruct

from construct_kit.nag import acknowledge, arn_wildcard, logical_id, managed
from construct_kit.network import ClusterNetwork
from warmstart.config.cluster import ClusterConfig, ExistingCluster

ALL_CONTROL_PLANE_LOGS = [
    eks.ClusterLoggingTypes.API,
    eks.ClusterLoggingTypes.AUDIT,
    eks.ClusterLoggingTypes.AUTHENTICATOR,
    eks.ClusterLoggingTypes.CONTROLLER_MANAGER,
    eks.ClusterLoggingTypes.SCHEDULER,
]


def endpoint_access(cluster: ClusterConfig) -> eks.EndpointAccess:
    if cluster.endpoint_access == "private":
        return eks.EndpointAccess.PRIVATE
    if cluster.public_access_cidrs:
        return eks.EndpointAccess.PUBLIC_AND_PRIVATE.only_from(*cluster.public_access_cidrs)
    return eks.EndpointAccess.PUBLIC_AND_PRIVATE


def gpu_node_security_groups(config: ClusterConfig, cluster: eks.Cluster) -> list[str]:
    """The cluster security group, and in an existing cluster the node groups its other nodes have."""
    extra = config.existing.node_security_group_ids if config.existing else []
    return [cluster.cluster_security_group_id, *extra]


class ClusterHandle(Protocol):
    """A cluster, created or imported, on which later constructs add charts with `cluster.add_cdk8s_chart`."""

    @property
    def cluster(self) -> eks.Cluster: ...


CLUSTER_ADMIN = eks.AccessPolicy.from_access_policy_name(
    "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
)


class ControlPlane(Construct):
    """Exposes `cluster`, on which later constructs add charts with `cluster.add_cdk8s_chart`."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterConfig,
        network: ClusterNetwork,
        capacity: eks.DefaultCapacityType,
        compute: eks.ComputeConfig | None,
    ) -> None:
        super().__init__(scope, id)
        self.secrets_key = kms.Key(
            self, "SecretsKey", enable_key_rotation=True, description=f"{cluster.name} Kubernetes secrets"
        )
        self.cluster = eks.Cluster(
            self,
            "Cluster",
            cluster_name=cluster.name,
            version=eks.KubernetesVersion.of(cluster.kubernetes_version),
            vpc=network.vpc,
            vpc_subnets=[network.private_subnets],
            endpoint_access=endpoint_access(cluster),
            cluster_logging=ALL_CONTROL_PLANE_LOGS,
            secrets_encryption_key=self.secrets_key,
            kubectl_provider_options=eks.KubectlProviderOptions(kubectl_layer=KubectlV35Layer(self, "KubectlLayer")),
            default_capacity_type=capacity,
            default_capacity=0 if capacity == eks.DefaultCapacityType.NODEGROUP else None,
            compute=compute,
        )
        for index, role_arn in enumerate(cluster.admin_role_arns):
            self.cluster.grant_access(f"Admin{index}", role_arn, [CLUSTER_ADMIN])
        acknowledge(
            self.cluster.role,
            "EKS requires these AWS-managed policies on the cluster role (Auto Mode adds compute, block storage, "
            "load balancing and networking); AWS maintains them as EKS gains features.",
            *(
                managed(name)
                for name in (
                    "AmazonEKSClusterPolicy",
                    "AmazonEKSComputePolicy",
                    "AmazonEKSBlockStoragePolicy",
                    "AmazonEKSLoadBalancingPolicy",
                    "AmazonEKSNetworkingPolicy",
                )
            ),
        )
        acknowledge_kubectl_provider(self.cluster.node.find_child("KubectlProvider"))


def acknowledge_kubectl_provider(provider: IConstruct) -> None:
    """aws-cdk-lib's kubectl provider (custom resources that apply manifests and Helm charts)."""
    handler = provider.node.find_child("Handler")
    ecr_public = handler.node.find_child("HasEcrPublic")  # aws-cdk-lib's condition on the partition
    acknowledge(
        provider,
        "Roles created by aws-cdk-lib's kubectl provider: Lambda logging, running in the VPC (private "
        "endpoint) and pulling the kubectl image layers; not ours to narrow.",
        managed("service-role/AWSLambdaBasicExecutionRole"),
        managed("service-role/AWSLambdaVPCAccessExecutionRole"),
        managed("AmazonEC2ContainerRegistryReadOnly"),
        f'AwsSolutions-IAM4[Policy::{{"Fn::If":["{logical_id(ecr_public)}",'
        '{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/'
        'AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}]',
    )
    acknowledge(
        provider,
        "The provider framework invokes its handler function and the function's versions (ARN:*).",
        arn_wildcard(handler),
    )
    acknowledge(
        provider,
        "The handler's runtime is chosen by aws-cdk-lib's kubectl provider and moves with aws-cdk-lib upgrades.",
        "AwsSolutions-L1",
    )


@jsii.implements(IAspect)
class AfterKubectlAccess:
    """Every Kubernetes object of a stack waits for the access entry that lets the kubectl handler in: an imported
    cluster has none of the ordering aws-cdk-lib gives the clusters it creates."""

    def __init__(self, access: Construct) -> None:
        self.access = access

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, (eks.KubernetesManifest, eks.HelmChart, eks.KubernetesPatch, eks.KubernetesObjectValue)):
            node.node.add_dependency(self.access)


class ImportedControlPlane(Construct):
    """An existing cluster's control plane, imported from the config (no lookup at synth). With Kubernetes objects
    applied by CDK, warmstart's own kubectl handler (in the cluster's subnets, with its security group, when the
    endpoint is private) and a cluster-admin access entry for the handler's role, which every object of the stack
    waits for; with GitOps, no handler: nothing of warmstart's can reach into the cluster."""

    def __init__(
        self, scope: Construct, id: str, *, cluster: ClusterConfig, existing: ExistingCluster, network: ClusterNetwork
    ) -> None:
        super().__init__(scope, id)
        private = cluster.endpoint_access == "private"
        self.security_group = ec2.SecurityGroup.from_security_group_id(
            self, "ClusterSecurityGroup", existing.security_group_id, mutable=False
        )
        self.kubectl_provider: eks.KubectlProvider | None = None
        self.kubectl_access: eks.AccessEntry | None = None

        def imported(id: str, provider: eks.KubectlProvider | None = None) -> eks.ICluster:
            return eks.Cluster.from_cluster_attributes(
                self,
                id,
                cluster_name=cluster.name,
                cluster_security_group_id=existing.security_group_id,
                vpc=network.vpc,
                kubectl_provider=provider,
            )

        if existing.kubernetes_objects == "gitops":
            self.imported = imported("Cluster")
            return
        # An imported cluster ignores kubectl_provider_options: the provider is made for a bare import of the same
        # cluster, then handed to the import every chart uses.
        self.kubectl_provider = eks.KubectlProvider(
            self,
            "KubectlProvider",
            cluster=imported("ClusterForKubectl"),
            kubectl_layer=KubectlV35Layer(self, "KubectlLayer"),
            private_subnets=network.private_subnet_list() if private else None,
            security_groups=[self.security_group] if private else None,
        )
        self.imported = imported("Cluster", self.kubectl_provider)
        handler_role = self.kubectl_provider.role
        assert handler_role is not None  # the provider always has its handler's role
        self.kubectl_access = eks.AccessEntry(
            self,
            "KubectlAccess",
            cluster=self.imported,
            principal=handler_role.role_arn,
            access_policies=[CLUSTER_ADMIN],
        )
        Aspects.of(scope).add(AfterKubectlAccess(self.kubectl_access))
        acknowledge_kubectl_provider(self.kubectl_provider)

    @property
    def cluster(self) -> eks.Cluster:
        # Typed as the Cluster the charts' constructs take: they use only what ICluster has.
        return self.imported  # type: ignore[return-value]
