"""A Lambda function's code as the repository's own source: no bundling and no Docker at synth, and only what
the function imports, so that a change elsewhere in the repository does not redeploy it."""

from __future__ import annotations

from aws_cdk import IgnoreMode
from aws_cdk import aws_lambda as lambda_

from construct_kit.source import REPOSITORY_ROOT, only

# The runtime parts every function ships (the JSON log line).
SHARED_RUNTIME = ("lambdas/log.py",)


def function_source(*paths: str) -> list[str]:
    """The asset's exclude patterns: these paths (the function's runtime, and e.g. the domain package), the
    shared runtime parts, nothing else."""
    return only(*paths, *SHARED_RUNTIME)


def function_code(*paths: str) -> lambda_.Code:
    return lambda_.Code.from_asset(str(REPOSITORY_ROOT), exclude=function_source(*paths), ignore_mode=IgnoreMode.DOCKER)
