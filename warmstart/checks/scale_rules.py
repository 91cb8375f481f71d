"""Limits that grow with the number of models: IAM policy sizes."""

from __future__ import annotations

from warmstart.checks.fix import Edit, together
from warmstart.checks.rule import POOL_FACTS, rule
from warmstart.config.environment import EnvironmentConfig
from warmstart.node_caches import weights_cached
from warmstart.problem import Problem
from warmstart.scale import MANAGED_POLICIES_PER_ROLE, prefix_groups


def _weights_cache_off(config: EnvironmentConfig):
    """The weights cache off for the cached models beyond those the role's policies can hold (the groups are
    filled in the models' order)."""
    cached = [i for i, m in enumerate(config.models) if weights_cached(m, config)]
    groups = prefix_groups(config.buckets.models.name, [config.models[i].prefix for i in cached])
    keep = sum(len(group) for group in groups[:MANAGED_POLICIES_PER_ROLE])
    return together(*(Edit(f"models[{i}].weights_cache", False) for i in cached[keep:]))


@rule(needs=POOL_FACTS)
def _agent_policies(config: EnvironmentConfig) -> list[Problem]:
    prefixes = [m.prefix for m in config.models if weights_cached(m, config)]
    groups = len(prefix_groups(config.buckets.models.name, prefixes))
    if groups <= MANAGED_POLICIES_PER_ROLE:
        return []
    return [
        Problem(
            "caches.weights",
            f"{len(prefixes)} weights-cached models need {groups} IAM managed policies on "
            f"the node agent's role, over the {MANAGED_POLICIES_PER_ROLE} a role takes",
            "turn the weights cache off for some models (weights_cache: false), or split the environment",
            (_weights_cache_off(config),),
        )
    ]
