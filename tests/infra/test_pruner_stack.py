"""The pruner as deployed: schedule, dead-letter queue, alarms, least privilege, its active set."""

import json

from warmstart.active_set import active_keys
from warmstart.catalog import default_catalog


def _resources(synthesized, kind: str) -> list[dict]:
    return [r for r in synthesized.template_json("pruner")["Resources"].values() if r["Type"] == kind]


def test_active_set_parameter_holds_the_keys_the_agent_and_plan_compute(shipped):
    (parameter,) = _resources(shipped, "AWS::SSM::Parameter")
    props = parameter["Properties"]
    assert props["Name"] == f"/warmstart/{shipped.config.name}/compile-cache/active-keys"
    document = json.loads(props["Value"])
    assert document["version"] == 1 and document["environment"] == shipped.config.name
    assert document["keys"] == active_keys(shipped.config, default_catalog())
    assert len(document["keys"]) == len(shipped.config.models)  # one GPU type per pool in the shipped configs


def test_function_runs_alone_on_the_latest_python_with_its_settings(shipped):
    (function,) = _resources(shipped, "AWS::Lambda::Function")
    props = function["Properties"]
    assert props["Runtime"] == "python3.14"
    assert props["Handler"] == "lambdas.compile_cache_pruner.handler.handler"
    assert props["ReservedConcurrentExecutions"] == 1
    assert props["Timeout"] == 900
    variables = props["Environment"]["Variables"]
    pruning = shipped.config.pruning
    assert variables["BUCKET"] == shipped.config.buckets.compile_cache
    assert variables["RETENTION_DAYS"] == str(pruning.retention_days)
    assert variables["MAX_DELETIONS"] == str(pruning.max_deletions_per_run)
    assert variables["DRY_RUN"] == ("true" if pruning.dry_run else "false")
    assert variables["ACTIVE_SET_PARAMETERS"] == f"/warmstart/{shipped.config.name}/compile-cache/active-keys"
    assert "DeadLetters" in json.dumps(props["DeadLetterConfig"])


def test_schedule_invokes_the_function_with_retries_and_a_dead_letter_queue(shipped):
    (schedule,) = _resources(shipped, "AWS::Scheduler::Schedule")
    props = schedule["Properties"]
    assert props["ScheduleExpression"] == shipped.config.pruning.schedule
    assert props["State"] == "ENABLED"
    target = props["Target"]
    assert "CompileCachePrunerFunction" in json.dumps(target["Arn"])
    assert "DeadLetters" in json.dumps(target["DeadLetterConfig"])
    assert target["RetryPolicy"]["MaximumRetryAttempts"] == 2


def test_failures_raise_alarms(shipped):
    alarms = {a["Properties"]["MetricName"]: a["Properties"] for a in _resources(shipped, "AWS::CloudWatch::Alarm")}
    assert set(alarms) == {"Errors", "ApproximateNumberOfMessagesVisible", "active_set_unavailable"}
    for alarm in alarms.values():
        assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarms["active_set_unavailable"]["Namespace"] == "Warmstart/CompileCachePruner"


def test_least_privilege(shipped):
    bucket = shipped.config.buckets.compile_cache
    policies = {
        k: r["Properties"]["PolicyDocument"]["Statement"]
        for k, r in shipped.template_json("pruner")["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy"
    }
    (access,) = [s for k, s in policies.items() if k.startswith("CompileCachePrunerAccess")]
    by_sid = {s["Sid"]: s for s in access}
    assert by_sid["ListCompileCache"]["Action"] == ["s3:ListBucket", "s3:ListBucketMultipartUploads"]
    assert by_sid["ListCompileCache"]["Condition"] == {"StringLike": {"s3:prefix": ["compile-cache/*"]}}
    # GetObject: reading manifests, and deletes conditional on the listed ETag need it.
    assert by_sid["DeleteCompileCache"]["Action"] == ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject"]
    assert by_sid["DeleteCompileCache"]["Resource"] == f"arn:aws:s3:::{bucket}/compile-cache/*"
    assert by_sid["ReadActiveSets"]["Action"] == "ssm:GetParameter"
    assert by_sid["ReadActiveSets"]["Resource"] == (
        f"arn:aws:ssm:{shipped.config.region}:{shipped.config.account}:parameter/warmstart/{shipped.config.name}"
        "/compile-cache/active-keys"
    )
    text = json.dumps(access)
    for forbidden in ("s3:PutObject", '"s3:*"', "ssm:PutParameter"):
        assert forbidden not in text
    roles = _resources(shipped, "AWS::IAM::Role")
    assert all("ManagedPolicyArns" not in r["Properties"] for r in roles)  # no AWS-managed policies at all


def test_function_code_is_the_repository_source_not_a_bundle(shipped):
    assets = json.loads((shipped.outdir / f"{shipped.stacks.pruner.stack_name}.assets.json").read_text())
    (files,) = [f for f in assets["files"].values() if f["source"].get("packaging") == "zip"]
    folder = shipped.outdir / files["source"]["path"]
    assert sorted(p.name for p in folder.iterdir()) == ["lambdas", "warmstart"]
    assert (folder / "lambdas" / "compile_cache_pruner" / "handler.py").exists()
