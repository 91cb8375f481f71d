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
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"][
            "SSEAlgorithm"
        ] == "AES256"
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
