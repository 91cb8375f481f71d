#!/usr/bin/env python3
"""Loads the environment's config and composes its stacks (cdk synth / cdk deploy)."""

from aws_cdk import App

from stacks.compose import compose_environment
from warmstart.loader import load_config

app = App()
compose_environment(app, load_config(app.node.get_context("warmstart:config")))
app.synth()
