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


def test_function_runs_on_the_latest_python_with_its_settings(shipped):
    (function,) = _resources(shipped, "AWS::Lambda::Function")
    props = function["Properties"]
    assert props["Runtime"] == "python3.14"
    assert props["Handler"] == "pruner.runtime.handler.handler"
    # Defect 11: reserved concurrency fails to deploy on accounts with a low concurrency quota; runs keep
    # apart through a lock object instead (tests/lambdas: test_runs_never_overlap_and_a_dead_runs_lock_expires).
    assert "ReservedConcurrentExecutions" not in props
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


def test_every_alarm_tells_the_environments_topic(shipped):
    """Defect 10: an alarm without an action tells no one."""
    template = shipped.template_json("pruner")
    (topic_id,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::SNS::Topic"]
    for alarm in _resources(shipped, "AWS::CloudWatch::Alarm"):
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic_id}]
    topic = template["Resources"][topic_id]["Properties"]
    (key_id,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::KMS::Key"]
    assert topic["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    # CloudWatch publishes to an encrypted topic only if the key lets it (SNS guide, "Configure SSE for
    # CloudWatch alarms"); the AWS-managed SNS key never does.
    key_policy = template["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]
    (for_alarms,) = [s for s in key_policy if s.get("Sid") == "CloudWatchAlarmsPublish"]
    assert for_alarms["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert for_alarms["Action"] == ["kms:Decrypt", "kms:GenerateDataKey*"]
    subscriptions = [r["Properties"] for r in _resources(shipped, "AWS::SNS::Subscription")]
    assert sorted(s["Endpoint"] for s in subscriptions) == sorted(shipped.config.alerts.emails)
    assert all(s["Protocol"] == "email" for s in subscriptions)
    (topic_policy,) = _resources(shipped, "AWS::SNS::TopicPolicy")
    statements = {s["Sid"]: s for s in topic_policy["Properties"]["PolicyDocument"]["Statement"]}
    assert statements["AllowPublishThroughSSLOnly"]["Effect"] == "Deny"
    # The topic policy replaces SNS's default one: CloudWatch must be let publish, or no alarm arrives.
    admit = statements["CloudWatchAlarmsPublish"]
    assert (admit["Effect"], admit["Principal"], admit["Action"]) == (
        "Allow",
        {"Service": "cloudwatch.amazonaws.com"},
        "sns:Publish",
    )
    assert admit["Resource"] == {"Ref": topic_id}
    account, region = shipped.config.account, shipped.config.region
    assert admit["Condition"] == {
        "StringEquals": {"aws:SourceAccount": account},
        "ArnLike": {"aws:SourceArn": f"arn:aws:cloudwatch:{region}:{account}:alarm:*"},
    }


def test_alarms_can_go_to_an_existing_topic_instead(dev):
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from stacks.pruner_stack import PrunerStack
    from warmstart.config.operations import Alerts

    arn = "arn:aws:sns:us-west-2:123456789012:platform-oncall"
    config = dev.config.model_copy(update={"alerts": Alerts(topic_arn=arn)})
    template = Template.from_stack(PrunerStack(App(), "pruner", config=config)).to_json()
    kinds = {r["Type"] for r in template["Resources"].values()}
    assert not kinds & {"AWS::SNS::Topic", "AWS::KMS::Key", "AWS::SNS::Subscription"}
    alarms = [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    assert alarms and all(a["Properties"]["AlarmActions"] == [arn] for a in alarms)


def test_least_privilege(shipped):
    bucket = shipped.config.buckets.compile_cache
    policies = {
        k: r["Properties"]["PolicyDocument"]["Statement"]
        for k, r in shipped.template_json("pruner")["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy"
    }
    (access,) = [s for k, s in policies.items() if k.startswith("CompileCachePrunerAccess")]
    by_sid = {s["Sid"]: s for s in access}
    assert by_sid["ListCompileCache"]["Action"] == "s3:ListBucket"
    assert by_sid["ListCompileCache"]["Condition"] == {"StringLike": {"s3:prefix": ["compile-cache/*"]}}
    # Defect 2: s3:prefix is no condition key of ListBucketMultipartUploads, so it has a statement of its own.
    assert by_sid["ListMultipartUploads"] == {
        "Action": "s3:ListBucketMultipartUploads",
        "Effect": "Allow",
        "Resource": f"arn:aws:s3:::{bucket}",
        "Sid": "ListMultipartUploads",
    }
    assert by_sid["OneRunAtATime"]["Action"] == ["s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
    assert by_sid["OneRunAtATime"]["Resource"] == f"arn:aws:s3:::{bucket}/pruner-lock.json"
    # GetObject: reading manifests, and deletes conditional on the listed ETag need it.
    assert by_sid["DeleteCompileCache"]["Action"] == ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject"]
    assert by_sid["DeleteCompileCache"]["Resource"] == f"arn:aws:s3:::{bucket}/compile-cache/*"
    assert by_sid["ReadActiveSets"]["Action"] == "ssm:GetParameter"
    assert by_sid["ReadActiveSets"]["Resource"] == (
        f"arn:aws:ssm:{shipped.config.region}:{shipped.config.account}:parameter/warmstart/{shipped.config.name}"
        "/compile-cache/active-keys"
    )
    text = json.dumps(access)
    # Its report of each run (contracts/pruner_report.py): that one key, beside the lock.
    assert by_sid["ReportLastRun"] == {
        "Action": "s3:PutObject",
        "Effect": "Allow",
        "Resource": f"arn:aws:s3:::{bucket}/pruner-last-run.json",
        "Sid": "ReportLastRun",
    }
    assert "s3:PutObject" not in json.dumps([s for s in access if s["Sid"] not in ("OneRunAtATime", "ReportLastRun")])
    for forbidden in ('"s3:*"', "ssm:PutParameter"):
        assert forbidden not in text
    roles = _resources(shipped, "AWS::IAM::Role")
    assert all("ManagedPolicyArns" not in r["Properties"] for r in roles)  # no AWS-managed policies at all


def test_function_code_is_the_repository_source_not_a_bundle(shipped):
    assets = json.loads((shipped.outdir / f"{shipped.stacks.pruner.stack_name}.assets.json").read_text())
    (files,) = [f for f in assets["files"].values() if f["source"].get("packaging") == "zip"]
    folder = shipped.outdir / files["source"]["path"]
    # Only the function's own runtime, the shared Lambda log line and the contracts: a change elsewhere (the
    # domain package, the agent, the image snapshot's function, the constructs) does not redeploy it.
    assert sorted(p.name for p in folder.iterdir()) == ["contracts", "lambdas", "pruner"]
    assert sorted(p.name for p in (folder / "lambdas").iterdir()) == ["__init__.py", "log.py"]
    assert sorted(p.name for p in (folder / "pruner").iterdir()) == ["__init__.py", "runtime"]
    assert (folder / "pruner" / "runtime" / "handler.py").exists()
