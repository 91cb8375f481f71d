"""The compile-cache keys an environment's current models can produce: published at deploy, read by the
pruner, which never deletes them. Built with the same key function as the agent and `warmstart plan`."""

from __future__ import annotations

import json

from warmstart.cache_key import compile_cache_key
from warmstart.catalog import Catalog
from warmstart.config import EnvironmentConfig
from warmstart.sizing import candidate_instances
from warmstart.workload import plan_model

ACTIVE_SET_VERSION = 1
# SSM parameter limits: Standard holds 4 KB, Advanced 8 KB.
STANDARD_LIMIT, ADVANCED_LIMIT = 4096, 8192


def active_keys(config: EnvironmentConfig, catalog: Catalog) -> list[str]:
    keys = set()
    for model in config.models:
        plan = plan_model(model, config, catalog)
        if not plan.compile_cache:
            continue
        for instance in candidate_instances(model, config, catalog):
            keys.add(compile_cache_key(plan.factors, gpu=instance.gpu_name, architecture=instance.architecture).prefix)
    return sorted(keys)


def active_set_parameter_name(config: EnvironmentConfig) -> str:
    return f"/warmstart/{config.name}/compile-cache/active-keys"


def active_set_document(config: EnvironmentConfig, catalog: Catalog) -> str:
    return json.dumps(
        {"version": ACTIVE_SET_VERSION, "environment": config.name, "keys": active_keys(config, catalog)},
        separators=(",", ":"),
    )
