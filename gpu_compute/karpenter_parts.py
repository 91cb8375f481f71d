"""Self-managed Karpenter's parts: the system node group, the controller (Helm, Pod Identity, interruption queue,
GPU node role) and the NVIDIA device plugin; `karpenter.py` puts them together.

The controller's permissions follow the upstream getting-started CloudFormation (Karpenter v1.14):
every EC2 write is scoped to resources tagged for this cluster and a NodePool.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from construct_kit.nag import acknowledge, managed, wildcard
from construct_kit.pod_identity import PodIdentity
from construct_kit.source import cluster_ref
from gpu_compute.karpenter_policy import ControllerScope, controller_statements
from kube.gpu_nodes import device_plugin_placement
from warmstart.config.compute import SystemNodeGroup

KARPENTER_NAMESPACE = "kube-system"
KARPENTER_SERVICE_ACCOUNT = "karpenter"
KARPENTER_CHART_REPOSITORY = "oci://public.ecr.aws/karpenter/karpenter"
KARPENTER_CRD_CHART_REPOSITORY = "oci://public.ecr.aws/karpenter/karpenter-crd"

INTERRUPTION_EVENTS = {
    "ScheduledChange": ("aws.health", "AWS Health Event"),
    "SpotInterruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "Rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "InstanceStateChange": ("aws.ec2", "EC2 Instance State-change Notification"),
    "CapacityReservationInterruption": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}


class SystemNodes(Construct):
    """A small managed node group for Karpenter itself and cluster add-ons (never GPU work)."""

    def __init__(
        self, scope: Construct, id: str, *, cluster: eks.Cluster, group: SystemNodeGroup, subnets: ec2.SubnetSelection
    ) -> None:
        super().__init__(scope, id)
        self.nodegroup = eks.Nodegroup(
            self,
            "Nodegroup",
            cluster=cluster_ref(cluster),
            instance_types=[ec2.InstanceType(group.instance_type)],
            ami_type=eks.NodegroupAmiType.AL2023_X86_64_STANDARD,
            min_size=group.min_size,
            desired_size=group.min_size,
            max_size=group.max_size,
            subnets=subnets,
            labels={"warmstart.io/role": "system"},
        )
        acknowledge(
            self.nodegroup,
            "The managed node group's role as EKS documents it: joining the cluster, the VPC CNI, image pulls.",
            managed("AmazonEKSWorkerNodePolicy"),
            managed("AmazonEKS_CNI_Policy"),
            managed("AmazonEC2ContainerRegistryReadOnly"),
        )


class KarpenterController(Construct):
    def __init__(self, scope: Construct, id: str, *, cluster: eks.Cluster, cluster_name: str, version: str) -> None:
        super().__init__(scope, id)
        self._nodes(cluster, cluster_name)
        self._interruption()
        self._identity(cluster, cluster_name)
        self._charts(cluster, cluster_name, version)
        self._acknowledge_findings()

    def _nodes(self, cluster: eks.Cluster, cluster_name: str) -> None:
        """The role of the nodes Karpenter launches, and their access to the cluster."""
        self.node_role = iam.Role(
            self,
            "NodeRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"Nodes that Karpenter launches for {cluster_name}",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(name)
                for name in (
                    "AmazonEKSWorkerNodePolicy",
                    "AmazonEKS_CNI_Policy",
                    "AmazonEC2ContainerRegistryPullOnly",
                    "AmazonSSMManagedInstanceCore",
                )
            ],
        )
        self.node_access = eks.AccessEntry(
            self,
            "NodeAccess",
            cluster=cluster_ref(cluster),
            principal=self.node_role.role_arn,
            access_entry_type=eks.AccessEntryType.EC2_LINUX,
            access_policies=[],
        )

    def _interruption(self) -> None:
        """Spot interruptions, rebalance recommendations and scheduled changes, queued for the controller."""
        self.interruption_queue = sqs.Queue(
            self,
            "InterruptionQueue",
            retention_period=Duration.minutes(5),
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
        )
        self.interruption_rules = [
            events.Rule(
                self,
                f"{name}Rule",
                event_pattern=events.EventPattern(source=[source], detail_type=[detail_type]),
                targets=[targets.SqsQueue(self.interruption_queue)],
            )
            for name, (source, detail_type) in INTERRUPTION_EVENTS.items()
        ]

    def _identity(self, cluster: eks.Cluster, cluster_name: str) -> None:
        """The controller's Pod Identity role and its managed policies."""
        self.identity = PodIdentity(
            self,
            "Identity",
            cluster=cluster,
            namespace=KARPENTER_NAMESPACE,
            service_account=KARPENTER_SERVICE_ACCOUNT,
            description=f"Karpenter controller of {cluster_name}",
        )
        stack = Stack.of(self)
        self.policies = [
            iam.ManagedPolicy(self, name, statements=statements, roles=[self.identity.role])
            for name, statements in controller_statements(
                ControllerScope(
                    cluster_name=cluster_name,
                    partition=stack.partition,
                    region=stack.region,
                    account=stack.account,
                    node_role_arn=self.node_role.role_arn,
                    queue_arn=self.interruption_queue.queue_arn,
                )
            ).items()
        ]

    def _charts(self, cluster: eks.Cluster, cluster_name: str, version: str) -> None:
        # The CRDs from their own chart: Helm installs a chart's crds/ once and never upgrades them, so a version
        # bump of the controller chart alone would run the new controller on old CRDs (Karpenter v1.14 upgrade
        # guide: "we recommend using the independent karpenter-crd chart to manage CRDs").
        pinned: dict[str, Any] = {
            "version": version,
            "namespace": KARPENTER_NAMESPACE,
            "create_namespace": False,
            "wait": True,
        }
        self.crds = cluster.add_helm_chart(
            "KarpenterCrd",
            chart="karpenter-crd",
            repository=KARPENTER_CRD_CHART_REPOSITORY,
            release="karpenter-crd",
            # Kept when the environment leaves Karpenter for Auto Mode: the NodePool and NodeClaim CRDs are
            # shared with EKS Auto Mode ("do not update or modify these CRDs during migration", EKS user guide,
            # Migrate from Karpenter to EKS Auto Mode), and `helm uninstall` of this chart deletes them, with every
            # NodePool and NodeClaim of the cluster. docs/upgrades.md says how to remove the release afterwards.
            removal_policy=RemovalPolicy.RETAIN,
            **pinned,
        )
        self.chart = cluster.add_helm_chart(
            "Karpenter",
            chart="karpenter",
            repository=KARPENTER_CHART_REPOSITORY,
            release="karpenter",
            # Declared, though the kubectl handler of aws-cdk-lib 2.275 does not pass it on to `helm upgrade`
            # (aws/aws-cdk#31831); harmless: Helm installs a chart's crds/ only where they are absent, and the
            # karpenter-crd release has installed them already.
            skip_crds=True,
            values={
                "settings": {"clusterName": cluster_name, "interruptionQueue": self.interruption_queue.queue_name},
                "serviceAccount": {"name": KARPENTER_SERVICE_ACCOUNT},
                "replicas": 2,
                "controller": {
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
                },
            },
            **pinned,
        )
        # CRDs and credentials must exist before the controller starts.
        self.chart.node.add_dependency(self.crds, self.identity.association)
        for policy in self.policies:
            self.chart.node.add_dependency(policy)

    def _acknowledge_findings(self) -> None:
        stack = Stack.of(self)
        region, account = stack.region, stack.account
        acknowledge(
            self.node_role,
            "The node role Karpenter's v1 guide prescribes: join the cluster, VPC CNI, image pulls, SSM access.",
            managed("AmazonEKSWorkerNodePolicy"),
            managed("AmazonEKS_CNI_Policy"),
            managed("AmazonEC2ContainerRegistryPullOnly"),
            managed("AmazonSSMManagedInstanceCore"),
        )
        acknowledge(
            self.interruption_queue,
            "Interruption notices are only useful for minutes (5-minute retention); Karpenter deletes each one it "
            "handles and a failed one is re-delivered, so a dead-letter queue would only collect stale notices.",
            "AwsSolutions-SQS3",
        )
        ec2 = f"arn:aws:ec2:{region}"
        launched = ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")
        lifecycle, iam_integration, _, _, discovery = self.policies
        acknowledge(
            lifecycle,
            "IDs of instances, volumes, fleets and launch templates do not exist before launch; every write is "
            "conditioned on the cluster-ownership and NodePool tags (upstream Karpenter v1.14 policy).",
            *(wildcard(f"{ec2}:*:{kind}/*") for kind in launched),
        )
        acknowledge(
            lifecycle,
            "RunInstances/CreateFleet must reference the AMIs, snapshots, subnets, security groups, capacity "
            "reservations and placement groups that the EC2NodeClass selects at run time.",
            wildcard(f"{ec2}::image/*"),
            wildcard(f"{ec2}::snapshot/*"),
            *(
                wildcard(f"{ec2}:*:{kind}/*")
                for kind in ("security-group", "subnet", "capacity-reservation", "placement-group")
            ),
        )
        acknowledge(
            iam_integration,
            "Karpenter names the instance profiles it creates; every action is conditioned on this cluster's "
            "ownership, region and EC2NodeClass tags.",
            wildcard(f"arn:aws:iam::{account}:instance-profile/*"),
        )
        acknowledge(
            discovery,
            "Read-only discovery: Describe* calls (limited to this region by condition), pricing, instance-profile "
            "reads and the public EKS AMI parameters under /aws/service/; these APIs take no resource ARNs.",
            wildcard("*"),
            wildcard(f"arn:aws:iam::{account}:instance-profile/*"),
            wildcard(f"arn:aws:ssm:{region}::parameter/aws/service/*"),
        )


class NvidiaDevicePlugin(Construct):
    """Advertises nvidia.com/gpu on Karpenter's GPU nodes (Auto Mode ships its own)."""

    def __init__(self, scope: Construct, id: str, *, cluster: eks.Cluster, version: str) -> None:
        super().__init__(scope, id)
        self.chart = cluster.add_helm_chart(
            "NvidiaDevicePlugin",
            chart="nvidia-device-plugin",
            repository="https://nvidia.github.io/k8s-device-plugin",
            version=version,
            release="nvidia-device-plugin",
            namespace="kube-system",
            create_namespace=False,
            values=device_plugin_placement(),
        )
