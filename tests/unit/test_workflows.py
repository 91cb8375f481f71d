"""The GitHub Actions workflows: valid against the workflow schema (SchemaStore's, vendored in check-jsonschema),
clean under zizmor's audits (offline, auditor persona), every action pinned to a commit, AWS credentials only
through OIDC, and every environment in config/ synthesized."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.synth import ROOT, SHIPPED_ENVIRONMENTS

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def _load(path: Path) -> dict:
    # PyYAML reads the key `on` as True (YAML 1.1): take it back.
    document = yaml.safe_load(path.read_text())
    document["on"] = document.pop(True, document.get("on"))
    return document


def schema_check(paths: list[Path]) -> subprocess.CompletedProcess:
    command = [str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, paths)]
    return subprocess.run(command, capture_output=True, text=True)


def zizmor(folder: Path) -> list[dict]:
    command = [str(BIN / "zizmor"), "--offline", "--no-progress", "--persona=auditor", "--format=json", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode in (0, 11, 12, 13, 14), done.stderr  # 1x: findings of that severity
    return json.loads(done.stdout or "[]")


def test_there_are_workflows_for_pull_requests_deploys_and_the_slow_tiers():
    assert [p.name for p in WORKFLOWS] == ["ci.yml", "deploy.yml", "tiers.yml"]


def test_the_workflows_match_the_schema_and_pass_the_audits():
    done = schema_check(WORKFLOWS)
    assert done.returncode == 0, done.stdout + done.stderr
    assert zizmor(ROOT / ".github" / "workflows") == []


def test_the_linters_refuse_a_bad_workflow(tmp_path):
    """They would catch a mistake: an unknown key, an unpinned action, an untrusted value in a shell."""
    folder = tmp_path / ".github" / "workflows"
    folder.mkdir(parents=True)
    (folder / "bad.yml").write_text(
        "name: bad\non: pull_request_target\npermissions: {}\njobs:\n  x:\n    name: x\n    runs-on: ubuntu-24.04\n"
        "    steps:\n      - uses: actions/checkout@v5\n      - run: echo ${{ github.event.pull_request.title }}\n"
        "    timeout: 5\n"
    )
    assert schema_check([folder / "bad.yml"]).returncode != 0
    audits = {finding["ident"] for finding in zizmor(folder)}
    assert {"unpinned-uses", "template-injection"} <= audits


def test_every_action_is_pinned_to_a_commit_with_its_version_named():
    for path in WORKFLOWS:
        lines = path.read_text().splitlines()
        uses = [line for line in lines if re.match(r"^\s*-?\s*uses:", line)]
        assert uses, path.name
        for line in uses:
            reference, _, comment = line.split("uses:", 1)[1].partition("#")
            assert PINNED.match(reference.strip()), line
            assert re.match(r"^\s*v\d+\.\d+\.\d+$", comment), line  # which release the SHA is


def test_aws_credentials_only_through_oidc():
    for path in WORKFLOWS:
        text = path.read_text()
        for stored in ("aws-access-key-id", "aws-secret-access-key", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            assert stored not in text, (path.name, stored)
        assert "secrets." not in text, path.name
        for job_id, job in _load(path)["jobs"].items():
            steps = job.get("steps", [])
            assuming = [s for s in steps if str(s.get("uses", "")).startswith("aws-actions/configure-aws-credentials@")]
            if assuming:
                assert job["permissions"]["id-token"] == "write", (path.name, job_id)
                assert all("role-to-assume" in s["with"] for s in assuming), (path.name, job_id)


def test_every_environment_is_synthesized_and_diffed():
    ci = _load(ROOT / ".github" / "workflows" / "ci.yml")
    assert ci["jobs"]["synth"]["strategy"]["matrix"]["environment"] == SHIPPED_ENVIRONMENTS
    diffed = [entry["environment"] for entry in ci["jobs"]["diff"]["strategy"]["matrix"]["include"]]
    assert diffed == SHIPPED_ENVIRONMENTS
    assert set(ci["on"]) == {"pull_request", "push"}


def test_main_deploys_dev_then_prod_behind_its_environment():
    deploy = _load(ROOT / ".github" / "workflows" / "deploy.yml")
    jobs = deploy["jobs"]
    assert deploy["on"]["push"]["branches"] == ["main"]
    assert (jobs["dev"]["needs"], jobs["prod"]["needs"]) == ("test", "dev")
    assert (jobs["dev"]["environment"], jobs["prod"]["environment"]) == ("dev", "prod")
    assert deploy["concurrency"]["cancel-in-progress"] is False
    for name in ("dev", "prod"):
        runs = [s.get("run", "") for s in jobs[name]["steps"]]
        assert f"make deploy ENV={name} APPROVAL=never" in runs


def _deployed_from_github() -> list[str]:
    from warmstart.loader import load_config

    return [name for name in SHIPPED_ENVIRONMENTS if load_config(ROOT / "config" / f"{name}.yaml").deploy.github]


def test_the_workflow_deploys_every_environment_with_github_access():
    deploy = _load(ROOT / ".github" / "workflows" / "deploy.yml")
    assert _deployed_from_github() == ["dev", "prod"]
    assert [job for job in deploy["jobs"] if job in SHIPPED_ENVIRONMENTS] == ["dev", "prod"]


@pytest.mark.parametrize("environment", _deployed_from_github())
def test_the_ci_stacks_trust_what_the_workflows_run_as(environment):
    """A job that names a GitHub environment gets the token subject repo:<repo>:environment:<name>, whatever the
    branch: the deploy role must trust that environment (a branch trust would refuse every deploy)."""
    from warmstart.loader import load_config

    github = load_config(ROOT / "config" / f"{environment}.yaml").deploy.github
    assert github is not None and github.repository
    deploy = _load(ROOT / ".github" / "workflows" / "deploy.yml")
    job = deploy["jobs"][environment]
    if "environment" in job:
        assert github.environment == job["environment"]
    else:
        assert github.environment is None and github.branch in deploy["on"]["push"]["branches"]


def _make_targets_of_ci_run() -> list[str]:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line.split()[1] for line in lines if line.startswith("make ")]


def _make_targets_on_main() -> list[str]:
    """What ci.yml runs on a push to main: every job's `make` steps and its matrix targets."""
    targets = []
    for job in _load(ROOT / ".github" / "workflows" / "ci.yml")["jobs"].values():
        if job.get("if", "").strip() == "github.event_name == 'pull_request'":
            continue
        matrix = job.get("strategy", {}).get("matrix", {}).get("target", [])
        for step in job["steps"]:
            run = step.get("run", "")
            if run == 'make "$TARGET"':
                targets += matrix
            elif run.startswith("make ") and "ENV=" not in run:
                targets.append(run.split()[1])
    return targets


def test_ci_means_one_thing_the_workflow_on_main_runs_what_ci_run_runs():
    """.ci/run (the CI entry point) and the repository's own workflow on main run the same make targets."""
    assert _make_targets_of_ci_run() == ["lint", "test", "test-monitoring", "test-vllm", "test-cluster", "test-engine"]
    assert sorted(_make_targets_on_main()) == sorted(_make_targets_of_ci_run())
