"""What a deploy needs: the environment's name, bucket names, alerts, the agent image."""

from __future__ import annotations

import re

from warmstart.checks.fix import Edit, removing, setting, together
from warmstart.checks.rule import POOL_FACTS, rule
from warmstart.config.environment import EnvironmentConfig
from warmstart.naming import bucket_name_problems, reference_problem
from warmstart.problem import Problem

# IAM role names are at most 64 characters; the pruner's role is named after the environment so the compile
# bucket's policy can name it (warmstart-<env>-compile-cache-pruner).
MAX_ENVIRONMENT_NAME = 36


@rule()
def _environment_name(config: EnvironmentConfig) -> list[Problem]:
    if len(config.name) > MAX_ENVIRONMENT_NAME:
        return [
            Problem(
                "name",
                f"{len(config.name)} characters: roles named after the environment would exceed IAM's 64",
                f"use at most {MAX_ENVIRONMENT_NAME} characters",
                (setting("name", config.name[:MAX_ENVIRONMENT_NAME].rstrip("-")),),
            )
        ]
    return []


@rule()
def _alerts(config: EnvironmentConfig) -> list[Problem]:
    if config.alerts.topic_arn and config.alerts.emails:
        return [
            Problem(
                "alerts.emails",
                "emails are for the topic warmstart creates; an existing topic is given too",
                "subscribe the emails to your topic (and remove alerts.emails), or remove alerts.topic_arn",
                (removing("alerts.emails"), removing("alerts.topic_arn")),
            )
        ]
    parts = config.alerts.topic_arn.split(":") if config.alerts.topic_arn else []
    topic_region = parts[3] if parts else config.region
    if topic_region != config.region:
        # CloudWatch user guide, "Using Amazon CloudWatch alarms": an alarm notifies topics of its own Region.
        return [
            Problem(
                "alerts.topic_arn",
                f"the topic is in {topic_region}, the alarms in "
                f"{config.region}: an alarm only notifies a topic of its own Region",
                f"give a topic in {config.region}, or leave topic_arn out (warmstart creates one)",
                (
                    setting("alerts.topic_arn", ":".join([*parts[:3], config.region, *parts[4:]])),
                    removing("alerts.topic_arn"),
                ),
            )
        ]
    return []


@rule()
def _bucket_names(config: EnvironmentConfig) -> list[Problem]:
    named = [
        ("buckets.compile_cache", config.buckets.compile_cache),
        ("buckets.models.name", config.buckets.models.name),
    ]
    named += [(f"models[{i}].s3_uri", m.bucket) for i, m in enumerate(config.models)]
    problems = []
    for field, name in named:
        broken = bucket_name_problems(name)
        if broken:
            fixes = _bucket_fixes(config, field, name)
            problems.append(
                Problem(
                    field,
                    f"bucket name {name!r} " + "; ".join(broken) + " (S3 bucket naming rules)",
                    "choose a name S3 accepts, e.g. warmstart-<env>-<purpose>-<account>",
                    fixes,
                )
            )
    return problems


def _bucket_fixes(config: EnvironmentConfig, field: str, name: str) -> tuple:
    """The name S3 accepts closest to the one given (its dots and dashes tidied), or warmstart's own; a model's
    URI moves with the model bucket (both are renamed, or the URI points at it)."""
    purpose = "compile-cache" if field == "buckets.compile_cache" else "models"
    tidy = re.sub(r"[-.]{2,}", lambda m: m.group(0)[0], name.lower()).strip("-.")
    tidy = re.sub(r"^(xn--|sthree-|amzn-s3-demo-)", "", tidy)
    tidy = re.sub(r"(-s3alias|--ol-s3|\.mrap|--x-s3|--table-s3)$", "", tidy)[:63].strip("-.")
    chosen = tidy if tidy and not bucket_name_problems(tidy) else f"warmstart-{config.name}-{purpose}-{config.account}"
    models_bucket = config.buckets.models.name
    if field.startswith("models[") and not bucket_name_problems(models_bucket):
        prefix = config.models[int(field[7 : field.index("]")])].prefix
        return (setting(field, f"s3://{models_bucket}/{prefix}"),)
    if field.startswith("models["):
        return _bucket_fixes(config, "buckets.models.name", models_bucket)
    if field == "buckets.models.name":
        edits = [Edit(field, chosen)]
        edits += [
            Edit(f"models[{i}].s3_uri", f"s3://{chosen}/{m.prefix}")
            for i, m in enumerate(config.models)
            if m.bucket == name
        ]
        return (together(*edits),)
    return (setting(field, chosen),)


@rule(needs=POOL_FACTS)
def _agent_image(config: EnvironmentConfig) -> list[Problem]:
    """A prebuilt agent image must name its digest: a tag can be pushed again, and the DaemonSet, the gates and
    their names (from the image's revision) would not follow."""
    image = config.deploy.agent_image
    if image is None:
        return []
    malformed = reference_problem(image)
    if malformed:
        return [
            Problem(
                "deploy.agent_image",
                f"{image!r} {malformed}",
                "write registry/repository@sha256:<64 hex>, or remove agent_image (CDK builds the image at deploy)",
                (removing("deploy.agent_image"),),
            )
        ]
    if not re.search(r"@sha256:[0-9a-f]{64}$", image):
        return [
            Problem(
                "deploy.agent_image",
                f"{image!r} names no digest: a tag can be pushed again, and nodes would run different agents",
                "use the digest `make agent-image` prints (registry/repository@sha256:<64 hex>), or remove "
                "agent_image (CDK builds the image at deploy)",
                (removing("deploy.agent_image"),),
            )
        ]
    return []
