"""What a deploy needs: the environment's name, bucket names, alerts, the agent image."""

from __future__ import annotations

import re

from warmstart.checks.problem import Problem
from warmstart.checks.rule import POOL_FACTS, rule
from warmstart.config import EnvironmentConfig
from warmstart.naming import bucket_name_problems, reference_problem

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
                "subscribe the emails to your topic, or remove alerts.topic_arn",
            )
        ]
    topic_region = config.alerts.topic_arn.split(":")[3] if config.alerts.topic_arn else config.region
    if topic_region != config.region:
        # CloudWatch user guide, "Using Amazon CloudWatch alarms": an alarm notifies topics of its own Region.
        return [
            Problem(
                "alerts.topic_arn",
                f"the topic is in {topic_region}, the alarms in "
                f"{config.region}: an alarm only notifies a topic of its own Region",
                f"give a topic in {config.region}, or leave topic_arn out (warmstart creates one)",
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
            problems.append(
                Problem(
                    field,
                    f"bucket name {name!r} " + "; ".join(broken) + " (S3 bucket naming rules)",
                    "choose a name S3 accepts, e.g. warmstart-<env>-<purpose>-<account>",
                )
            )
    return problems


@rule(needs=POOL_FACTS)
def _agent_image(config: EnvironmentConfig) -> list[Problem]:
    """A prebuilt agent image must name its digest: a tag can be pushed again, and the DaemonSet, the gates and
    their names (from the image's revision) would not follow."""
    image = config.deploy.agent_image
    if image is None:
        return []
    malformed = reference_problem(image)
    if malformed:
        return [Problem("deploy.agent_image", f"{image!r} {malformed}", "write registry/repository@sha256:<64 hex>")]
    if not re.search(r"@sha256:[0-9a-f]{64}$", image):
        return [
            Problem(
                "deploy.agent_image",
                f"{image!r} names no digest: a tag can be pushed again, and nodes would run different agents",
                "use the digest `make agent-image` prints (registry/repository@sha256:<64 hex>)",
            )
        ]
    return []
