"""The EKS control plane (aws_eks_v2): logging, endpoint access, secrets encryption, admin access."""

from __future__ import annotations

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_kms as kms
from aws_cdk.lambda_layer_kubectl_v35 import KubectlV35Layer
from constructs import Construct

from stacks.components.nag import acknowledge, arn_wildcard, logical_id, managed
from stacks.components.network import WarmstartVpc
from warmstart.config import ClusterConfig

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


class ControlPlane(Construct):
    """Exposes `cluster`, on which later constructs add charts with `cluster.add_cdk8s_chart`."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: ClusterConfig,
        network: WarmstartVpc,
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
        cluster_admin = eks.AccessPolicy.from_access_policy_name(
            "AmazonEKSClusterAdminPolicy", access_scope_type=eks.AccessScopeType.CLUSTER
        )
        for index, role_arn in enumerate(cluster.admin_role_arns):
            self.cluster.grant_access(f"Admin{index}", role_arn, [cluster_admin])
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
        self._acknowledge_kubectl_provider()

    def _acknowledge_kubectl_provider(self) -> None:
        """aws-cdk-lib's kubectl provider (custom resources that apply manifests and Helm charts)."""
        provider = self.cluster.node.find_child("KubectlProvider")
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
