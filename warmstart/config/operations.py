"""The sections about running an environment: buckets, who may call the models and read the agent's metrics,
alerts, pruning, and deploying (CDK bootstrap, GitHub access)."""

from __future__ import annotations

from typing import Annotated

from pydantic import (
    AfterValidator,
    Field,
    PositiveInt,
)

from warmstart.checks.fix import UNSET, setting
from warmstart.config.base import DNS_LABEL, LABEL_KEY, LABEL_VALUE, S3_BUCKET_NAME, CidrBlock, Strict
from warmstart.problem import Refused


class ModelBucket(Strict):
    name: str = Field(pattern=S3_BUCKET_NAME)
    # False: the bucket exists already and is only referenced (never created, never deleted).
    create: bool = True
    # An existing bucket encrypted with a customer KMS key: the readers get kms:Decrypt on it.
    kms_key_arn: str | None = Field(default=None, pattern=r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]{36}$")


class BucketsConfig(Strict):
    models: ModelBucket
    # Created by warmstart; a fixed name keeps IAM scopes readable.
    compile_cache: str = Field(pattern=S3_BUCKET_NAME)
    access_log_retention_days: PositiveInt = 90
    abort_incomplete_multipart_days: PositiveInt = 1


class ServingAccess(Strict):
    """Who may call the models (a NetworkPolicy per model admits only these namespaces, and the model's own)."""

    client_namespaces: list[Annotated[str, Field(pattern=DNS_LABEL)]] = Field(default_factory=list)


class AgentMetricsAccess(Strict):
    """The node agent's Prometheus endpoint (/metrics) and who may scrape it (a NetworkPolicy admits only them)."""

    port: int = Field(default=9400, ge=1024, le=65535)
    # Amazon Managed Service for Prometheus' collector connects from its network interfaces in the cluster's
    # subnets: default, the VPC's CIDR. An in-cluster Prometheus: add its namespace below.
    scraper_cidrs: list[CidrBlock] | None = None
    scraper_namespaces: list[Annotated[str, Field(pattern=DNS_LABEL)]] = Field(default_factory=list)


LabelKey = Annotated[str, Field(pattern=LABEL_KEY, max_length=317)]
LabelValue = Annotated[str, Field(pattern=LABEL_VALUE)]


class MonitoringExports(Strict):
    """The cold-start dashboard's ConfigMap and the alert rules' PrometheusRule (dist/<env>/monitoring/): their
    namespace and labels. Grafana's dashboard sidecar picks ConfigMaps labelled `grafana_dashboard: "1"` by default;
    kube-prometheus-stack's Prometheus picks PrometheusRules labelled `release: <its Helm release>` by default."""

    namespace: str = Field(default="warmstart-system", pattern=DNS_LABEL)
    dashboard_labels: dict[LabelKey, LabelValue] = Field(default_factory=lambda: {"grafana_dashboard": "1"})
    rule_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)


def _github_environment(value: str) -> str:
    """GitHub's rule ("Managing environments for deployment"): at most 255 characters, any of them (spaces too);
    warmstart also refuses what a reader could not see: control characters, and spaces at either end."""
    if not value:
        raise Refused("is empty", "give the environment's name, or remove environment", setting("", UNSET))
    if len(value) > 255:
        raise Refused(f"has {len(value)} characters", "GitHub allows 1 to 255", setting("", value[:255].strip()))
    if value != value.strip():
        raise Refused(
            "starts or ends with a space", "write the name as GitHub shows it, without them", setting("", value.strip())
        )
    if any(not c.isprintable() for c in value):
        shown = "".join(c for c in value if c.isprintable()).strip()
        raise Refused(
            "holds a control character",
            "write the name as GitHub shows it",
            setting("", shown) if shown else setting("", UNSET),
        )
    return value


class GithubAccess(Strict):
    """Who may deploy this environment from GitHub Actions (OIDC, no stored keys): the CI access stack's roles."""

    repository: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$")  # owner/name
    # The deploy role trusts jobs of this GitHub environment (whose required reviewers gate the deploy) or,
    # without one, pushes to this branch.
    environment: Annotated[str, AfterValidator(_github_environment)] | None = None
    branch: str = Field(default="main", pattern=r"^[A-Za-z0-9._/-]{1,255}$")
    # Pull requests of the repository may run `make diff` through a read-only role (the CDK lookup role).
    pull_request_diff: bool = True
    # The account's GitHub OIDC provider (one per account): created by this environment's CI stack, or already
    # there (another environment of the account, or made by hand).
    create_oidc_provider: bool = True


class DeploySettings(Strict):
    """How the environment is deployed (`make bootstrap/diff/deploy/destroy`)."""

    # A prebuilt agent image (registry/repository@sha256:<digest>, built and pushed with `make agent-image`): no
    # Docker needed at deploy. Default: CDK builds node_agent/Dockerfile at deploy (Docker with buildx).
    agent_image: str | None = None
    # The CDK bootstrap qualifier of the account and Region (cdk bootstrap's default).
    bootstrap_qualifier: str = Field(default="hnb659fds", pattern=r"^[a-z0-9]{1,10}$")
    github: GithubAccess | None = None


class Alerts(Strict):
    """Where alarms go: a new SNS topic per environment with these email subscriptions, or an existing topic."""

    emails: list[Annotated[str, Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")]] = Field(default_factory=list)
    topic_arn: str | None = Field(default=None, pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$")


class PruningPolicy(Strict):
    """The scheduled pruner of the compile-cache bucket."""

    schedule: str = Field(default="rate(1 day)", pattern=r"^(rate\(.+\)|cron\(.+\))$")
    retention_days: PositiveInt = 14
    max_deletions_per_run: PositiveInt = 10_000
    dry_run: bool = False
    # An archive whose publisher never wrote the manifest is removed after this long.
    orphan_age_hours: PositiveInt = 24
    # Other environments' active-set parameters, when they share this compile-cache bucket.
    extra_active_set_parameters: list[str] = Field(default_factory=list)
