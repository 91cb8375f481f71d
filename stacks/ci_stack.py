from __future__ import annotations

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from construct_kit.ci_access import GithubCiAccess
from warmstart.config.environment import EnvironmentConfig


class CiAccessStack(Stack):
    """Opt-in (deploy.github): what GitHub Actions may assume in this environment's account. Deployed once from
    an admin session (`make deploy` includes it); CI assumes its roles from then on."""

    def __init__(self, scope: Construct, id: str, *, config: EnvironmentConfig, **kwargs) -> None:
        super().__init__(scope, id, **kwargs)
        assert config.deploy.github is not None
        self.access = GithubCiAccess(
            self,
            "GithubAccess",
            environment=config.name,
            github=config.deploy.github,
            bootstrap_qualifier=config.deploy.bootstrap_qualifier,
            cluster_name=config.cluster.name,
        )
        # The values the workflows need, as GitHub variables (docs/deploy.md).
        CfnOutput(self, "DeployRoleArn", value=self.access.deploy_role.role_arn)
        if self.access.diff_role is not None:
            CfnOutput(self, "DiffRoleArn", value=self.access.diff_role.role_arn)
