"""What GitHub Actions may do in an environment's account, through GitHub's OIDC tokens (no stored keys).

- The account's GitHub OIDC provider (IAM: one per URL and account; audience sts.amazonaws.com).
- A deploy role: trusted only for jobs of the repository that run in the configured GitHub environment (whose
  required reviewers gate it) or, without one, for pushes to the configured branch; it may only assume the CDK
  bootstrap roles of the environment's account and Region (deploy, file and image publishing, lookup), which
  do the work with the permissions `cdk bootstrap` gave them.
- A diff role for pull requests: it may only assume the bootstrap lookup role (read-only): `cdk diff` reads
  the deployed templates with it (and falls back to a template diff without a change set).
The token's claims: `aud` is the audience, `sub` is `repo:<owner>/<repo>:environment:<name>`,
`repo:<owner>/<repo>:ref:refs/heads/<branch>` or `repo:<owner>/<repo>:pull_request` (GitHub's OIDC docs).
"""

from __future__ import annotations

from aws_cdk import Duration, Stack
from aws_cdk import aws_iam as iam
from constructs import Construct

from warmstart.config import GithubAccess

GITHUB_TOKEN_HOST = "token.actions.githubusercontent.com"
AUDIENCE = "sts.amazonaws.com"
DEPLOY_BOOTSTRAP_ROLES = ("deploy", "file-publishing", "image-publishing", "lookup")
DIFF_BOOTSTRAP_ROLES = ("lookup",)


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
        self, scope: Construct, id: str, *, environment: str, github: GithubAccess, bootstrap_qualifier: str
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

        def bootstrap_roles(kinds: tuple[str, ...]) -> list[str]:
            return [
                f"arn:{stack.partition}:iam::{stack.account}:role/"
                f"cdk-{bootstrap_qualifier}-{kind}-role-{stack.account}-{stack.region}"
                for kind in kinds
            ]

        def role(id: str, name: str, subject: str, kinds: tuple[str, ...], description: str) -> iam.Role:
            made = iam.Role(
                self,
                id,
                role_name=name,
                description=description,
                max_session_duration=Duration.hours(1),
                assumed_by=iam.WebIdentityPrincipal(
                    self.provider_arn,
                    conditions={
                        "StringEquals": {f"{GITHUB_TOKEN_HOST}:aud": AUDIENCE, f"{GITHUB_TOKEN_HOST}:sub": subject}
                    },
                ),
            )
            made.add_to_policy(
                iam.PolicyStatement(
                    sid="AssumeCdkBootstrapRoles", actions=["sts:AssumeRole"], resources=bootstrap_roles(kinds)
                )
            )
            return made

        self.deploy_role = role(
            "DeployRole",
            deploy_role_name(environment),
            deploy_subject(github),
            DEPLOY_BOOTSTRAP_ROLES,
            f"GitHub Actions deploys of warmstart {environment}: the CDK bootstrap roles only",
        )
        self.diff_role: iam.Role | None = None
        if github.pull_request_diff:
            self.diff_role = role(
                "DiffRole",
                diff_role_name(environment),
                diff_subject(github),
                DIFF_BOOTSTRAP_ROLES,
                f"GitHub Actions pull requests of warmstart {environment}: cdk diff through the lookup role",
            )
