"""Checks before `make bootstrap/diff/deploy/destroy` touch an account: fail early, each with its fix.

- credentials: the AWS CLI answers `sts get-caller-identity`, for the account the config names;
- Docker with buildx, where the cloud assembly has a container image to build (the agent image, unless
  deploy.agent_image names a prebuilt one);
- destroy: the environment's name typed back, and the list of what stays (resources CloudFormation retains);
- deploy: the cluster, where it already exists, runs the compute mode the config names (a mode switch in place
  would leave the old mode's NodePool serving: CDK's kubectl prune does not cover custom resources); Karpenter's
  pinned AMI alias has a GPU AMI for the cluster's Kubernetes version (the public SSM parameter Karpenter reads);
- diff/deploy into an existing cluster (cluster.existing): the cluster, its VPC, add-ons and Karpenter are what the
  config says (warmstart_cli/existing_preflight.py).

The commands are run through `run` (tests pass fake `aws` and `docker` executables on PATH).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from warmstart.config.compute import AutoModeCompute, KarpenterCompute, mode_name
from warmstart.config.environment import EnvironmentConfig
from warmstart.notes import config_notes
from warmstart.problem import Problem
from warmstart_cli.existing_preflight import read_existing

ACTIONS = ("bootstrap", "diff", "deploy", "destroy", "agent-image")
Runner = Callable[[list[str]], tuple[int, str, str]]
RETAINED = ("Retain", "RetainExceptOnCreate")


def run_command(command: list[str]) -> tuple[int, str, str]:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return 127, "", f"{command[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{' '.join(command)} did not answer within 60 s"
    return done.returncode, done.stdout, done.stderr


def target(config: EnvironmentConfig) -> str:
    """The CDK environment of the config, as `cdk bootstrap` takes it."""
    return f"aws://{config.account}/{config.region}"


DEFAULT_QUALIFIER = "hnb659fds"


def bootstrap_options(config: EnvironmentConfig) -> list[str]:
    """cdk bootstrap's options for a qualifier other than the default: its own toolkit stack (one per qualifier in
    an account and Region)."""
    qualifier = config.deploy.bootstrap_qualifier
    if qualifier == DEFAULT_QUALIFIER:
        return []
    return ["--qualifier", qualifier, "--toolkit-stack-name", f"CDKToolkit-{qualifier}"]


def credentials_problem(config: EnvironmentConfig, run: Runner, *, same_account: bool = True) -> Problem | None:
    """Credentials that work; with `same_account`, for the config's account (agent-image may push to a registry of
    another account)."""
    code, out, err = run(["aws", "sts", "get-caller-identity", "--output", "json"])
    if code == 127:
        return Problem("", "the AWS CLI is not installed (cdk needs its credentials chain too)", "install AWS CLI v2")
    if code != 0:
        said = (err or out).strip().splitlines()[-1:] or ["no answer"]
        return Problem(
            "",
            f"no usable AWS credentials (aws sts get-caller-identity: {said[0]})",
            f"sign in to account {config.account} (aws sso login, AWS_PROFILE=...), or in CI assume the "
            "environment's deploy role through GitHub OIDC",
        )
    try:
        identity = json.loads(out)
    except ValueError:
        return Problem("", "aws sts get-caller-identity answered something that is not JSON", "check the AWS CLI")
    account = str(identity.get("Account", ""))
    if same_account and account != config.account:
        return Problem(
            "",
            f"the credentials are for account {account} ({identity.get('Arn', '?')}), but environment "
            f"{config.name} is account {config.account}",
            f"use credentials of account {config.account}, or the config of the environment you meant",
        )
    return None


def images_to_build(assembly: Path) -> list[str]:
    """The container images the cloud assembly builds at deploy (CDK's *.assets.json)."""
    images = []
    for manifest in sorted(assembly.glob("*.assets.json")):
        for asset in json.loads(manifest.read_text()).get("dockerImages", {}).values():
            images.append(asset.get("source", {}).get("dockerFile", "Dockerfile"))
    return images


def docker_problem(config: EnvironmentConfig, run: Runner, *, why: str, prebuilt_helps: bool) -> Problem | None:
    code, _, err = run(["docker", "buildx", "version"])
    if code == 127:
        missing = "Docker is not installed"
    elif code != 0:
        missing = f"Docker has no buildx ({err.strip() or 'docker buildx version failed'})"
    else:
        code, _, err = run(["docker", "info", "--format", "{{.ServerVersion}}"])
        missing = "" if code == 0 else f"the Docker daemon does not answer ({err.strip() or 'docker info failed'})"
    if not missing:
        return None
    return Problem(
        "",
        f"{missing}, and {why}",
        "install Docker with buildx, or build and push the agent image once elsewhere (make agent-image "
        "REPOSITORY=<ECR repository>) and set deploy.agent_image to the digest it prints"
        if prebuilt_helps and config.deploy.agent_image is None
        else "install Docker with buildx",
    )


def retained_resources(assembly: Path) -> list[str]:
    """What CloudFormation keeps when the stacks are deleted: one line each, stack and resource."""
    kept = []
    for template in sorted(assembly.glob("*.template.json")):
        resources = json.loads(template.read_text()).get("Resources", {})
        for logical_id, resource in resources.items():
            if resource.get("DeletionPolicy") in RETAINED:
                name = _name_of(resource)
                kept.append(f"{template.name.removesuffix('.template.json')}: {resource['Type']} {logical_id}{name}")
    return kept


def _name_of(resource: dict) -> str:
    properties = resource.get("Properties", {})
    for key in ("BucketName", "LogGroupName", "TopicName", "Name"):
        if isinstance(properties.get(key), str):
            return f" ({properties[key]})"
    return ""


def deployed_compute_mode(config: EnvironmentConfig, run: Runner) -> tuple[str | None, str]:
    """(the mode the existing cluster runs, or None; a note when that could not be read). A cluster with EKS Auto
    Mode's compute enabled (computeConfig.enabled) runs Auto Mode; any other existing cluster runs Karpenter."""
    command = ["aws", "eks", "describe-cluster", "--name", config.cluster.name, "--region", config.region]
    code, out, err = run([*command, "--output", "json"])
    if code != 0:
        if "ResourceNotFoundException" in err:
            return None, ""  # a new cluster: any mode
        said = (err or out).strip().splitlines()[-1:] or ["no answer"]
        return None, f"could not read the cluster's compute mode ({said[0]}); a mode switch would not be caught"
    try:
        cluster = json.loads(out)["cluster"]
    except (ValueError, KeyError, TypeError):
        return None, "aws eks describe-cluster answered no cluster; a mode switch would not be caught"
    compute = cluster.get("computeConfig") if isinstance(cluster, dict) else None
    enabled = isinstance(compute, dict) and compute.get("enabled") is True
    return mode_name(AutoModeCompute if enabled else KarpenterCompute), ""


def compute_mode_problem(config: EnvironmentConfig, run: Runner) -> tuple[Problem | None, str]:
    deployed, note = deployed_compute_mode(config, run)
    wanted = config.compute.mode
    if deployed is None or deployed == wanted:
        return None, note
    return (
        Problem(
            "",
            f"cluster {config.cluster.name} runs compute mode {deployed!r} and the config says {wanted!r}: a "
            f"switch in place would leave the {deployed} GPU NodePool and its nodes serving (CDK's kubectl prune "
            "does not remove custom resources), and the two pools would both take the model pods",
            f"keep compute.mode: {deployed} for this environment; to move, deploy the new mode as a new "
            "environment (another name and cluster.name, same models bucket), move the clients to it, then "
            f"destroy {config.name} (its models bucket is retained; compile caches are rebuilt by the first pods)",
        ),
        note,
    )


# The architecture of every GPU instance type in warmstart/catalog.yaml (P and G families: x86_64).
GPU_ARCHITECTURE = "x86_64"


def gpu_ami_problem(config: EnvironmentConfig, run: Runner) -> tuple[Problem | None, str]:
    """(the pinned AMI alias has no GPU AMI, or None; a note when that could not be read): the public SSM parameter
    Karpenter resolves the alias to for the pool's GPU nodes, read as Karpenter reads it (any error there means no
    AMI for Karpenter: it skips the variant, amifamily/al2023.go and bottlerocket.go v1.14.1)."""
    compute = config.compute
    if not isinstance(compute, KarpenterCompute):
        return None, ""  # Auto Mode picks its own AMI
    parameter = compute.node_os.gpu_ami_parameter(config.cluster.kubernetes_version, GPU_ARCHITECTURE)
    command = ["aws", "ssm", "get-parameter", "--name", parameter, "--region", config.region, "--output", "json"]
    code, out, err = run(command)
    if code == 0:
        return None, ""
    said = (err or out).strip().splitlines()[-1:] or ["no answer"]
    if "ParameterNotFound" not in said[0]:
        return None, f"could not read {parameter} ({said[0]}): whether Karpenter finds the GPU AMI was not checked"
    listing = parameter.rsplit("/", 2)[0]  # the folder of the releases (AL2023: names; Bottlerocket: versions)
    return (
        Problem(
            "",
            f"{compute.ami_alias} has no GPU AMI for Kubernetes {config.cluster.kubernetes_version} in "
            f"{config.region}: Karpenter reads {parameter}, which does not exist, and would launch no GPU node",
            f"pin a release that has one (aws ssm get-parameters-by-path --path {listing} --recursive --region "
            f"{config.region} lists them) in compute.ami_alias",
        ),
        "",
    )


def _stop_or_say(action: str, found: list[Problem], said: list[str], problems: list[Problem], notes: list[str]) -> None:
    """What the account shows: a deploy stops on it; a diff only says what its deploy would meet. Notes either way."""
    if action == "deploy":
        problems += found
    else:
        notes += [f"make deploy would stop here: {problem}" for problem in found]
    notes += said


def check(
    action: str, config: EnvironmentConfig, *, run: Runner, assembly: Path | None = None, confirm: str = ""
) -> tuple[list[Problem], list[str]]:
    """(problems, notes): nothing may go on while there is a problem; the notes are printed either way."""
    problems: list[Problem] = []
    notes: list[str] = []
    if action == "destroy":
        assert assembly is not None
        kept = retained_resources(assembly)
        notes.append("these stay after the stacks are deleted (retained data, never emptied by warmstart):")
        notes += [f"  {line}" for line in kept] or ["  nothing"]
        notes += [
            "and these, which no stack owns:",
            f"  the EKS control plane's log group /aws/eks/{config.cluster.name}/cluster",
            "  log groups AWS Lambda created for the CDK providers' functions (/aws/lambda/warmstart-...)",
            "  the CDK bootstrap stack, its bucket and repository (assets of every deploy), shared by the account",
        ]
        if confirm != config.name:
            problems.append(
                Problem(
                    "",
                    f"destroying environment {config.name} deletes its cluster, nodes and pods",
                    f"run it again with CONFIRM={config.name}",
                )
            )
    if action in ("bootstrap", "diff", "deploy", "destroy", "agent-image"):
        problem = credentials_problem(config, run, same_account=action != "agent-image")
        if problem:
            problems.append(problem)
    if action == "deploy":
        assert assembly is not None
        images = images_to_build(assembly)
        if images:
            problem = docker_problem(
                config, run, why=f"the deploy builds {', '.join(sorted(set(images)))}", prebuilt_helps=True
            )
            if problem:
                problems.append(problem)
        else:
            notes.append("no container image to build: Docker is not needed")
    if action in ("diff", "deploy") and not problems and config.cluster.existing is not None:
        findings, existing_notes = read_existing(config, run)
        _stop_or_say(action, findings, existing_notes, problems, notes)
    elif action in ("diff", "deploy") and not problems:
        problem, note = compute_mode_problem(config, run)
        _stop_or_say(action, [problem] if problem else [], [note] if note else [], problems, notes)
    if action in ("diff", "deploy") and not problems:
        problem, note = gpu_ami_problem(config, run)
        _stop_or_say(action, [problem] if problem else [], [note] if note else [], problems, notes)
        notes += [f"note: {note}" for note in config_notes(config)]
    if action == "agent-image":
        problem = docker_problem(
            config, run, why="make agent-image builds and pushes the agent image", prebuilt_helps=False
        )
        if problem:
            problems.append(problem)
    return problems, notes
