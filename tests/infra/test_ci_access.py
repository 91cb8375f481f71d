"""The CI access stack: GitHub's OIDC provider and roles that only the configured repository's jobs may assume
(audience, and the subject GitHub puts in its tokens), which may only assume the CDK bootstrap roles."""

from __future__ import annotations

from aws_cdk import App, Environment
from aws_cdk.assertions import Template

from stacks.ci_stack import CiAccessStack
from tests.synth import cdk_context
from warmstart.config.environment import EnvironmentConfig

TOKEN = "token.actions.githubusercontent.com"


def _roles(template: Template) -> dict[str, dict]:
    return {r["Properties"]["RoleName"]: r["Properties"] for r in template.find_resources("AWS::IAM::Role").values()}


def _policies(template: Template) -> list[dict]:
    return [p["Properties"] for p in template.find_resources("AWS::IAM::Policy").values()]


def test_prod_deploys_only_from_its_github_environment(prod):
    template = prod.template("ci")
    template.has_resource_properties(
        "AWS::IAM::OIDCProvider", {"Url": f"https://{TOKEN}", "ClientIdList": ["sts.amazonaws.com"]}
    )
    roles = _roles(template)
    assert set(roles) == {"warmstart-prod-github-deploy", "warmstart-prod-github-diff"}
    (deploy_trust,) = roles["warmstart-prod-github-deploy"]["AssumeRolePolicyDocument"]["Statement"]
    assert deploy_trust["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert deploy_trust["Condition"] == {
        "StringEquals": {
            f"{TOKEN}:aud": "sts.amazonaws.com",
            f"{TOKEN}:sub": "repo:acme/warmstart-infra:environment:prod",
        }
    }
    assert "Ref" in deploy_trust["Principal"]["Federated"]  # the provider this stack creates
    (diff_trust,) = roles["warmstart-prod-github-diff"]["AssumeRolePolicyDocument"]["Statement"]
    assert diff_trust["Condition"]["StringEquals"][f"{TOKEN}:sub"] == "repo:acme/warmstart-infra:pull_request"
    assert roles["warmstart-prod-github-deploy"]["MaxSessionDuration"] == 10800  # a first deploy outlasts an hour


def test_dev_deploys_from_its_github_environment(dev):
    """A job that names an environment gets `sub` repo:<repo>:environment:<name>, whatever its branch."""
    (trust,) = _roles(dev.template("ci"))["warmstart-dev-github-deploy"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Condition"]["StringEquals"][f"{TOKEN}:sub"] == "repo:acme/warmstart-infra:environment:dev"


def test_without_an_environment_the_branch_is_trusted():
    from construct_kit.ci_access import deploy_subject
    from warmstart.config.operations import GithubAccess

    assert deploy_subject(GithubAccess(repository="acme/x", branch="release")) == "repo:acme/x:ref:refs/heads/release"


def test_the_deploy_role_may_only_assume_the_cdk_bootstrap_roles_and_the_diff_role_only_read_its_stacks(prod):
    template = prod.template("ci")
    statements = {
        p["Roles"][0]["Ref"].removeprefix("GithubAccess")[:8]: p["PolicyDocument"]["Statement"]
        for p in _policies(template)
    }
    describe = {
        "Action": "eks:DescribeCluster",
        "Effect": "Allow",
        "Resource": "arn:aws:eks:us-east-1:210987654321:cluster/warmstart-prod",
        "Sid": "ReadTheClustersComputeMode",
    }  # the preflight's compute-mode check, on this environment's cluster only
    deploy, deploy_describe = statements["DeployRo"]
    assert deploy_describe == describe
    assert deploy["Action"] == "sts:AssumeRole"
    region = "210987654321-us-east-1"
    assert deploy["Resource"] == [
        f"arn:aws:iam::210987654321:role/cdk-hnb659fds-{kind}-role-{region}"
        for kind in ("deploy", "file-publishing", "image-publishing", "lookup")
    ]
    # Pull requests: not the lookup role (ReadOnlyAccess to the whole account), only this environment's templates.
    templates, version, diff_describe = statements["DiffRole"]
    assert diff_describe == describe
    assert templates["Action"] == ["cloudformation:DescribeStacks", "cloudformation:GetTemplate"]
    assert templates["Resource"] == "arn:aws:cloudformation:us-east-1:210987654321:stack/warmstart-prod-*/*"
    assert version == {
        "Action": "ssm:GetParameter",
        "Effect": "Allow",
        "Resource": "arn:aws:ssm:us-east-1:210987654321:parameter/cdk-bootstrap/hnb659fds/version",
        "Sid": "ReadBootstrapVersion",
    }
    assert "sts:AssumeRole" not in str(statements["DiffRole"])
    assert not template.find_resources("AWS::IAM::User") and not template.find_resources("AWS::IAM::AccessKey")


def test_an_account_whose_provider_exists_names_it_and_creates_none():
    raw = {
        "name": "qa",
        "account": "210987654321",
        "region": "us-east-1",
        "network": {"vpc_cidr": "10.50.0.0/16", "availability_zones": ["us-east-1a", "us-east-1b"]},
        "cluster": {"name": "qa"},
        "compute": {"mode": "auto", "gpu_pool": {"instance_types": ["g6e.xlarge"]}},
        "buckets": {"compile_cache": "qa-compile-cache", "models": {"name": "qa-models"}},
        "models": [
            {
                "name": "m",
                "s3_uri": "s3://qa-models/m/",
                "size_gb": 10,
                "weights_revision": "r1",
                "image": "vllm/vllm-openai:v0.21.0",
                "torch_version": "2.11.0",
                "replicas": 2,
            }
        ],
        "deploy": {
            "bootstrap_qualifier": "wsqa",
            "github": {"repository": "acme/infra", "create_oidc_provider": False, "pull_request_diff": False},
        },
    }
    config = EnvironmentConfig.model_validate(raw)
    stack = CiAccessStack(
        App(context=cdk_context()), "Ci", config=config, env=Environment(account="210987654321", region="us-east-1")
    )
    template = Template.from_stack(stack)
    assert not template.find_resources("AWS::IAM::OIDCProvider")
    (role,) = template.find_resources("AWS::IAM::Role").values()
    (trust,) = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"]["Federated"] == f"arn:aws:iam::210987654321:oidc-provider/{TOKEN}"
    (policy,) = template.find_resources("AWS::IAM::Policy").values()
    resources = policy["Properties"]["PolicyDocument"]["Statement"][0]["Resource"]
    assert all(r.startswith("arn:aws:iam::210987654321:role/cdk-wsqa-") for r in resources)  # the qualifier


def test_the_stacks_deploy_through_the_configured_bootstrap(tmp_path):
    """The qualifier reaches every stack's synthesizer: its roles, asset bucket and version check."""
    import yaml

    from tests.synth import ROOT, synthesize
    from warmstart.loader import load_config

    raw = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    raw["deploy"]["bootstrap_qualifier"] = "wsdev"
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(raw))
    synthesized = synthesize(load_config(path), tmp_path / "out", "dev")
    manifest = (synthesized.outdir / "manifest.json").read_text()
    assert "cdk-wsdev-deploy-role" in manifest and "cdk-hnb659fds" not in manifest
