"""Constructs on their own, each in a bare stack with settings built here (not the shipped config/*.yaml), so
that branches the shipped environments never take are covered: a KMS-encrypted model bucket, an existing model
bucket, another environment's active set, several weights-cached models on the agent."""

from __future__ import annotations

import json

from aws_cdk import App, Environment, Stack
from aws_cdk.assertions import Match, Template

from construct_kit.buckets import ArtifactBuckets
from construct_kit.pod_identity import model_read_statements
from pruner.construct import CompileCachePruner
from pruner.runtime.settings import PrunerEnvironment
from tests.synth import cdk_context
from warmstart.config.operations import BucketsConfig, ModelBucket, PruningPolicy

KMS_KEY = "arn:aws:kms:us-east-1:210987654321:key/0123abcd-0123-4567-89ab-0123456789ab"


def _stack() -> Stack:
    # The app's own feature flags (cdk.json), as `cdk synth` gives them.
    return Stack(App(context=cdk_context()), "Bare", env=Environment(account="210987654321", region="us-east-1"))


def test_a_kms_encrypted_model_bucket_adds_decrypt_through_s3_only():
    stack = _stack()
    statements = model_read_statements("acme-weights", ["qwen/", "llama/"], KMS_KEY, partition=stack.partition)
    rendered = [stack.resolve(s.to_statement_json()) for s in statements]
    decrypt = next(s for s in rendered if s["Sid"] == "DecryptModelObjects")
    assert decrypt["Action"] == "kms:Decrypt" and decrypt["Resource"] == KMS_KEY
    via = decrypt["Condition"]["StringEquals"]["kms:ViaService"]  # s3.<the stack's Region>.amazonaws.com
    assert via == {"Fn::Join": ["", ["s3.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}
    reads = next(s for s in rendered if s["Sid"] == "ReadModelObjects")
    assert reads["Resource"] == ["arn:aws:s3:::acme-weights/qwen/*", "arn:aws:s3:::acme-weights/llama/*"]


def test_without_a_key_there_is_no_kms_statement():
    stack = _stack()
    statements = model_read_statements("acme-weights", "qwen/", None, partition=stack.partition)
    assert [stack.resolve(s.to_statement_json())["Sid"] for s in statements] == ["ReadModelObjects", "ListModelPrefix"]


def test_an_existing_model_bucket_is_referenced_never_created():
    stack = _stack()
    buckets = BucketsConfig(
        models=ModelBucket(name="acme-existing-weights", create=False, kms_key_arn=KMS_KEY),
        compile_cache="acme-compile-cache",
    )
    ArtifactBuckets(stack, "Buckets", buckets=buckets, pruner_role_arn="arn:aws:iam::210987654321:role/p")
    template = Template.from_stack(stack)
    names = [r["Properties"].get("BucketName") for r in template.find_resources("AWS::S3::Bucket").values()]
    assert "acme-existing-weights" not in names and "acme-compile-cache" in names


def test_a_pruner_sharing_the_bucket_reads_the_other_environments_set_and_its_parts():
    stack = _stack()
    policy = PruningPolicy(extra_active_set_parameters=["/warmstart/qa/compile-cache/active-keys"])
    pruner = CompileCachePruner(
        stack,
        "Pruner",
        environment="prod",
        bucket_name="acme-compile-cache",
        active_set_name="/warmstart/prod/compile-cache/active-keys",
        active_set_documents=['{"version":1,"keys":[],"parts":2}', '{"version":1,"keys":[],"part":2}'],
        policy=policy,
    )
    template = Template.from_stack(stack)
    variables = template.find_resources("AWS::Lambda::Function")
    (function,) = [r for r in variables.values() if "ACTIVE_SET_PARAMETERS" in json.dumps(r)]
    read = PrunerEnvironment.read(function["Properties"]["Environment"]["Variables"])
    assert read.active_set_parameters == (
        "/warmstart/prod/compile-cache/active-keys",
        "/warmstart/qa/compile-cache/active-keys",
    )
    assert len(pruner.active_set_parts) == 2
    template.has_resource_properties(
        "AWS::SSM::Parameter", {"Name": "/warmstart/prod/compile-cache/active-keys-2", "Tier": "Standard"}
    )
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Sid": "ReadActiveSets",
                                "Resource": [
                                    "arn:aws:ssm:us-east-1:210987654321:parameter/warmstart/prod/compile-cache/active-keys",
                                    "arn:aws:ssm:us-east-1:210987654321:parameter/warmstart/prod/compile-cache/active-keys-2",
                                    "arn:aws:ssm:us-east-1:210987654321:parameter/warmstart/qa/compile-cache/active-keys",
                                    "arn:aws:ssm:us-east-1:210987654321:parameter/warmstart/qa/compile-cache/active-keys-*",
                                ],
                            }
                        )
                    ]
                )
            }
        },
    )
