"""Limits of the services warmstart deploys into, checked before they are met: CloudFormation's per-template
limits (read after synth, on the templates themselves) and IAM's policy sizes (by grouping what grows with the
number of models)."""

from __future__ import annotations

import json

from warmstart.problem import Problem

# CloudFormation user guide, "CloudFormation quotas" (read 2026-11): a template uploaded through S3 (as the CDK
# CLI does) up to 1 MB; per template 500 resources, 200 parameters, 200 outputs.
TEMPLATE_BYTES = 1_000_000
TEMPLATE_RESOURCES = 500
TEMPLATE_PARAMETERS = 200
TEMPLATE_OUTPUTS = 200

# IAM user guide, "IAM and AWS STS quotas": a managed policy holds 6,144 characters (whitespace not counted),
# a role takes 10 managed policies by default; its inline policies share 10,240 characters.
MANAGED_POLICY_CHARACTERS = 6144
MANAGED_POLICIES_PER_ROLE = 10


def template_problems(stack_name: str, template_text: str) -> list[Problem]:
    """What CloudFormation would refuse in one synthesized template, before a deploy finds out."""
    template = json.loads(template_text)
    size = len(template_text.encode())
    field = f"<stack {stack_name}>"
    problems = []
    for what, count, limit in (
        ("bytes", size, TEMPLATE_BYTES),
        ("resources", len(template.get("Resources", {})), TEMPLATE_RESOURCES),
        ("parameters", len(template.get("Parameters", {})), TEMPLATE_PARAMETERS),
        ("outputs", len(template.get("Outputs", {})), TEMPLATE_OUTPUTS),
    ):
        if count > limit:
            problems.append(
                Problem(
                    field,
                    f"the template has {count} {what}, over CloudFormation's {limit}",
                    "split the environment (fewer models or instance types per environment)",
                )
            )
    return problems


def prefix_groups(bucket_name: str, prefixes: list[str]) -> list[list[str]]:
    """Model prefixes grouped so that each group's read statements (one ARN and one s3:prefix value each) fit one
    managed policy, with room for a KMS statement and the document's envelope."""
    groups: list[list[str]] = []
    size = 0
    for prefix in prefixes:
        cost = len(f'"arn:aws:s3:::{bucket_name}/{prefix}*",') + len(f'"{prefix}*",')
        if not groups or size + cost > MANAGED_POLICY_CHARACTERS - 1000:
            groups.append([])
            size = 0
        groups[-1].append(prefix)
        size += cost
    return groups
