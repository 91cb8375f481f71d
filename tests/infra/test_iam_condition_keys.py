"""Every conditioned IAM statement warmstart synthesizes (identity policies, trust policies, bucket, queue and
topic policies) uses only condition keys its actions carry (tests/iam_condition_keys.py)."""

from __future__ import annotations

import json

from tests.iam_condition_keys import unsupported_keys


def _conditioned_statements(node) -> list[dict]:
    found = []
    if isinstance(node, dict):
        statements = node.get("Statement")
        if isinstance(statements, list):
            found += [s for s in statements if isinstance(s, dict) and "Condition" in s]
        for value in node.values():
            found += _conditioned_statements(value)
    elif isinstance(node, list):
        for value in node:
            found += _conditioned_statements(value)
    return found


def test_every_condition_key_is_one_its_actions_carry(every_env):
    statements = [
        s for path in every_env.template_paths() for s in _conditioned_statements(json.loads(path.read_text()))
    ]
    assert len(statements) > 5
    problems = {problem for statement in statements for problem in unsupported_keys(statement)}
    assert not problems, sorted(problems)


def test_the_check_catches_the_pruners_old_multipart_statement():
    old = {
        "Action": ["s3:ListBucket", "s3:ListBucketMultipartUploads"],
        "Condition": {"StringLike": {"s3:prefix": ["compile-cache/*"]}},
    }
    assert unsupported_keys(old) == ["s3:ListBucketMultipartUploads: s3:prefix"]
    assert unsupported_keys({"Action": "sqs:SendMessage", "Condition": {"StringEquals": {"sqs:Unknown": "x"}}}) == [
        "sqs:SendMessage: sqs:Unknown"
    ]
