"""The image snapshot GPU nodes' data volumes start from (image_preload.mode: snapshot, Karpenter + Bottlerocket).

A Step Functions state machine builds it: it starts a Bottlerocket instance of the nodes' release in a private
subnet, pulls the serving images into containerd's store through SSM Run Command
(runtime/snapshot/pull-images.sh), stops the instance, snapshots its data volume (/dev/xvdb), records the
snapshot ID in SSM Parameter Store and terminates the instance (also when any step fails). A custom resource
runs it during `cdk deploy` whenever the image set changes and returns the snapshot ID, which the EC2NodeClass
names: Karpenter sees the node class drift and replaces the GPU nodes one at a time, each replacement launched
before its predecessor goes. The same resource deletes a set's snapshots once CloudFormation no longer needs
them (see runtime/snapshot/build.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import CustomResource, Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import custom_resources as cr
from constructs import Construct

from construct_kit.lambda_packaging import function_code
from construct_kit.log_retention import retention_days
from construct_kit.nag import acknowledge, arn_wildcard, logical_id, managed, wildcard
from image_preload.runtime.snapshot.build import BUILDER_TAG, ENVIRONMENT_TAG
from image_preload.snapshot_permissions import WorkflowScope, resource_statements, workflow_statements
from image_preload.snapshot_workflow import Builder, BuildStates
from warmstart.config.caches import ImageSnapshot as SnapshotSettings
from warmstart.image_preload import builder_commands, snapshot_parameter_name

RUNTIME = Path(__file__).resolve().parent / "runtime" / "snapshot"
PULL_SCRIPT = RUNTIME / "pull-images.sh"
FUNCTION_SOURCE = ("image_preload/runtime/snapshot",)
# The builder's OS volume and its data volume (Bottlerocket's split layout; the data volume is what is kept).


@dataclass(frozen=True)
class SnapshotRequest:
    """What a build takes from the environment's config: the images, their set's key, the nodes' OS release."""

    environment: str
    settings: SnapshotSettings
    images: Sequence[str]
    image_set_key: str
    ami_parameter: str


class ImageSnapshotBuild(Construct):
    """Exposes `snapshot_id` (a deploy-time value) for the EC2NodeClass."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        request: SnapshotRequest,
        vpc: ec2.IVpc,
        subnet: ec2.ISubnet,
    ) -> None:
        super().__init__(scope, id)
        self.parameter_name = snapshot_parameter_name(request.environment)
        self._builder(request.environment, vpc)
        self.log_group = logs.LogGroup(self, "Logs", retention=retention_days(90), removal_policy=RemovalPolicy.DESTROY)
        self._workflow(request, subnet)
        self._resource(request)
        self.snapshot_id = self.resource.get_att_string("SnapshotId")
        self._acknowledge_findings()

    def _builder(self, environment: str, vpc: ec2.IVpc) -> None:
        """The builder instance's role, profile and security group."""
        self.builder_role = iam.Role(
            self,
            "BuilderRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"warmstart {environment} image snapshot builder: SSM, and Bottlerocket's own host containers",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonSSMManagedInstanceCore"),
                # Bottlerocket pulls its control (SSM agent) and admin containers from AWS's ECR with the
                # instance role (bottlerocket-os/bottlerocket #851, #1139; the images-cache sample's builder role).
                iam.ManagedPolicy.from_aws_managed_policy_name("AmazonEC2ContainerRegistryPullOnly"),
            ],
        )
        self.instance_profile = iam.InstanceProfile(self, "BuilderProfile", role=self.builder_role)
        self.security_group = ec2.SecurityGroup(
            self,
            "BuilderSecurityGroup",
            vpc=vpc,
            allow_all_outbound=True,
            description="image snapshot builder: no inbound; outbound to registries, SSM and S3",
        )

    def _workflow(self, request: SnapshotRequest, subnet: ec2.ISubnet) -> None:
        """The build's state machine and its role."""
        environment, settings, stack = request.environment, request.settings, Stack.of(self)
        ami_parameter = request.ami_parameter
        tags = {BUILDER_TAG: environment, ENVIRONMENT_TAG: environment}
        commands = builder_commands(list(request.images), PULL_SCRIPT.read_text())
        # Every permission of the workflow is written out in `workflow_statements` (conditions included); the
        # state machine gets the role as immutable, so CDK adds no unconditioned statement per task.
        self.workflow_role = iam.Role(
            self,
            "WorkflowRole",
            assumed_by=iam.ServicePrincipal("states.amazonaws.com"),
            description=f"warmstart {environment} image snapshot workflow: one tagged builder, its snapshot",
        )
        self.workflow_policy = iam.Policy(
            self,
            "WorkflowAccess",
            roles=[self.workflow_role],
            statements=workflow_statements(
                WorkflowScope(
                    stack=stack,
                    environment=environment,
                    ami_parameter=request.ami_parameter,
                    subnet_id=subnet.subnet_id,
                    security_group_id=self.security_group.security_group_id,
                    builder_role_arn=self.builder_role.role_arn,
                    parameter_name=self.parameter_name,
                )
            ),
        )
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            definition_body=sfn.DefinitionBody.from_chainable(
                BuildStates(
                    self,
                    Builder(
                        settings=settings,
                        ami_parameter=ami_parameter,
                        subnet=subnet,
                        security_group=self.security_group,
                        instance_profile=self.instance_profile,
                        tags=tags,
                        commands=commands,
                        environment=environment,
                        parameter_name=self.parameter_name,
                    ),
                ).definition()
            ),
            role=iam.Role.from_role_arn(self, "WorkflowRoleRef", self.workflow_role.role_arn, mutable=False),
            # Past the poll budget (which fails the build and terminates the builder): a last resort only.
            timeout=Duration.minutes(settings.build_timeout_minutes + 5),
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=False),
            tracing_enabled=True,
        )
        # Step Functions checks the log delivery permissions when the state machine is created.
        self.state_machine.node.add_dependency(self.workflow_policy)

    def _resource(self, request: SnapshotRequest) -> None:
        """The custom resource that starts a build per image set and deletes its own snapshots."""
        environment, settings, stack = request.environment, request.settings, Stack.of(self)
        self.function_role = iam.Role(
            self,
            "ResourceRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"warmstart {environment} image snapshot resource: start builds, delete its own snapshots",
        )
        self.function_policy = iam.Policy(
            self,
            "ResourceAccess",
            roles=[self.function_role],
            statements=resource_statements(stack, environment, self.state_machine),
        )
        code = function_code(*FUNCTION_SOURCE)
        functions = {
            name: lambda_.Function(
                self,
                name,
                runtime=lambda_.Runtime.PYTHON_3_14,
                code=code,
                role=self.function_role,
                handler=f"image_preload.runtime.snapshot.handler.{handler}",
                timeout=Duration.minutes(2),
                memory_size=256,
                log_group=logs.LogGroup(
                    self, f"{name}Logs", retention=retention_days(90), removal_policy=RemovalPolicy.DESTROY
                ),
            )
            for name, handler in (("OnEvent", "on_event_handler"), ("IsComplete", "is_complete_handler"))
        }
        self.functions = functions
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=functions["OnEvent"],
            is_complete_handler=functions["IsComplete"],
            query_interval=Duration.minutes(1),
            disable_waiter_state_machine_logging=False,
            waiter_state_machine_log_options=cr.LogOptions(
                destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=False
            ),
            # The state machine's own timeout plus polling slack, within the framework's (and CloudFormation's) hour.
            total_timeout=Duration.minutes(min(60, settings.build_timeout_minutes + 10)),
        )
        self.resource = CustomResource(
            self,
            "Resource",
            service_token=self.provider.service_token,
            resource_type="Custom::WarmstartImageSnapshot",
            properties={
                "Environment": environment,
                "ImageSetKey": request.image_set_key,
                "StateMachineArn": self.state_machine.state_machine_arn,
                "Images": list(request.images),
            },
        )
        self.resource.node.add_dependency(self.function_policy)

    def _acknowledge_findings(self) -> None:
        build = self
        stack = Stack.of(self)
        region, account = stack.region, stack.account
        ec2 = f"arn:aws:ec2:{region}"
        acknowledge(
            build.builder_role,
            "The policy SSM documents for a managed instance (the agent registers and receives Run Command), and "
            "image pulls, which Bottlerocket needs for its own control and admin containers from AWS's registry; the "
            "builder has nothing else and pulls the serving images anonymously.",
            managed("AmazonSSMManagedInstanceCore"),
            managed("AmazonEC2ContainerRegistryPullOnly"),
        )
        acknowledge(
            build.workflow_policy,
            "The builder's instance, volumes, interface and snapshot have no ID before the workflow creates them: "
            "creating them requires this environment's tag, and stop, terminate, snapshot and Run Command apply only "
            "to resources carrying it; the AMI is AWS's public Bottlerocket image resolved at run time; Describe, "
            "command-invocation reads, log delivery and X-Ray take no resource ARNs.",
            wildcard("*"),
            wildcard(f"{ec2}::image/*"),
            wildcard(f"{ec2}::snapshot/*"),
            *(wildcard(f"{ec2}:{account}:{kind}/*") for kind in ("instance", "volume", "network-interface")),
        )
        acknowledge(
            build.function_policy,
            "The custom resource follows executions of its own state machine (IDs made per build), deletes only "
            "snapshots tagged for this environment and terminates only builders tagged for it; Describe calls take no "
            "resource ARNs.",
            wildcard("*"),
            wildcard(f"{ec2}::snapshot/*"),
            wildcard(f"{ec2}:{account}:instance/*"),
            wildcard(f"arn:aws:states:{region}:{account}:execution:<{logical_id(build.state_machine)}.Name>:*"),
        )
        framework = build.provider.node
        for name in ("framework-onEvent", "framework-isComplete", "framework-onTimeout"):
            function = framework.find_child(name)
            acknowledge(
                function,
                "aws-cdk-lib's custom resource provider framework: its functions log with the basic execution role "
                "and invoke the handler functions and their versions (ARN:*).",
                managed("service-role/AWSLambdaBasicExecutionRole"),
                arn_wildcard(build.functions["OnEvent"]),
                arn_wildcard(build.functions["IsComplete"]),
            )
        waiter = framework.find_child("waiter-state-machine")
        acknowledge(
            waiter,
            "aws-cdk-lib's provider framework waiter: it invokes the framework's own functions and versions (ARN:*) "
            "and offers no X-Ray setting; it logs ALL events to the build's log group (log delivery APIs take no "
            "resource ARNs).",
            wildcard("*"),
            arn_wildcard(framework.find_child("framework-isComplete")),
            arn_wildcard(framework.find_child("framework-onTimeout")),
            "AwsSolutions-SF2",
        )
