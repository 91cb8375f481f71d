"""The checks `make bootstrap/diff/deploy/destroy/agent-image` run first, with fake `aws` and `docker`
executables first on PATH: they answer as the AWS CLI v2 and the Docker CLI do (exit codes, the identity JSON,
"Unable to locate credentials" on stderr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.synth import ROOT, synthesize
from warmstart.loader import load_config

FAKE_AWS = """#!/bin/sh
# sts get-caller-identity as the AWS CLI v2 answers it, or its refusal without credentials.
if [ -z "$FAKE_ACCOUNT" ]; then
  echo "Unable to locate credentials. You can configure credentials by running \\"aws configure\\"." >&2
  exit 253
fi
# eks describe-cluster: no such cluster (exit 254, as the CLI exits on a service error), or one with Auto Mode's
# computeConfig enabled or not.
if [ "$1 $2" = "eks describe-cluster" ]; then
  case "$FAKE_AUTO_MODE" in
    "") echo "An error occurred (ResourceNotFoundException) when calling the DescribeCluster operation: \\
No cluster found for name: $4." >&2; exit 254 ;;
    denied) echo "An error occurred (AccessDeniedException) when calling the DescribeCluster operation" >&2
      exit 254 ;;
    *) printf '{"cluster": {"name": "%s", "status": "ACTIVE", "computeConfig": {"enabled": %s}}}\\n' \\
      "$4" "$FAKE_AUTO_MODE"; exit 0 ;;
  esac
fi
# ssm get-parameter: the public parameter of an AMI release, missing (ParameterNotFound), or not readable.
if [ "$1 $2" = "ssm get-parameter" ]; then
  case "$FAKE_SSM" in
    missing) echo "An error occurred (ParameterNotFound) when calling the GetParameter operation: \\
Parameter $4 not found." >&2; exit 254 ;;
    denied) echo "An error occurred (AccessDeniedException) when calling the GetParameter operation" >&2
      exit 254 ;;
    *) printf '{"Parameter": {"Name": "%s", "Type": "String", "Value": "ami-0123456789abcdef0"}}\\n' "$4"
      exit 0 ;;
  esac
fi
printf '{"UserId": "AROAEXAMPLE:ci", "Account": "%s", "Arn": "arn:aws:sts::%s:assumed-role/deploy/ci"}\\n' \\
  "$FAKE_ACCOUNT" "$FAKE_ACCOUNT"
"""
FAKE_DOCKER = """#!/bin/sh
# docker buildx version / docker info, as the Docker CLI answers them with or without buildx and a daemon.
case "$1 $FAKE_DOCKER" in
  "buildx ok"|"buildx no-daemon") echo "github.com/docker/buildx v0.30.1 1c9cd7ef" ;;
  "buildx no-buildx") echo "docker: 'buildx' is not a docker command." >&2; exit 1 ;;
  "info ok") echo "29.1.0" ;;
  "info no-daemon") echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock." >&2; exit 1 ;;
  *) exit 1 ;;
esac
"""


@pytest.fixture(scope="module")
def fake_bin(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fake-bin")
    for name, script in (("aws", FAKE_AWS), ("docker", FAKE_DOCKER)):
        path = folder / name
        path.write_text(script)
        path.chmod(0o755)
    return folder


def preflight(
    fake_bin: Path,
    *args: str,
    account: str = "",
    docker: str | None = "ok",
    config: Path | None = None,
    auto_mode: str = "",
    ssm: str = "",
) -> subprocess.CompletedProcess:
    folders = [str(fake_bin)] + [p for p in os.environ["PATH"].split(os.pathsep) if p]
    if docker is None:  # no Docker at all: a PATH without any docker
        folders = [str(fake_bin / "no-docker")] + [
            f for f in folders if f != str(fake_bin) and not (Path(f) / "docker").exists()
        ]
        (fake_bin / "no-docker").mkdir(exist_ok=True)
        (fake_bin / "no-docker" / "aws").write_text(FAKE_AWS)
        (fake_bin / "no-docker" / "aws").chmod(0o755)
    env = {**os.environ, "PATH": os.pathsep.join(folders), "FAKE_ACCOUNT": account, "FAKE_DOCKER": docker or ""}
    env["FAKE_AUTO_MODE"] = auto_mode
    env["FAKE_SSM"] = ssm
    command = [sys.executable, "-m", "warmstart_cli", "preflight", "--config", str(config or ROOT / "config/dev.yaml")]
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, cwd=ROOT)


def with_agent_image(folder: Path, image: str) -> Path:
    """dev's config with deploy.agent_image set."""
    raw = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    raw.setdefault("deploy", {})["agent_image"] = image
    path = folder / "dev.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.fixture(scope="module")
def prebuilt(tmp_path_factory) -> tuple[Path, Path]:
    """dev with a prebuilt agent image: its assembly builds no container image."""
    digest = "sha256:" + "ab" * 32
    path = with_agent_image(
        tmp_path_factory.mktemp("prebuilt"), f"123456789012.dkr.ecr.us-west-2.amazonaws.com/warmstart-agent@{digest}"
    )
    synthesized = synthesize(load_config(path), tmp_path_factory.mktemp("prebuilt-out"), "dev")
    return path, synthesized.outdir


def test_missing_credentials_stop_every_target_with_the_fix(fake_bin, dev):
    for action in ("bootstrap", "diff", "deploy", "destroy"):
        done = preflight(fake_bin, "--for", action, "--assembly", str(dev.outdir), "--confirm", "dev")
        assert done.returncode == 2, action
        assert "stopped before touching the account" in done.stderr
        assert "no usable AWS credentials (aws sts get-caller-identity: Unable to locate credentials." in done.stderr
        assert "fix: sign in to account 123456789012" in done.stderr


def test_credentials_of_another_account_are_refused(fake_bin, dev):
    done = preflight(fake_bin, "--for", "deploy", "--assembly", str(dev.outdir), account="210987654321")
    assert done.returncode == 2
    assert "the credentials are for account 210987654321" in done.stderr
    assert "but environment dev is account 123456789012" in done.stderr


def test_a_deploy_that_builds_the_agent_image_needs_docker_with_buildx(fake_bin, dev):
    ok = preflight(fake_bin, "--for", "deploy", "--assembly", str(dev.outdir), account="123456789012")
    assert ok.returncode == 0, ok.stderr
    assert "warmstart deploy dev: aws://123456789012/us-west-2, checks passed" in ok.stdout
    for docker, said in (
        ("no-buildx", "Docker has no buildx"),
        ("no-daemon", "the Docker daemon does not answer"),
        (None, "Docker is not installed"),
    ):
        done = preflight(
            fake_bin, "--for", "deploy", "--assembly", str(dev.outdir), account="123456789012", docker=docker
        )
        assert done.returncode == 2, docker
        assert said in done.stderr and "the deploy builds node_agent/Dockerfile" in done.stderr
        assert "set deploy.agent_image to the digest it prints" in done.stderr


def test_with_a_prebuilt_agent_image_no_docker_is_needed(fake_bin, prebuilt):
    config, assembly = prebuilt
    done = preflight(
        fake_bin, "--for", "deploy", "--assembly", str(assembly), account="123456789012", docker=None, config=config
    )
    assert done.returncode == 0, done.stderr
    assert "no container image to build: Docker is not needed" in done.stdout


def test_diff_and_bootstrap_need_no_docker(fake_bin, dev):
    for action in ("diff", "bootstrap"):
        done = preflight(fake_bin, "--for", action, "--assembly", str(dev.outdir), account="123456789012", docker=None)
        assert done.returncode == 0, (action, done.stderr)


def test_destroy_lists_what_stays_and_needs_the_name_typed_back(fake_bin, dev):
    refused = preflight(fake_bin, "--for", "destroy", "--assembly", str(dev.outdir), account="123456789012")
    assert refused.returncode == 2 and "run it again with CONFIRM=dev" in refused.stderr
    stays = refused.stdout
    assert "these stay after the stacks are deleted" in stays
    for bucket in ("warmstart-dev-compile-cache-123456789012", "warmstart-dev-models-123456789012"):
        assert "AWS::S3::Bucket" in stays and bucket in stays
    assert "AWS::Logs::LogGroup" in stays  # the VPC flow logs
    confirmed = preflight(
        fake_bin, "--for", "destroy", "--assembly", str(dev.outdir), "--confirm", "dev", account="123456789012"
    )
    assert confirmed.returncode == 0, confirmed.stderr


def test_without_an_assembly_the_deploy_targets_say_to_synth_first(fake_bin, tmp_path):
    done = preflight(fake_bin, "--for", "deploy", "--assembly", str(tmp_path / "missing"), account="123456789012")
    assert done.returncode == 2 and "run make synth first" in done.stderr


def test_the_bootstrap_target_is_the_configs_account_and_region(fake_bin):
    done = preflight(fake_bin, "--target", config=ROOT / "config" / "prod.yaml")
    assert done.stdout.strip() == "aws://210987654321/us-east-1"


def test_a_floating_agent_image_is_refused_at_synth(tmp_path):
    path = with_agent_image(tmp_path, "123456789012.dkr.ecr.us-west-2.amazonaws.com/agent:v1.2.0")
    from warmstart.config_file import ConfigError

    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert "deploy.agent_image" in str(error.value) and "names no digest" in str(error.value)


def test_a_prebuilt_agent_image_replaces_the_asset(prebuilt):
    _, assembly = prebuilt
    assets = [json.loads(p.read_text()) for p in assembly.glob("*.assets.json")]
    assert not any(a.get("dockerImages") for a in assets)
    template = next(assembly.glob("warmstart-dev-cluster.template.json")).read_text()
    assert "warmstart-agent@sha256:" + "ab" * 32 in template


@pytest.mark.slow
def test_make_deploy_stops_at_the_preflight_without_credentials(fake_bin):
    """The make target itself: synth runs (no credentials needed), then the preflight stops it before cdk."""
    env = {**os.environ, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "FAKE_ACCOUNT": "", "FAKE_DOCKER": "ok"}
    done = subprocess.run(["make", "deploy", "ENV=dev"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode != 0
    assert "no usable AWS credentials" in done.stderr
    assert "cdk deploy" not in done.stdout.split("--for deploy", 1)[1]  # never reached


def test_agent_image_needs_credentials_for_the_registry_and_docker(fake_bin):
    """It logs in to ECR (aws ecr get-login-password) before the push; the registry may be another account's."""
    no_credentials = preflight(fake_bin, "--for", "agent-image")
    assert no_credentials.returncode == 2 and "no usable AWS credentials" in no_credentials.stderr
    other_account = preflight(fake_bin, "--for", "agent-image", account="999999999999")
    assert other_account.returncode == 0, other_account.stderr
    no_docker = preflight(fake_bin, "--for", "agent-image", account="999999999999", docker=None)
    assert no_docker.returncode == 2 and "make agent-image builds and pushes" in no_docker.stderr
    assert "install Docker with buildx" in no_docker.stderr and "deploy.agent_image" not in no_docker.stderr


def test_a_qualifier_of_its_own_gets_its_own_toolkit_stack(fake_bin, tmp_path):
    raw = yaml.safe_load((ROOT / "config" / "dev.yaml").read_text())
    raw["deploy"]["bootstrap_qualifier"] = "wsdev"
    path = tmp_path / "dev.yaml"
    path.write_text(yaml.safe_dump(raw))
    done = preflight(fake_bin, "--bootstrap-options", config=path)
    assert done.stdout.split() == ["--qualifier", "wsdev", "--toolkit-stack-name", "CDKToolkit-wsdev"]
    assert preflight(fake_bin, "--bootstrap-options").stdout.strip() == ""  # the default: cdk's own


def test_destroy_names_what_no_stack_owns(fake_bin, dev):
    done = preflight(fake_bin, "--for", "destroy", "--assembly", str(dev.outdir), account="123456789012")
    assert "/aws/eks/warmstart-dev/cluster" in done.stdout and "CDK bootstrap stack" in done.stdout


def test_a_compute_mode_switch_in_place_is_refused_with_the_way_to_move(fake_bin, dev):
    """dev is Auto Mode: a cluster that runs Karpenter (computeConfig off) must not be switched in place."""
    common = ("--for", "deploy", "--assembly", str(dev.outdir))
    switch = preflight(fake_bin, *common, account="123456789012", auto_mode="false")
    assert switch.returncode == 2
    assert "cluster warmstart-dev runs compute mode 'karpenter' and the config says 'auto'" in switch.stderr
    assert "keep compute.mode: karpenter" in switch.stderr and "as a new environment" in switch.stderr
    same = preflight(fake_bin, *common, account="123456789012", auto_mode="true")
    assert same.returncode == 0, same.stderr
    new_cluster = preflight(fake_bin, *common, account="123456789012")
    assert new_cluster.returncode == 0, new_cluster.stderr
    unreadable = preflight(fake_bin, *common, account="123456789012", auto_mode="denied")
    assert unreadable.returncode == 0 and "a mode switch would not be caught" in unreadable.stdout
    diff = preflight(
        fake_bin, "--for", "diff", "--assembly", str(dev.outdir), account="123456789012", auto_mode="false"
    )
    assert diff.returncode == 0 and "make deploy would stop here" in diff.stdout


def test_karpenter_environment_on_an_auto_mode_cluster_is_refused(fake_bin, tmp_path):
    done = preflight(
        fake_bin,
        *("--for", "deploy", "--assembly", str(tmp_path)),  # an assembly with no image to build
        config=ROOT / "config" / "prod.yaml",
        account="210987654321",
        auto_mode="true",
    )
    assert "runs compute mode 'auto' and the config says 'karpenter'" in done.stderr


def test_a_deploy_stops_when_karpenter_would_find_no_gpu_ami_for_the_pinned_alias(fake_bin, tmp_path):
    """make deploy resolves compute.ami_alias as Karpenter does (the public SSM parameter of the release's NVIDIA
    AMI for the cluster's Kubernetes version; amifamily/al2023.go v1.14.1) and stops with the fix when it is missing;
    a diff only says so; a parameter it cannot read is a note, not a stop."""
    common = ("--assembly", str(tmp_path))  # an assembly with no image to build
    prod = {"config": ROOT / "config" / "prod.yaml", "account": "210987654321"}
    missing = preflight(fake_bin, "--for", "deploy", *common, **prod, ssm="missing")
    assert missing.returncode == 2
    assert "al2023@v20260714 has no GPU AMI for Kubernetes 1.35 in us-east-1" in missing.stderr
    assert (
        "/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/"
        "amazon-eks-node-al2023-x86_64-nvidia-1.35-v20260714/image_id" in missing.stderr
    )
    assert (
        "aws ssm get-parameters-by-path --path /aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia"
        in (missing.stderr)
    )
    assert preflight(fake_bin, "--for", "deploy", *common, **prod).returncode == 0
    diff = preflight(fake_bin, "--for", "diff", *common, **prod, ssm="missing")
    assert diff.returncode == 0 and "make deploy would stop here" in diff.stdout
    denied = preflight(fake_bin, "--for", "deploy", *common, **prod, ssm="denied")
    assert denied.returncode == 0 and "whether Karpenter finds the GPU AMI was not checked" in denied.stdout
