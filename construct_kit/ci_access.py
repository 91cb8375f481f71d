"""What GitHub Actions may do in an environment's account, through GitHub's OIDC tokens (no stored keys).

- The account's GitHub OIDC provider (IAM: one per URL and account; audience sts.amazonaws.com).
- A deploy role: trusted only for jobs of the repository that run in the configured GitHub environment (whose
  required reviewers gate it) or, without one, for pushes to the configured branch; it may only assume the CDK
  bootstrap roles of the environment's account and Region (deploy, file and image publishing, lookup), which
  do the work with the permissions `cdk bootstrap` gave them; and it may describe the environment's cluster (the
  preflight reads its compute mode before a deploy: warmstart_cli.preflight).
- A diff role for pull requests: it may read the environment's own stacks' templates and the bootstrap version,
  and describe the environment's cluster, nothing else (not the bootstrap lookup role, whose ReadOnlyAccess would
  open the whole account to anyone who can open a pull request): `cdk diff` cannot assume the bootstrap roles with
  it and falls back to these credentials and a template diff without a change set.
The token's claims: `aud` is the audience, `sub` is `repo:<owner>/<repo>:environment:<name>`,
`repo:<owner>/<repo>:ref:refs/heads/<branch>` or `repo:<owner>/<repo>:pull_request` (GitHub's OIDC docs).
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from construct_kit.nag import acknowledge, wildcard
from warmstart.config.operations import GithubAccess

GITHUB_TOKEN_HOST = "token.actions.githubusercontent.com"
AUDIENCE = "sts.amazonaws.com"
DEPLOY_BOOTSTRAP_ROLES = ("deploy", "file-publishing", "image-publishing", "lookup")


def deploy_subject(github: GithubAccess) -> str:
    if github.environment:
        return f"repo:{github.repository}:environment:{github.environment}"
    return f"repo:{github.repository}:ref:refs/heads/{github.branch}"


def diff_subject(github: GithubAccess) -> str:
    return f"repo:{github.repository}:pull_request"


def deploy_role_name(environment: str) -> str:
    return f"warmstart-{environment}-github-deploy"


def diff_role_name(environment: str) -> str:
    return f"warmstart-{environment}-github-diff"


class GithubCiAccess(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        environment: str,
        github: GithubAccess,
        bootstrap_qualifier: str,
        cluster_name: str,
    ) -> None:
        super().__init__(scope, id)
        stack = Stack.of(self)
        self.provider_arn = f"arn:{stack.partition}:iam::{stack.account}:oidc-provider/{GITHUB_TOKEN_HOST}"
        self.provider: iam.OidcProviderNative | None = None
        if github.create_oidc_provider:
            self.provider = iam.OidcProviderNative(
                self, "GithubOidc", url=f"https://{GITHUB_TOKEN_HOST}", client_ids=[AUDIENCE]
            )
            self.provider_arn = self.provider.oidc_provider_arn
        # The preflight's compute-mode check, on this environment's cluster only.
        read_compute_mode = iam.PolicyStatement(
            sid="ReadTheClustersComputeMode",
            actions=["eks:DescribeCluster"],
            resources=[f"arn:{stack.partition}:eks:{stack.region}:{stack.account}:cluster/{cluster_name}"],
        )
        self.deploy_role = self._deploy_role(environment, github, bootstrap_qualifier, read_compute_mode)
        self.diff_role = (
            self._diff_role(environment, github, bootstrap_qualifier, read_compute_mode)
            if github.pull_request_diff
            else None
        )

    def _role(self, id: str, name: str, subject: str, description: str) -> iam.Role:
        """A role only GitHub's tokens with this audience and subject may assume."""
        return iam.Role(
            self,
            id,
            role_name=name,
            description=description,
            # A first deploy (VPC, EKS, nodes, charts) can outlast an hour; the CLI's sessions of the bootstrap
            # roles are chained from this one (deploy.yml asks for 3 hours).
            max_session_duration=Duration.hours(3),
            assumed_by=iam.WebIdentityPrincipal(
                self.provider_arn,
                conditions={
                    "StringEquals": {f"{GITHUB_TOKEN_HOST}:aud": AUDIENCE, f"{GITHUB_TOKEN_HOST}:sub": subject}
                },
            ),
        )

    def _deploy_role(
        self, environment: str, github: GithubAccess, qualifier: str, read_compute_mode: iam.PolicyStatement
    ) -> iam.Role:
        stack = Stack.of(self)
        role = self._role(
            "DeployRole",
            deploy_role_name(environment),
            deploy_subject(github),
            f"GitHub Actions deploys of warmstart {environment}: the CDK bootstrap roles only",
        )
        bootstrap_roles = [
            f"arn:{stack.partition}:iam::{stack.account}:role/cdk-{qualifier}-{kind}-role-{stack.account}-"
            f"{stack.region}"
            for kind in DEPLOY_BOOTSTRAP_ROLES
        ]
        role.add_to_policy(
            iam.PolicyStatement(sid="AssumeCdkBootstrapRoles", actions=["sts:AssumeRole"], resources=bootstrap_roles)
        )
        role.add_to_policy(read_compute_mode)
        return role

    def _diff_role(
        self, environment: str, github: GithubAccess, qualifier: str, read_compute_mode: iam.PolicyStatement
    ) -> iam.Role:
        stack = Stack.of(self)
        role = self._role(
            "DiffRole",
            diff_role_name(environment),
            diff_subject(github),
            f"GitHub Actions pull requests of warmstart {environment}: read its stacks' templates",
        )
        stacks = f"arn:{stack.partition}:cloudformation:{stack.region}:{stack.account}:stack/warmstart-{environment}-*"
        role.add_to_policy(
            iam.PolicyStatement(
                sid="ReadThisEnvironmentsTemplates",
                actions=["cloudformation:GetTemplate", "cloudformation:DescribeStacks"],
                resources=[f"{stacks}/*"],
            )
        )
        version = (
            f"arn:{stack.partition}:ssm:{stack.region}:{stack.account}:parameter/cdk-bootstrap/{qualifier}/version"
        )
        role.add_to_policy(
            iam.PolicyStatement(sid="ReadBootstrapVersion", actions=["ssm:GetParameter"], resources=[version])
        )
        role.add_to_policy(read_compute_mode)
        acknowledge(
            role,
            "Read-only on this environment's own stacks, whose IDs CloudFormation appends to their names.",
            wildcard(f"{stacks}/*"),
        )
        return role
