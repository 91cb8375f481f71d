"""Self-managed Karpenter's controller permissions, one managed policy per concern, as the upstream
getting-started CloudFormation (Karpenter v1.14) writes them: every EC2 write is scoped to resources tagged for
this cluster and a NodePool."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import aws_iam as iam

LAUNCHED_KINDS = ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")


@dataclass(frozen=True)
class ControllerScope:
    """What the controller's statements are scoped to."""

    cluster_name: str
    partition: str
    region: str
    account: str
    node_role_arn: str
    queue_arn: str

    @property
    def ec2_arn(self) -> str:
        return f"arn:{self.partition}:ec2:{self.region}"

    @property
    def owned(self) -> dict[str, str]:
        return {f"aws:ResourceTag/kubernetes.io/cluster/{self.cluster_name}": "owned"}

    @property
    def request_owned(self) -> dict[str, str]:
        return {
            f"aws:RequestTag/kubernetes.io/cluster/{self.cluster_name}": "owned",
            "aws:RequestTag/eks:eks-cluster-name": self.cluster_name,
        }

    @property
    def launched(self) -> list[str]:
        return [f"{self.ec2_arn}:*:{kind}/*" for kind in LAUNCHED_KINDS]

    @property
    def profile_arn(self) -> str:
        return f"arn:{self.partition}:iam::{self.account}:instance-profile/*"

    @property
    def in_region(self) -> dict[str, str]:
        return {"aws:ResourceTag/topology.kubernetes.io/region": self.region}


def controller_statements(scope: ControllerScope) -> dict[str, list[iam.PolicyStatement]]:
    """The statements of each of the controller's managed policies, by the policy's name."""
    return {
        "NodeLifecycle": node_lifecycle(scope),
        "IamIntegration": iam_integration(scope),
        "EksIntegration": eks_integration(scope),
        "Interruption": interruption(scope),
        "ResourceDiscovery": resource_discovery(scope),
    }


def node_lifecycle(scope: ControllerScope) -> list[iam.PolicyStatement]:
    """Launch, tag and terminate only this cluster's NodePool instances and launch templates."""
    return [
        iam.PolicyStatement(
            sid="AllowScopedEC2InstanceAccessActions",
            actions=["ec2:RunInstances", "ec2:CreateFleet"],
            resources=[
                f"{scope.ec2_arn}::image/*",
                f"{scope.ec2_arn}::snapshot/*",
                *(
                    f"{scope.ec2_arn}:*:{kind}/*"
                    for kind in ("security-group", "subnet", "capacity-reservation", "placement-group")
                ),
            ],
        ),
        iam.PolicyStatement(
            sid="AllowScopedEC2LaunchTemplateAccessActions",
            actions=["ec2:RunInstances", "ec2:CreateFleet"],
            resources=[f"{scope.ec2_arn}:*:launch-template/*"],
            conditions={"StringEquals": scope.owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
        ),
        iam.PolicyStatement(
            sid="AllowScopedEC2InstanceActionsWithTags",
            actions=["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
            resources=scope.launched,
            conditions={
                "StringEquals": scope.request_owned,
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        ),
        *node_tagging(scope),
    ]


def node_tagging(scope: ControllerScope) -> list[iam.PolicyStatement]:
    """Tag what it launched at creation; re-tag and delete only this cluster's NodePool instances."""
    return [
        iam.PolicyStatement(
            sid="AllowScopedResourceCreationTagging",
            actions=["ec2:CreateTags"],
            resources=scope.launched,
            conditions={
                "StringEquals": {
                    **scope.request_owned,
                    "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"],
                },
                "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedResourceTagging",
            actions=["ec2:CreateTags"],
            resources=[f"{scope.ec2_arn}:*:instance/*"],
            conditions={
                "StringEquals": scope.owned,
                "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": scope.cluster_name},
                "ForAllValues:StringEquals": {
                    "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                },
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedDeletion",
            actions=["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
            resources=[f"{scope.ec2_arn}:*:instance/*", f"{scope.ec2_arn}:*:launch-template/*"],
            conditions={"StringEquals": scope.owned, "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}},
        ),
    ]


def iam_integration(scope: ControllerScope) -> list[iam.PolicyStatement]:
    """Pass the GPU node role; manage only this cluster's instance profiles."""
    return [
        iam.PolicyStatement(
            sid="AllowPassingInstanceRole",
            actions=["iam:PassRole"],
            resources=[scope.node_role_arn],
            conditions={"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}},
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileCreationActions",
            actions=["iam:CreateInstanceProfile"],
            resources=[scope.profile_arn],
            conditions={
                "StringEquals": {**scope.request_owned, "aws:RequestTag/topology.kubernetes.io/region": scope.region},
                "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileTagActions",
            actions=["iam:TagInstanceProfile"],
            resources=[scope.profile_arn],
            conditions={
                "StringEquals": {
                    **scope.owned,
                    **scope.in_region,
                    **scope.request_owned,
                    "aws:RequestTag/topology.kubernetes.io/region": scope.region,
                },
                "StringLike": {
                    "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                    "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*",
                },
            },
        ),
        iam.PolicyStatement(
            sid="AllowScopedInstanceProfileActions",
            actions=[
                "iam:AddRoleToInstanceProfile",
                "iam:RemoveRoleFromInstanceProfile",
                "iam:DeleteInstanceProfile",
            ],
            resources=[scope.profile_arn],
            conditions={
                "StringEquals": {**scope.owned, **scope.in_region},
                "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"},
            },
        ),
    ]


def eks_integration(scope: ControllerScope) -> list[iam.PolicyStatement]:
    """Read this cluster's API endpoint."""
    return [
        iam.PolicyStatement(
            sid="AllowAPIServerEndpointDiscovery",
            actions=["eks:DescribeCluster"],
            resources=[f"arn:{scope.partition}:eks:{scope.region}:{scope.account}:cluster/{scope.cluster_name}"],
        ),
    ]


def interruption(scope: ControllerScope) -> list[iam.PolicyStatement]:
    """Read and delete the interruption queue's messages."""
    return [
        iam.PolicyStatement(
            sid="AllowInterruptionQueueActions",
            actions=["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
            resources=[scope.queue_arn],
        ),
    ]


def resource_discovery(scope: ControllerScope) -> list[iam.PolicyStatement]:
    """Read-only discovery of this Region's instance types, prices, images and instance profiles."""
    return [
        iam.PolicyStatement(
            sid="AllowRegionalReadActions",
            actions=[
                "ec2:DescribeCapacityReservations",
                "ec2:DescribeImages",
                "ec2:DescribeInstances",
                "ec2:DescribeInstanceStatus",
                "ec2:DescribeInstanceTypeOfferings",
                "ec2:DescribeInstanceTypes",
                "ec2:DescribeLaunchTemplates",
                "ec2:DescribePlacementGroups",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSpotPriceHistory",
                "ec2:DescribeSubnets",
            ],
            resources=["*"],
            conditions={"StringEquals": {"aws:RequestedRegion": scope.region}},
        ),
        iam.PolicyStatement(
            sid="AllowSSMReadActions",
            actions=["ssm:GetParameter"],
            resources=[f"arn:{scope.partition}:ssm:{scope.region}::parameter/aws/service/*"],
        ),
        iam.PolicyStatement(sid="AllowPricingReadActions", actions=["pricing:GetProducts"], resources=["*"]),
        iam.PolicyStatement(
            sid="AllowUnscopedInstanceProfileListAction", actions=["iam:ListInstanceProfiles"], resources=["*"]
        ),
        iam.PolicyStatement(
            sid="AllowInstanceProfileReadActions", actions=["iam:GetInstanceProfile"], resources=[scope.profile_arn]
        ),
    ]
