"""The compile-cache keys an environment's current models can produce: published at deploy, read by the
pruner, which never deletes them. Built with the same key function as the agent and `warmstart plan`."""

from __future__ import annotations

from contracts.active_set_format import render_parts
from contracts.cache_key import compile_cache_key
from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.sizing import candidate_instances
from warmstart.workload import plan_model


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


def active_set_documents(config: EnvironmentConfig, catalog: Catalog) -> list[str]:
    """The set as SSM parameter values, in the format the pruner reads (contracts/active_set_format.py)."""
    return render_parts(config.name, active_keys(config, catalog))
