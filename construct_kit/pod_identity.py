"""IAM roles for Kubernetes service accounts through EKS Pod Identity (never the IRSA annotation)."""

from __future__ import annotations

from aws_cdk import Aws, Stack
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from construct_kit.nag import acknowledge, wildcard
from construct_kit.source import cluster_ref


class PodIdentity(Construct):
    """A role that only `namespace/service_account` of `cluster` can assume, and its association."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.Cluster,
        namespace: str,
        service_account: str,
        description: str,
    ) -> None:
        super().__init__(scope, id)
        # Pod Identity calls sts:AssumeRole and sts:TagSession, tagging the session with the pod's cluster,
        # namespace and service account (EKS user guide, "Create an IAM role with a trust policy for EKS Pod
        # Identity"): the role trusts exactly that service account of that cluster, whatever association says.
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("pods.eks.amazonaws.com")
            .with_session_tags()
            .with_conditions(
                {
                    "StringEquals": {
                        "aws:RequestTag/eks-cluster-arn": cluster.cluster_arn,
                        "aws:RequestTag/kubernetes-namespace": namespace,
                        "aws:RequestTag/kubernetes-service-account": service_account,
                    }
                }
            ),
            description=description,
        )
        self.association = eks.CfnPodIdentityAssociation(
            self,
            "Association",
            cluster_name=cluster.cluster_name,
            namespace=namespace,
            service_account=service_account,
            role_arn=self.role.role_arn,
        )


class ModelReader(Construct):
    """The role of one served model's service account: read-only on that model's S3 prefix."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        cluster: eks.Cluster,
        namespace: str,
        service_account: str,
        bucket_name: str,
        prefix: str,
        kms_key_arn: str | None,
    ) -> None:
        super().__init__(scope, id)
        self.bucket_name = bucket_name
        self.prefix = prefix
        self.identity = PodIdentity(
            self,
            "Identity",
            cluster=cluster,
            namespace=namespace,
            service_account=service_account,
            description=f"Read-only access to s3://{bucket_name}/{prefix} for {namespace}/{service_account}",
        )
        self.policy = iam.Policy(
            self,
            "ReadModel",
            statements=model_read_statements(bucket_name, prefix, kms_key_arn, partition=Stack.of(self).partition),
            roles=[self.identity.role],
        )
        acknowledge(
            self.policy,
            "Object reads under this model's own prefix only; the object names are the model's files, "
            "unknown at synth and changed by every model update.",
            wildcard(f"arn:aws:s3:::{bucket_name}/{prefix}*"),
        )


def model_read_statements(
    bucket_name: str, prefix: str | list[str], kms_key_arn: str | None, *, partition: str
) -> list[iam.PolicyStatement]:
    """GetObject (also HEAD and ranged GETs) under the prefix(es), and listing of those prefixes only."""
    bucket_arn = f"arn:{partition}:s3:::{bucket_name}"
    prefixes = [prefix] if isinstance(prefix, str) else prefix
    statements = [
        iam.PolicyStatement(
            sid="ReadModelObjects", actions=["s3:GetObject"], resources=[f"{bucket_arn}/{p}*" for p in prefixes]
        ),
        iam.PolicyStatement(
            sid="ListModelPrefix",
            actions=["s3:ListBucket"],
            resources=[bucket_arn],
            conditions={"StringLike": {"s3:prefix": [f"{p}*" for p in prefixes]}},
        ),
    ]
    if kms_key_arn:
        statements.append(
            iam.PolicyStatement(
                sid="DecryptModelObjects",
                actions=["kms:Decrypt"],
                resources=[kms_key_arn],
                conditions={"StringEquals": {"kms:ViaService": f"s3.{Aws.REGION}.amazonaws.com"}},
            )
        )
    return statements


class PodIdentityAgent(Construct):
    """The EKS add-on that hands out Pod Identity credentials (built into Auto Mode, added elsewhere)."""

    def __init__(self, scope: Construct, id: str, *, cluster: eks.Cluster) -> None:
        super().__init__(scope, id)
        self.addon = eks.Addon(self, "Addon", cluster=cluster_ref(cluster), addon_name="eks-pod-identity-agent")
