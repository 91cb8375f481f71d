"""The GPU pool and its capacity: instance types, lifetimes, reservations, disks and the GPU budget."""

from __future__ import annotations

import difflib
import math
import re

from warmstart.catalog import Catalog
from warmstart.checks.fix import Edit, removing, setting, together
from warmstart.checks.rule import POOL_FACTS, rule
from warmstart.config.base import GIB
from warmstart.config.compute import AutoModeCompute, KarpenterCompute
from warmstart.config.environment import EnvironmentConfig
from warmstart.node_caches import weights_cached
from warmstart.placement import models_inside_pool, rollout_placement, steady_placement
from warmstart.problem import Problem
from warmstart.sizing import (
    ephemeral_storage_below_nvme,
)
from warmstart.workload import NVME_USABLE, nvme_need_gb

# Auto Mode refuses a NodePool whose expireAfter plus terminationGracePeriod exceeds 21 days (the
# message Auto Mode returns: "the sum of expireAfter and terminationGracePeriod ... may not exceed 21 days").
AUTO_MODE_MAX_LIFETIME_HOURS = 21 * 24


def duration_hours(text: str) -> float:
    """'336h', '1h30m', '90s' -> hours."""
    units = {"h": 1.0, "m": 1 / 60, "s": 1 / 3600}
    return sum(float(number) * units[unit] for number, unit in re.findall(r"([0-9]+)([hms])", text))


@rule()
def _pool_instance_types(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    known = ", ".join(sorted(catalog.instances))
    types = config.compute.gpu_pool.instance_types
    return [
        Problem(
            f"compute.gpu_pool.instance_types[{i}]",
            f"{name!r} is not in the GPU catalog, so its GPUs and NVMe size are unknown",
            ("remove it, or " if len(types) > 1 else "") + f"use one of: {known} (or add it to "
            "warmstart/catalog.yaml with its source)",
            _unknown_type_fixes(types, i, catalog),
        )
        for i, name in enumerate(types)
        if not catalog.knows(name)
    ]


def _unknown_type_fixes(types: list[str], index: int, catalog: Catalog) -> tuple:
    """The closest catalog name in its place (a typo), or the type left out where others remain."""
    field = f"compute.gpu_pool.instance_types[{index}]"
    if any(catalog.knows(t) for t in types if t != types[index]):
        return (removing(field),)
    # The only type: the catalog's closest name (a typo), which the other rules then judge as any pool type.
    closest = difflib.get_close_matches(types[index], list(catalog.instances), n=1, cutoff=0.0)
    return (setting(field, closest[0] if closest else min(catalog.instances)),)


@rule()
def _system_node_group(config: EnvironmentConfig) -> list[Problem]:
    if isinstance(config.compute, KarpenterCompute):
        group = config.compute.system_node_group
        if group.min_size > group.max_size:
            return [
                Problem(
                    "compute.system_node_group.min_size",
                    f"min_size {group.min_size} is above max_size {group.max_size}",
                    f"set max_size to {group.min_size} or more, or min_size to {group.max_size}",
                    (
                        setting("compute.system_node_group.max_size", group.min_size),
                        setting("compute.system_node_group.min_size", group.max_size),
                    ),
                )
            ]
    return []


@rule()
def _capacity_reservations(config: EnvironmentConfig) -> list[Problem]:
    pool = config.compute.gpu_pool
    reserved = "reserved" in pool.capacity_types
    types = "compute.gpu_pool.capacity_types"
    # Without 'reserved' (on-demand where nothing else is left: the list takes at least one).
    unreserved = Edit(types, [t for t in pool.capacity_types if t != "reserved"] or ["on-demand"])
    if isinstance(config.compute, AutoModeCompute):
        if reserved or pool.capacity_reservations:
            return [
                Problem(
                    types,
                    "capacity reservations are wired for the Karpenter mode only (its EC2NodeClass selects them)",
                    "remove 'reserved' and capacity_reservations (or move the environment to compute.mode: "
                    "karpenter, whose settings differ)",
                    (together(unreserved, Edit("compute.gpu_pool.capacity_reservations")),),
                )
            ]
        return []
    if reserved and not pool.capacity_reservations:
        return [
            Problem(
                "compute.gpu_pool.capacity_types",
                "'reserved' is listed but no reservation is selected: "
                "Karpenter only launches reserved capacity from reservations its EC2NodeClass selects, "
                "so it would never use any",
                "add compute.gpu_pool.capacity_reservations (an id: cr-... or tags: {...}), or remove 'reserved'",
                (together(unreserved),),
            )
        ]
    if pool.capacity_reservations and not reserved:
        return [
            Problem(
                "compute.gpu_pool.capacity_reservations",
                "reservations are selected but 'reserved' is not "
                "an allowed capacity type, so the pool never launches into them",
                "add 'reserved' to compute.gpu_pool.capacity_types, or remove capacity_reservations",
                (
                    setting(types, [*pool.capacity_types, "reserved"]),
                    removing("compute.gpu_pool.capacity_reservations"),
                ),
            )
        ]
    return []


@rule()
def _node_lifetime(config: EnvironmentConfig) -> list[Problem]:
    pool = config.compute.gpu_pool
    if not isinstance(config.compute, AutoModeCompute):
        return []
    grace = duration_hours(pool.termination_grace_period)
    most = AUTO_MODE_MAX_LIFETIME_HOURS - grace
    # Auto Mode's default lifetime where it fits beside the grace period, else the longest that does; a grace
    # period that leaves no hour goes back to its default too.
    expire, fix = "compute.gpu_pool.expire_after", None
    if most >= 336:
        fix = setting(expire, "336h")
    elif most >= 1:
        fix = setting(expire, f"{math.floor(most)}h")
    else:
        fix = together(Edit(expire, "336h"), Edit("compute.gpu_pool.termination_grace_period"))
    if pool.expire_after == "Never":
        return [
            Problem(
                expire,
                "Auto Mode nodes live at most 21 days; 'Never' is refused",
                f"use at most {max(most, 0):g}h with termination_grace_period {pool.termination_grace_period}, "
                "e.g. 336h (Auto Mode's default)",
                (fix,),
            )
        ]
    total = duration_hours(pool.expire_after) + grace
    if total > AUTO_MODE_MAX_LIFETIME_HOURS:
        return [
            Problem(
                expire,
                f"{pool.expire_after} plus termination_grace_period {pool.termination_grace_period} is "
                f"{total:g}h; Auto Mode refuses node lifetimes above 21 days ({AUTO_MODE_MAX_LIFETIME_HOURS}h)",
                f"use at most {max(most, 0):g}h, e.g. 336h (Auto Mode's default)"
                + ("" if most >= 1 else ", with a shorter termination_grace_period"),
                (fix,),
            )
        ]
    return []


@rule(needs=POOL_FACTS)
def _ephemeral_storage(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    compute = config.compute
    if not isinstance(compute, AutoModeCompute):
        return []
    too_big = [
        catalog.instance(name)
        for name in compute.gpu_pool.instance_types
        if not ephemeral_storage_below_nvme(compute, catalog.instance(name))
    ]
    if not too_big:
        return []
    smallest = min(too_big, key=lambda i: i.nvme_gb)
    largest_allowed = math.ceil(smallest.nvme_bytes / GIB) - 1
    names = ", ".join(f"{i.instance_type} ({i.nvme_gb} GB)" for i in too_big)
    fewer = without_types(config, {i.instance_type for i in too_big})
    return [
        Problem(
            "compute.ephemeral_storage_gib",
            f"{compute.ephemeral_storage_gib} GiB is not below the NVMe capacity of {names}; Auto Mode would "
            "then put /mnt/.ephemeral on the root EBS volume (no RAID0 instance store, ~30x slower)",
            f"set ephemeral_storage_gib to at most {largest_allowed}"
            + (", or remove those instance types" if fewer else ""),
            (setting("compute.ephemeral_storage_gib", largest_allowed), *fewer),
        )
    ]


def without_types(config: EnvironmentConfig, names: set[str]) -> tuple:
    """The pool without some instance types, where others remain and no model is restricted to them alone."""
    kept = [t for t in config.compute.gpu_pool.instance_types if t not in names]
    if not kept:
        return ()
    edits = [Edit("compute.gpu_pool.instance_types", kept)]
    for index, model in enumerate(config.models):
        if model.instance_types is not None:
            remaining = [t for t in model.instance_types if t not in names]
            if not remaining:
                return ()
            edits.append(Edit(f"models[{index}].instance_types", remaining))
    return (together(*edits),)


@rule(needs=POOL_FACTS)
def _nvme_budget(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    """All cached models that may share an instance must fit its NVMe together."""
    problems = []
    for name in config.compute.gpu_pool.instance_types:
        instance = catalog.instance(name)
        sharing = [
            m
            for m in config.models
            if weights_cached(m, config) and name in (m.instance_types or config.compute.gpu_pool.instance_types)
        ]
        need = nvme_need_gb(config, sharing)
        if len(sharing) > 1 and need > instance.nvme_gb * NVME_USABLE:
            problems.append(
                Problem(
                    "caches.weights",
                    f"{', '.join(m.name for m in sharing)} together need {need:g} GB of NVMe on {name}, which has "
                    f"{instance.nvme_gb * NVME_USABLE:g} GB usable",
                    "turn the weights cache off for some models (weights_cache: false), or give them separate "
                    "instance types (instance_types)",
                    (together(*(Edit(f"models[{config.models.index(m)}].weights_cache", False) for m in sharing[1:])),),
                )
            )
    return problems


@rule(needs=POOL_FACTS)
def _gpu_budget(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    """Karpenter launches a node only while the pool's GPUs (whole nodes) stay within gpu_limit: a limit below
    every instance type's GPUs launches nothing, and one below what the replicas hold leaves pods pending."""
    pool = config.compute.gpu_pool
    field = "compute.gpu_pool.gpu_limit"
    smallest = min(catalog.instance(t).gpu_count for t in pool.instance_types)
    inside = models_inside_pool(config)
    steady = steady_placement(config, catalog) if inside else None
    needed_at = rollout_placement(config, catalog) if inside and pool.surge else steady
    # The limit the placement needs: a fix that names less would be refused next.
    needed = max(smallest, needed_at.gpus) if needed_at else smallest
    if pool.gpu_limit < smallest:
        return [
            Problem(
                field,
                f"{pool.gpu_limit} is below the {smallest} GPUs of the smallest pool instance type: "
                "Karpenter could never launch a node, and every pod would wait forever",
                f"set gpu_limit to at least {needed}",
                (setting(field, needed),),
            )
        ]
    problems = []
    for index, model in enumerate(config.models):
        types = model.instance_types or pool.instance_types
        if all(catalog.instance(t).gpu_count > pool.gpu_limit for t in types):
            least = max(needed, min(catalog.instance(t).gpu_count for t in types))
            problems.append(
                Problem(
                    f"models[{index}].instance_types",
                    f"every instance type of {model.name} has more "
                    f"than the pool's {pool.gpu_limit} GPUs: its pods could never be placed",
                    f"raise {field} to at least {least}, or list smaller instance types",
                    (setting(field, least),),
                )
            )
    if steady is None or needed_at is None:
        return problems  # a model outside the pool is refused on its own; its GPUs are not the pool's
    if needed_at.gpus > pool.gpu_limit:
        scaled = [m.name for m in config.models if m.autoscaling]
        need = (
            f"{needed_at.gpus} GPUs of nodes, placed as the scheduler could: {needed_at.describe()}"
            + (f" (autoscaled at max_replicas: {', '.join(scaled)})" if scaled else "")
            + (", with the pod each model's rollout starts first" if pool.surge else "")
            + f"; per node, {needed_at.describe_nodes()}"
        )
        problems.append(
            Problem(
                field,
                f"{pool.gpu_limit} is below what the models need: {need}",
                f"set gpu_limit to at least {needed_at.gpus}"
                # Only an alternative that works on its own: without the spare pods, the replicas must fit.
                + (
                    ", or set surge: false (rollouts then replace one pod at a time)"
                    if pool.surge and steady.gpus <= pool.gpu_limit
                    else ""
                ),
                (
                    setting(field, needed_at.gpus),
                    *(
                        [setting("compute.gpu_pool.surge", False)]
                        if pool.surge and steady.gpus <= pool.gpu_limit
                        else []
                    ),
                ),
            )
        )
    return problems
