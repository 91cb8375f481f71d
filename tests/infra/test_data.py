from aws_cdk.assertions import Match


def _buckets(template: dict) -> dict:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == "AWS::S3::Bucket"}


def test_every_bucket_is_encrypted_private_retained_and_aborts_multipart(shipped):
    buckets = _buckets(shipped.template_json("data"))
    expected = 3 if shipped.config.buckets.models.create else 2
    assert len(buckets) == expected
    for logical_id, bucket in buckets.items():
        props = bucket["Properties"]
        assert bucket["DeletionPolicy"] == "Retain", logical_id
        assert bucket["UpdateReplacePolicy"] == "Retain", logical_id
        assert (
            props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"][
                "SSEAlgorithm"
            ]
            == "AES256"
        )
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        rules = props["LifecycleConfiguration"]["Rules"]
        assert any(
            r.get("AbortIncompleteMultipartUpload", {}).get("DaysAfterInitiation")
            == shipped.config.buckets.abort_incomplete_multipart_days
            for r in rules
        ), logical_id


def test_data_buckets_log_access_to_the_log_bucket(shipped):
    buckets = _buckets(shipped.template_json("data"))
    logged = [b for b in buckets.values() if "LoggingConfiguration" in b["Properties"]]
    assert len(logged) == len(buckets) - 1
    log_bucket = next(k for k, b in buckets.items() if "LoggingConfiguration" not in b["Properties"])
    for bucket in logged:
        assert bucket["Properties"]["LoggingConfiguration"]["DestinationBucketName"] == {"Ref": log_bucket}


def test_every_bucket_policy_denies_plain_http_and_old_tls(shipped):
    template = shipped.template_json("data")
    policies = [r for r in template["Resources"].values() if r["Type"] == "AWS::S3::BucketPolicy"]
    assert len(policies) == len(_buckets(template))
    for policy in policies:
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert {
            "Action": "s3:*",
            "Condition": {"Bool": {"aws:SecureTransport": "false"}},
            "Effect": "Deny",
            "Principal": {"AWS": "*"},
            "Resource": Match.any_value(),
        }.keys() <= next(s for s in statements if s.get("Condition", {}).get("Bool")).keys()
        assert any(s.get("Condition", {}).get("NumericLessThan", {}).get("s3:TlsVersion") == 1.2 for s in statements)


def test_created_model_bucket_is_versioned_and_named(dev):
    dev.template("data").has_resource_properties(
        "AWS::S3::Bucket",
        {"BucketName": dev.config.buckets.models.name, "VersioningConfiguration": {"Status": "Enabled"}},
    )


def test_existing_model_bucket_is_referenced_not_created(prod):
    template = prod.template_json("data")
    names = [b["Properties"].get("BucketName") for b in _buckets(template).values()]
    assert prod.config.buckets.models.name not in names


def _compile_cache_denials(synthesized) -> dict[str, dict]:
    template = synthesized.template_json("data")
    (policy,) = [
        r
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::S3::BucketPolicy" and k.startswith("BucketsCompileCache")
    ]
    return {s["Sid"]: s for s in policy["Properties"]["PolicyDocument"]["Statement"] if "Sid" in s}


def _object_patterns(statement: dict) -> list[str]:
    """The object-key patterns after the bucket ARN (each Resource is Fn::Join of the ARN and a suffix)."""
    return sorted(r["Fn::Join"][1][1].removeprefix("/") for r in statement["Resource"])


def test_compile_cache_objects_are_created_once_and_deleted_only_by_the_pruner(shipped):
    """Defect 6: what every node loads and runs cannot be overwritten or deleted by a node (S3 user guide,
    "Enforce conditional writes on Amazon S3 buckets": s3:if-none-match, s3:ObjectCreationOperation)."""
    denials = _compile_cache_denials(shipped)
    create_once = denials["CreateCacheObjectsOnlyIfAbsent"]
    assert (create_once["Effect"], create_once["Action"], create_once["Principal"]) == (
        "Deny",
        "s3:PutObject",
        {"AWS": "*"},
    )
    assert create_once["Condition"] == {
        "Null": {"s3:if-none-match": "true"},
        "Bool": {"s3:ObjectCreationOperation": "true"},
    }
    only_pruner = denials["OnlyThePrunerDeletesCacheObjects"]
    assert (only_pruner["Effect"], only_pruner["Action"]) == ("Deny", "s3:DeleteObject")
    pruner_role = f"arn:aws:iam::{shipped.config.account}:role/warmstart-{shipped.config.name}-cache-pruner"
    assert only_pruner["Condition"] == {"ArnNotEquals": {"aws:PrincipalArn": pruner_role}}
    # The pruner stack names its role exactly so.
    roles = [
        r["Properties"] for r in shipped.template_json("pruner")["Resources"].values() if r["Type"] == "AWS::IAM::Role"
    ]
    assert pruner_role.rsplit("/", 1)[1] in [r.get("RoleName") for r in roles]
    for statement in (create_once, only_pruner):
        assert _object_patterns(statement) == ["compile-cache/*/archive-*", "compile-cache/*/manifest-*"]


# What S3 evaluates for these two statements: the request's action, object key and context (IAM user guide,
# "Policy evaluation logic": an explicit Deny whose resource and every condition match wins; "Null": true
# means the key is absent; S3 resource ARNs match "*" across "/").
def _denied(denials: dict, action: str, key: str, context: dict) -> bool:
    import fnmatch

    def condition_holds(operator: str, name: str, expected) -> bool:
        value = context.get(name)
        if operator == "Null":
            return (value is None) == (expected == "true")
        if operator == "Bool":
            return value is not None and str(value).lower() == expected
        if operator == "ArnNotEquals":
            return value != expected
        raise AssertionError(f"operator {operator} is not modelled here")

    for statement in denials.values():
        if statement["Action"] != action or not any(fnmatch.fnmatchcase(key, p) for p in _object_patterns(statement)):
            continue
        if all(
            condition_holds(op, name, expected)
            for op, pairs in statement["Condition"].items()
            for name, expected in pairs.items()
        ):
            return True
    return False


def test_the_bucket_policy_admits_create_once_and_refuses_overwrites(dev):
    denials = _compile_cache_denials(dev)
    agent = "arn:aws:iam::123456789012:role/warmstart-dev-agent"
    pruner = "arn:aws:iam::123456789012:role/warmstart-dev-cache-pruner"
    key = "compile-cache/qwen3-4b/nvidia-l40s-sm89/tp1-pp1/torch2.11.0/0123abcd"
    put = {"aws:PrincipalArn": agent, "s3:ObjectCreationOperation": "true"}
    cases = {
        # (action, object, request context): denied?
        "manifest created only if absent": (
            "s3:PutObject",
            f"{key}/manifest-aa.json",
            {**put, "s3:if-none-match": "*"},
            False,
        ),
        "manifest overwritten": ("s3:PutObject", f"{key}/manifest-aa.json", put, True),
        "archive overwritten": ("s3:PutObject", f"{key}/archive-1.tar", put, True),
        "a part of a create-only multipart upload": (
            "s3:PutObject",
            f"{key}/archive-1.tar",
            {**put, "s3:ObjectCreationOperation": "false"},
            False,
        ),
        "last-use.json rewritten on every use": ("s3:PutObject", f"{key}/last-use.json", put, False),
        "a node deleting a manifest": ("s3:DeleteObject", f"{key}/manifest-aa.json", {"aws:PrincipalArn": agent}, True),
        "the pruner deleting an archive": (
            "s3:DeleteObject",
            f"{key}/archive-1.tar",
            {"aws:PrincipalArn": pruner},
            False,
        ),
    }
    outcomes = {name: _denied(denials, action, obj, context) for name, (action, obj, context, _) in cases.items()}
    assert outcomes == {name: expected for name, (*_, expected) in cases.items()}
