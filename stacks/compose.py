"""Composes one environment's stacks from its config, with cdk-nag checking all of them."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import App, Environment, Tags, Validations
from cdk_nag import AwsSolutionsChecks

from pruner.construct import pruner_role_name
from stacks.ci_stack import CiAccessStack
from stacks.cluster_stack import ClusterStack
from stacks.data_stack import DataStack
from stacks.model_stack import ModelStack
from stacks.network_stack import NetworkStack, owns_network_resources
from stacks.pruner_stack import PrunerStack
from warmstart.autoscaling import scaling_policy
from warmstart.catalog import default_catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.workload import plan_model

# What DefaultStackSynthesizer reads the bootstrap qualifier from (aws-cdk-lib, cx-api BOOTSTRAP_QUALIFIER_CONTEXT).
BOOTSTRAP_QUALIFIER_CONTEXT = "@aws-cdk/core:bootstrapQualifier"


@dataclass(frozen=True)
class EnvironmentStacks:
    network: NetworkStack | None
    data: DataStack
    cluster: ClusterStack
    pruner: PrunerStack
    models: dict[str, ModelStack]
    ci: CiAccessStack | None = None

    def all(self) -> list:
        return [
            *([self.network] if self.network else []),
            self.data,
            self.cluster,
            self.pruner,
            *self.models.values(),
            *([self.ci] if self.ci else []),
        ]


def compose_environment(app: App, config: EnvironmentConfig) -> EnvironmentStacks:
    # The bootstrap the stacks deploy through (its roles, bucket and repository); `make bootstrap` creates it.
    app.node.set_context(BOOTSTRAP_QUALIFIER_CONTEXT, config.deploy.bootstrap_qualifier)
    env = Environment(account=config.account, region=config.region)
    prefix = f"warmstart-{config.name}"
    network = (
        NetworkStack(app, f"{prefix}-network", env=env, network=config.network)
        if owns_network_resources(config.network)
        else None
    )
    # The pruner's role has a fixed name, so the data stack's bucket policy can name it without a reference.
    data = DataStack(
        app, f"{prefix}-data", env=env, buckets=config.buckets, pruner_role_name=pruner_role_name(config.name)
    )
    cluster = ClusterStack(
        app,
        f"{prefix}-cluster",
        env=env,
        config=config,
        network=network.network if network else None,
        buckets=data.buckets,
    )
    if network is not None:  # GPU nodes start once S3 is reached through the gateway endpoint
        cluster.add_stack_dependency(network)
    pruner = PrunerStack(app, f"{prefix}-pruner", env=env, config=config)
    pruner.add_stack_dependency(data)  # prunes the bucket the data stack owns
    catalog = default_catalog()
    models = {
        model.name: ModelStack(
            app,
            f"{prefix}-model-{model.name}",
            env=env,
            cluster=cluster.cluster,
            plan=plan_model(model, config, catalog),
            scaling=scaling_policy(model, config, catalog),
            bucket_name=data.buckets.model_bucket_name,
            kms_key_arn=config.buckets.models.kms_key_arn,
            after=cluster.before_workload(model.image),
        )
        for model in config.models
    }
    ci = CiAccessStack(app, f"{prefix}-ci", env=env, config=config) if config.deploy.github else None
    stacks = EnvironmentStacks(network=network, data=data, cluster=cluster, pruner=pruner, models=models, ci=ci)
    for stack in stacks.all():
        for key, value in config.tags.items():
            Tags.of(stack).add(key, value)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stacks
