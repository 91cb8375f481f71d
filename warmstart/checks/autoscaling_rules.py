"""Autoscaling on vLLM's load."""

from __future__ import annotations

from warmstart.checks.fix import Edit, removing, setting, together
from warmstart.checks.rule import POOL_FACTS, rule
from warmstart.config.environment import EnvironmentConfig
from warmstart.problem import Problem


@rule(needs=POOL_FACTS)
def _autoscaling(config: EnvironmentConfig) -> list[Problem]:
    problems = []
    for i, model in enumerate(config.models):
        scaling = model.autoscaling
        if scaling is None:
            continue
        field = f"models[{i}].autoscaling"
        lowered = scaling.max_replicas >= 2 or model.allow_single_replica_downtime
        if scaling.min_replicas > scaling.max_replicas:
            problems.append(
                Problem(
                    f"{field}.min_replicas",
                    f"{scaling.min_replicas} is above max_replicas ({scaling.max_replicas})",
                    f"set max_replicas to {scaling.min_replicas} or more"
                    # Lowering min_replicas works on its own only where one replica is allowed or max keeps two.
                    + (f", or min_replicas to {scaling.max_replicas}" if lowered else ""),
                    (
                        setting(f"{field}.max_replicas", scaling.min_replicas),
                        *([setting(f"{field}.min_replicas", scaling.max_replicas)] if lowered else []),
                    ),
                )
            )
        if scaling.min_replicas == 1 and not model.allow_single_replica_downtime:
            problems.append(
                Problem(
                    f"{field}.min_replicas",
                    "scaled in to one replica, the model goes offline whenever that node is replaced (expiry, "
                    "AMI drift, a rollout without room to surge)",
                    "use min_replicas: 2 or more, or accept the downtime with allow_single_replica_downtime: true",
                    (
                        together(
                            Edit(f"{field}.min_replicas", 2),
                            *([Edit(f"{field}.max_replicas", 2)] if scaling.max_replicas < 2 else []),
                        ),
                        setting(f"models[{i}].allow_single_replica_downtime", True),
                    ),
                )
            )
        if "replicas" in model.model_fields_set:
            problems.append(
                Problem(
                    f"models[{i}].replicas",
                    f"the autoscaler sets the replica count (from {scaling.min_replicas} to {scaling.max_replicas}); "
                    "a fixed count would be applied again on every deploy and fight it",
                    "remove replicas (min_replicas is the floor)",
                    (removing(f"models[{i}].replicas"),),
                )
            )
        if scaling.metric == "kv_cache_usage" and scaling.target_value is not None and scaling.target_value >= 1:
            problems.append(
                Problem(
                    f"{field}.target_value",
                    f"{scaling.target_value:g} is not a share of the KV cache (vLLM reports 0 to 1): pods would "
                    "never be added",
                    "use a share below 1, e.g. 0.8",
                    (setting(f"{field}.target_value", 0.8),),
                )
            )
    return problems
