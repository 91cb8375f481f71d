#!/usr/bin/env python3
"""Loads the environment's config and composes its stacks (cdk synth / cdk deploy).

A refused config ends the app with the problem list on stderr and exit status 2, the same list and status as
`warmstart plan` (no traceback): every rule lives in the domain package, none is first found by CDK. The
templates are then checked against CloudFormation's limits before anything is deployed.
"""

import sys
from pathlib import Path

from aws_cdk import App

from stacks.compose import compose_environment
from warmstart.config_file import ConfigError
from warmstart.loader import load_config
from warmstart.notes import config_notes
from warmstart.scale import template_problems

CONFIG_CONTEXT = "warmstart:config"

app = App()
config_path = app.node.try_get_context(CONFIG_CONTEXT)
if not config_path:
    print(
        f"no environment file: pass --context {CONFIG_CONTEXT}=config/<env>.yaml (cdk.json names the default)",
        file=sys.stderr,
    )
    sys.exit(2)
try:
    config = load_config(config_path)
except ConfigError as error:
    print(error, file=sys.stderr)
    sys.exit(2)
for note in config_notes(config):  # what the recorded facts do not reach: never a refusal
    print(f"note: {note}", file=sys.stderr)
compose_environment(app, config)
assembly = app.synth()
problems = [
    p
    for stack in assembly.stacks
    for p in template_problems(stack.stack_name, Path(stack.template_full_path).read_text())
]
if problems:
    print(ConfigError(config_path, problems), file=sys.stderr)
    sys.exit(2)
