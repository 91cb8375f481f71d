"""The compile-cache keys an environment's current models can produce: published at deploy, read by the
pruner, which never deletes them. Built with the same key function as the agent and `warmstart plan`."""

from __future__ import annotations

import json

from contracts.active_set_format import MAX_ACTIVE_SET_PARTS
from contracts.cache_key import compile_cache_key
from warmstart.catalog import Catalog
from warmstart.config import EnvironmentConfig
from warmstart.sizing import candidate_instances
from warmstart.workload import plan_model

ACTIVE_SET_VERSION = 1
# SSM parameter limits: Standard holds 4 KB, Advanced 8 KB. A larger set is split into parts: the first
# parameter (the name other environments' pruners are given) says how many parts there are, the others are
# named <name>-2, <name>-3, ...; the pruner reads them all or deletes nothing.
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


def active_set_documents(config: EnvironmentConfig, catalog: Catalog) -> list[str]:
    """The set as parameter values of at most ADVANCED_LIMIT bytes each; the first names the number of parts."""
    keys = active_keys(config, catalog)
    groups: list[list[str]] = [[]]
    for key in keys:
        # Room for the envelope with the largest part count written in: the size test is conservative.
        if (
            groups[-1]
            and len(_document(config.name, groups[-1] + [key], parts=MAX_ACTIVE_SET_PARTS).encode()) > ADVANCED_LIMIT
        ):
            groups.append([])
        groups[-1].append(key)
    count = len(groups)
    return [
        _document(config.name, group, parts=count if index == 0 else None, part=index + 1)
        for index, group in enumerate(groups)
    ]


def _document(environment: str, keys: list[str], *, parts: int | None, part: int = 1) -> str:
    document: dict = {"version": ACTIVE_SET_VERSION, "environment": environment, "keys": keys}
    if parts is not None and parts > 1:
        document["parts"] = parts
    if part > 1:
        document["part"] = part
    return json.dumps(document, separators=(",", ":"))
