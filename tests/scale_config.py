"""An environment of N models (prod's first model, renamed), for the scale test and the synth benchmark."""

from __future__ import annotations

import copy

import yaml

from tests.synth import ROOT
from warmstart.config.environment import EnvironmentConfig
from warmstart.loader import parse_config


def many_models(count: int) -> EnvironmentConfig:
    return parse_config(many_models_settings(count), source=f"prod with {count} models")


def many_models_settings(count: int) -> dict:
    raw = yaml.safe_load((ROOT / "config" / "prod.yaml").read_text())
    base = raw["models"][0]
    raw["models"] = [
        {**copy.deepcopy(base), "name": f"model-{i:03d}", "s3_uri": f"s3://acme-llm-weights-prod/model-{i:03d}/"}
        for i in range(count)
    ]
    raw["compute"]["gpu_pool"]["gpu_limit"] = count * 2 * 8 + 8  # every replica on its own node, and a surge
    return raw
