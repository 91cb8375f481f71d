"""Every cdk-nag AwsSolutions finding warmstart accepts, each with its reason, in this one module.

Each acknowledgment is attached to the narrowest construct that produces the finding, and names the
exact finding (cdk-nag brackets the offending policy or resource), so a new finding elsewhere still fails
synth. Finding IDs are built from the same config values the stacks use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_cdk import Acknowledgment, Validations
from constructs import IConstruct

from stacks.components.image_snapshot import ImageSnapshotBuild
from stacks.components.karpenter import KarpenterController
from stacks.components.pod_identity import ModelReader
from stacks.components.pruner import CompileCachePruner
from warmstart.config import AutoModeCompute, EnvironmentConfig

if TYPE_CHECKING:
    from stacks.compose import EnvironmentStacks


def _managed(policy: str) -> str:
    return f"AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/{policy}]"


def _wildcard(resource: str) -> str:
    return f"AwsSolutions-IAM5[Resource::{resource}]"


def _acknowledge(scope: IConstruct, reason: str, *finding_ids: str) -> None:
    for finding_id in finding_ids:
        # "<plugin>::<rule>": an ID without the plugin prefix would be taken for an annotation rule.
        plugin_id = finding_id if "::" in finding_id.split("[", 1)[0] else f"AwsSolutions::{finding_id}"
        Validations.of(scope).acknowledge(Acknowledgment(id=plugin_id, reason=reason))


def acknowledge_findings(stacks: EnvironmentStacks, config: EnvironmentConfig) -> None:
    _acknowledge(
        stacks.network,
        "The AZs are fixed in the environment's config on purpose: synth must never look them up (no "
        "credentials, no network), and a deploy must never move subnets to other zones.",
        "CloudFormation-Validate::W3010",
    )
    cluster_stack = stacks.cluster
    cluster = cluster_stack.cluster
    _kubectl_provider(cluster.node.find_child("KubectlProvider"))
    _acknowledge(
        cluster.role,
        "EKS requires these AWS-managed policies on the cluster role (Auto Mode adds compute, block storage, "
        "load balancing and networking); AWS maintains them as EKS gains features.",
        *(
            _managed(name)
            for name in (
                "AmazonEKSClusterPolicy",
                "AmazonEKSComputePolicy",
                "AmazonEKSBlockStoragePolicy",
                "AmazonEKSLoadBalancingPolicy",
                "AmazonEKSNetworkingPolicy",
            )
        ),
    )
    if isinstance(config.compute, AutoModeCompute):
        if config.tags:
            _acknowledge(
                cluster_stack.custom_tags.policy,
                "The documented grant for custom tags on Auto Mode resources (EKS user guide, Auto Mode cluster "
                "IAM role): instances, launch templates, volumes, snapshots and interfaces have no ARN before "
                "they exist; every creation must carry this cluster's eks:eks-cluster-name tag, and re-tagging "
                "is limited to resources that already carry it.",
                _wildcard("*"),
                *(
                    _wildcard(f"arn:aws:ec2:*:*:{kind}/*")
                    for kind in ("volume", "snapshot", "instance", "network-interface", "launch-template")
                ),
            )
        _acknowledge(
            cluster_stack.auto_node_role.role,
            "The two AWS-managed policies EKS documents for the Auto Mode node role: minimal node permissions "
            "and image pulls.",
            _managed("AmazonEKSWorkerNodeMinimalPolicy"),
            _managed("AmazonEC2ContainerRegistryPullOnly"),
        )
    else:
        _acknowledge(
            cluster_stack.system_nodes.nodegroup,
            "The managed node group's role as EKS documents it: joining the cluster, the VPC CNI, image pulls.",
            _managed("AmazonEKSWorkerNodePolicy"),
            _managed("AmazonEKS_CNI_Policy"),
            _managed("AmazonEC2ContainerRegistryReadOnly"),
        )
        _karpenter(cluster_stack.karpenter, config)
    for model_stack in stacks.models.values():
        _model_reader(model_stack.workload.reader)
    _pruner(stacks.pruner.pruner, config)
    if cluster_stack.image_snapshot is not None:
        _image_snapshot(cluster_stack.image_snapshot, config)
    agent = cluster_stack.node_agent
    if agent is not None and agent.policy is not None:
        _acknowledge(
            agent.policy,
            "The agent reads and writes cache archives under compile-cache/ only; their names are content "
            "hashes of compiled kernels, unknown at synth.",
            _wildcard(f"arn:aws:s3:::{config.buckets.compile_cache}/compile-cache/*"),
        )
    if agent is not None:
        for policy in agent.weights_policies:
            _acknowledge(
                policy,
                "The agent copies the cached models' files to node NVMe: read-only, under each model's own "
                "prefix; the file names change with every model update.",
                *(_wildcard(f"arn:aws:s3:::{config.buckets.models.name}/{model.prefix}*") for model in config.models),
            )


def _kubectl_provider(provider: IConstruct) -> None:
    """aws-cdk-lib's kubectl provider (custom resources that apply manifests and Helm charts)."""
    _acknowledge(
        provider,
        "Roles created by aws-cdk-lib's kubectl provider: Lambda logging, running in the VPC (private "
        "endpoint) and pulling the kubectl image layers; not ours to narrow.",
        _managed("service-role/AWSLambdaBasicExecutionRole"),
        _managed("service-role/AWSLambdaVPCAccessExecutionRole"),
        _managed("AmazonEC2ContainerRegistryReadOnly"),
        'AwsSolutions-IAM4[Policy::{"Fn::If":["ControlPlaneClusterKubectlProviderHandlerHasEcrPublic6AA9E5D7",'
        '{"Fn::Join":["",["arn:",{"Ref":"AWS::Partition"},":iam::aws:policy/'
        'AmazonElasticContainerRegistryPublicReadOnly"]]},{"Ref":"AWS::NoValue"}]}]',
    )
    _acknowledge(
        provider,
        "The provider framework invokes its handler function and the function's versions (ARN:*).",
        "AwsSolutions-IAM5[Resource::<ControlPlaneClusterKubectlProviderHandler4C29DBB3.Arn>:*]",
    )
    _acknowledge(
        provider,
        "The handler's runtime is chosen by aws-cdk-lib's kubectl provider and moves with aws-cdk-lib upgrades.",
        "AwsSolutions-L1",
    )


def _karpenter(karpenter: KarpenterController, config: EnvironmentConfig) -> None:
    _acknowledge(
        karpenter.node_role,
        "The node role Karpenter's v1 guide prescribes: join the cluster, VPC CNI, image pulls, SSM access.",
        _managed("AmazonEKSWorkerNodePolicy"),
        _managed("AmazonEKS_CNI_Policy"),
        _managed("AmazonEC2ContainerRegistryPullOnly"),
        _managed("AmazonSSMManagedInstanceCore"),
    )
    _acknowledge(
        karpenter.interruption_queue,
        "Interruption notices are only useful for minutes (5-minute retention); Karpenter deletes each one it "
        "handles and a failed one is re-delivered, so a dead-letter queue would only collect stale notices.",
        "AwsSolutions-SQS3",
    )
    region, account = config.region, config.account
    ec2 = f"arn:aws:ec2:{region}"
    launched = ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")
    lifecycle, iam_integration, _, _, discovery = karpenter.policies
    _acknowledge(
        lifecycle,
        "IDs of instances, volumes, fleets and launch templates do not exist before launch; every write is "
        "conditioned on the cluster-ownership and NodePool tags (upstream Karpenter v1.14 policy).",
        *(_wildcard(f"{ec2}:*:{kind}/*") for kind in launched),
    )
    _acknowledge(
        lifecycle,
        "RunInstances/CreateFleet must reference the AMIs, snapshots, subnets, security groups, capacity "
        "reservations and placement groups that the EC2NodeClass selects at run time.",
        _wildcard(f"{ec2}::image/*"),
        _wildcard(f"{ec2}::snapshot/*"),
        *(
            _wildcard(f"{ec2}:*:{kind}/*")
            for kind in ("security-group", "subnet", "capacity-reservation", "placement-group")
        ),
    )
    _acknowledge(
        iam_integration,
        "Karpenter names the instance profiles it creates; every action is conditioned on this cluster's "
        "ownership, region and EC2NodeClass tags.",
        _wildcard(f"arn:aws:iam::{account}:instance-profile/*"),
    )
    _acknowledge(
        discovery,
        "Read-only discovery: Describe* calls (limited to this region by condition), pricing, instance-profile "
        "reads and the public EKS AMI parameters under /aws/service/; these APIs take no resource ARNs.",
        _wildcard("*"),
        _wildcard(f"arn:aws:iam::{account}:instance-profile/*"),
        _wildcard(f"arn:aws:ssm:{region}::parameter/aws/service/*"),
    )


def _pruner(pruner: CompileCachePruner, config: EnvironmentConfig) -> None:
    if config.pruning.extra_active_set_parameters:
        _acknowledge(
            pruner.policy,
            "Another environment's active set may be split into parts (<name>-2, ...) whose number only its "
            "first parameter tells at run time; read-only, under that environment's own parameter name.",
            *(
                _wildcard(f"arn:aws:ssm:{config.region}:{config.account}:parameter{name}-*")
                for name in config.pruning.extra_active_set_parameters
            ),
        )
    _acknowledge(
        pruner.policy,
        "The pruner deletes stale compile-cache objects, whose names are only known by listing; the grant is "
        "limited to the compile-cache/ prefix of the environment's own bucket.",
        _wildcard(f"arn:aws:s3:::{config.buckets.compile_cache}/compile-cache/*"),
    )
    _acknowledge(
        pruner.policy,
        "Log streams of the function's own log group are created by the Lambda runtime with generated names.",
        f"AwsSolutions-IAM5[Resource::<{_logical_id(pruner.log_group)}.Arn>:*]",
    )
    _acknowledge(
        pruner.scheduler_role,
        "EventBridge Scheduler's role may invoke the pruner function and its versions (ARN:*), nothing else.",
        f"AwsSolutions-IAM5[Resource::<{_logical_id(pruner.function)}.Arn>:*]",
    )


def _image_snapshot(build: ImageSnapshotBuild, config: EnvironmentConfig) -> None:
    region, account = config.region, config.account
    ec2 = f"arn:aws:ec2:{region}"
    _acknowledge(
        build.builder_role,
        "The policy SSM documents for a managed instance (the agent registers and receives Run Command), and "
        "image pulls, which Bottlerocket needs for its own control and admin containers from AWS's registry; the "
        "builder has nothing else and pulls the serving images anonymously.",
        _managed("AmazonSSMManagedInstanceCore"),
        _managed("AmazonEC2ContainerRegistryPullOnly"),
    )
    _acknowledge(
        build.workflow_policy,
        "The builder's instance, volumes, interface and snapshot have no ID before the workflow creates them: "
        "creating them requires this environment's tag, and stop, terminate, snapshot and Run Command apply only "
        "to resources carrying it; the AMI is AWS's public Bottlerocket image resolved at run time; Describe, "
        "command-invocation reads, log delivery and X-Ray take no resource ARNs.",
        _wildcard("*"),
        _wildcard(f"{ec2}::image/*"),
        _wildcard(f"{ec2}::snapshot/*"),
        *(_wildcard(f"{ec2}:{account}:{kind}/*") for kind in ("instance", "volume", "network-interface")),
    )
    _acknowledge(
        build.function_policy,
        "The custom resource follows executions of its own state machine (IDs made per build), deletes only "
        "snapshots tagged for this environment and terminates only builders tagged for it; Describe calls take no "
        "resource ARNs.",
        _wildcard("*"),
        _wildcard(f"{ec2}::snapshot/*"),
        _wildcard(f"{ec2}:{account}:instance/*"),
        _wildcard(f"arn:aws:states:{region}:{account}:execution:<{_logical_id(build.state_machine)}.Name>:*"),
    )
    framework = build.provider.node
    for name in ("framework-onEvent", "framework-isComplete", "framework-onTimeout"):
        function = framework.find_child(name)
        _acknowledge(
            function,
            "aws-cdk-lib's custom resource provider framework: its functions log with the basic execution role "
            "and invoke the handler functions and their versions (ARN:*).",
            _managed("service-role/AWSLambdaBasicExecutionRole"),
            f"AwsSolutions-IAM5[Resource::<{_logical_id(build.functions['OnEvent'])}.Arn>:*]",
            f"AwsSolutions-IAM5[Resource::<{_logical_id(build.functions['IsComplete'])}.Arn>:*]",
        )
    waiter = framework.find_child("waiter-state-machine")
    _acknowledge(
        waiter,
        "aws-cdk-lib's provider framework waiter: it invokes the framework's own functions and versions (ARN:*) "
        "and offers no X-Ray setting; it logs ALL events to the build's log group (log delivery APIs take no "
        "resource ARNs).",
        _wildcard("*"),
        f"AwsSolutions-IAM5[Resource::<{_logical_id(framework.find_child('framework-isComplete'))}.Arn>:*]",
        f"AwsSolutions-IAM5[Resource::<{_logical_id(framework.find_child('framework-onTimeout'))}.Arn>:*]",
        "AwsSolutions-SF2",
    )


def _logical_id(construct) -> str:
    """The logical ID cdk-nag shows in a finding (as in the synthesized template)."""
    from aws_cdk import Stack

    resource = construct.node.default_child
    return Stack.of(construct).resolve(resource.logical_id)


def _model_reader(reader: ModelReader) -> None:
    bucket, prefix = reader.bucket_name, reader.prefix
    _acknowledge(
        reader.policy,
        "Object reads under this model's own prefix only; the object names are the model's files, "
        "unknown at synth and changed by every model update.",
        _wildcard(f"arn:aws:s3:::{bucket}/{prefix}*"),
    )
