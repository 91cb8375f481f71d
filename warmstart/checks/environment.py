"""The checks of one environment: every rule of every topic, each when what it needs holds."""

from __future__ import annotations

from types import ModuleType

from warmstart.catalog import Catalog
from warmstart.checks import (
    autoscaling_rules,
    cache_rules,
    deploy_rules,
    existing_rules,
    network_rules,
    pool_rules,
    preload_rules,
    scale_rules,
    vllm_rules,
    workload_rules,
)
from warmstart.checks.rule import RULES, run_rules
from warmstart.config.environment import EnvironmentConfig
from warmstart.problem import Problem

# The order problems are reported in, within what the rules need: the cluster, then the models, then the rest.
TOPICS: tuple[ModuleType, ...] = (
    network_rules,
    existing_rules,
    pool_rules,
    workload_rules,
    vllm_rules,
    cache_rules,
    preload_rules,
    autoscaling_rules,
    deploy_rules,
    scale_rules,
)


def check_environment(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    order = [topic.__name__ for topic in TOPICS]
    rules = sorted(RULES, key=lambda r: order.index(r.name.rpartition(".")[0]))
    return run_rules(rules, config, catalog)
