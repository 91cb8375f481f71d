"""Image preload: the mode against the node OS and its release, the pause image, fast image pull."""

from __future__ import annotations

import math

from warmstart.catalog import Catalog
from warmstart.checks.fix import Edit, Fix, removing, setting, together
from warmstart.checks.pool_rules import without_types
from warmstart.checks.rule import POOL_FACTS, rule
from warmstart.checks.workload_rules import image_pinned
from warmstart.config.base import GIB
from warmstart.config.caches import PAUSE_IMAGE
from warmstart.config.compute import KarpenterCompute
from warmstart.config.environment import EnvironmentConfig
from warmstart.image_preload import (
    DATA_VOLUME_RESERVE_GB,
    KUBELET_IMAGE_GC_LOW_PERCENT,
    data_volume_gb,
    data_volume_need_gb,
    is_private_ecr,
)
from warmstart.node_caches import serving_images
from warmstart.node_os import alias_for_kubernetes, snapshot_aliases
from warmstart.problem import Problem


def _problem(config: EnvironmentConfig, refusal: Problem) -> Problem:
    """A node OS's refusal, the aliases its fixes set raised to a release that ships the cluster's Kubernetes."""
    fixes = tuple(raise_aliases(config, fix) for fix in refusal.fixes)
    fix = refusal.fix
    for before, after in zip(refusal.fixes, fixes, strict=True):
        for old, new in zip(before.edits, after.edits, strict=True):
            if old.path == "compute.ami_alias" and old.value != new.value:
                fix = fix.replace(str(old.value), str(new.value))
    return Problem(refusal.field, refusal.message, fix, fixes, site=refusal.site)


def raise_aliases(config: EnvironmentConfig, fix: Fix) -> Fix:
    """The fix with any alias it sets raised to the cluster's Kubernetes floor."""
    edits = tuple(
        Edit(edit.path, alias_for_kubernetes(str(edit.value), config.cluster.kubernetes_version))
        if edit.path == "compute.ami_alias"
        else edit
        for edit in fix.edits
    )
    return Fix(edits, fix.then_also)


@rule()
def _image_preload(config: EnvironmentConfig) -> list[Problem]:
    preload, compute = config.image_preload, config.compute
    problems = []
    node_os = compute.node_os
    if preload.parallel_pull:
        refusal = node_os.parallel_pull_refusal(preload)
        if refusal:
            problems.append(_problem(config, refusal))
    if not preload.strategy.boots_with_images:
        return problems
    obstacle = node_os.snapshot_obstacle()
    if obstacle is not None:
        return problems + [_snapshot_obstacle(config, obstacle)]
    if preload.parallel_pull:
        # Prepulling instead keeps parallel pull only where the OS takes it outside a snapshot.
        prepull = node_os.parallel_pull_refusal(preload.model_copy(update={"mode": "prepull"})) is None
        problems.append(
            Problem(
                "image_preload.parallel_pull",
                "the snapshot already holds the images; pulls are only the fallback",
                "remove parallel_pull" + (", or use image_preload.mode: prepull" if prepull else ""),
                (
                    removing("image_preload.parallel_pull"),
                    *([setting("image_preload.mode", "prepull")] if prepull else []),
                ),
            )
        )
    for index, model in enumerate(config.models):
        if is_private_ecr(model.image):
            problems.append(
                Problem(
                    f"models[{index}].image",
                    f"{model.image!r} is in a private ECR registry: the "
                    "snapshot builder would need a registry token in its SSM command (kept in "
                    "the command history)",
                    "serve the image from a registry that allows anonymous pulls (e.g. "
                    "public.ecr.aws), or use image_preload.mode: prepull",
                    (setting("image_preload.mode", "prepull"),),
                )
            )
    need, have = data_volume_need_gb(config), data_volume_gb(config)
    if have < need:
        problems.append(
            Problem(
                "image_preload.snapshot.data_volume_gib",
                f"{len(serving_images(config))} serving image(s) of {config.caches.image_size_gb:g} GB "
                f"(caches.image_size_gb) and {DATA_VOLUME_RESERVE_GB} GB for the rest of the volume "
                f"need {need:g} GB of data volume so that they stay below the kubelet's image GC threshold "
                f"({KUBELET_IMAGE_GC_LOW_PERCENT}%), which would otherwise delete them before any pod runs them; "
                f"{have:g} GB given",
                f"set data_volume_gib to at least {math.ceil(need * 10**9 / GIB)}",
                (setting("image_preload.snapshot.data_volume_gib", math.ceil(need * 10**9 / GIB)),),
            )
        )
    return problems


def _snapshot_obstacle(config: EnvironmentConfig, obstacle) -> Problem:
    preload = config.image_preload
    karpenter = isinstance(config.compute, KarpenterCompute)
    kubernetes = config.cluster.kubernetes_version
    aliases = [alias_for_kubernetes(a, kubernetes) for a in snapshot_aliases()]
    pinned = " or ".join(f"ami_alias {alias} or later" for alias in aliases)
    # With a snapshot, parallel_pull is refused: an alternative that keeps it would be refused next.
    also = " and without parallel_pull (the snapshot holds the images)" if preload.parallel_pull else ""
    if not aliases:
        instead = "(no OS of a snapshot has an image for this Kubernetes version)"
    else:
        instead = f"or {pinned}{also}" if karpenter else f"(a snapshot needs compute.mode: karpenter with {pinned})"
    repinned = [
        together(
            Edit("compute.ami_alias", alias), *([Edit("image_preload.parallel_pull")] if preload.parallel_pull else [])
        )
        for alias in aliases
        if karpenter
    ]
    return Problem(
        "image_preload.mode",
        f"nodes cannot start from an image snapshot {obstacle.where}: {obstacle.why}",
        f"use image_preload.mode: prepull, {instead}",
        (setting("image_preload.mode", "prepull"), *repinned),
    )


@rule()
def _ami_has_an_image(config: EnvironmentConfig) -> list[Problem]:
    compute = config.compute
    if not isinstance(compute, KarpenterCompute):
        return []
    refusal = compute.node_os.image_refusal(config.cluster.kubernetes_version, config.image_preload)
    return [_problem(config, refusal)] if refusal else []


@rule()
def _pause_image(config: EnvironmentConfig) -> list[Problem]:
    return image_pinned(config.caches.pause_image, "caches.pause_image", PAUSE_IMAGE)


@rule(needs=POOL_FACTS)
def _fast_image_pull_nodes(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    minimum = config.compute.node_os.parallel_pull_min_node
    if not config.image_preload.parallel_pull or minimum is None:
        return []
    vcpus, memory_gib = minimum
    small = [
        name
        for name in config.compute.gpu_pool.instance_types
        if catalog.instance(name).vcpus < vcpus or catalog.instance(name).memory_gib < memory_gib
    ]
    if not small:
        return []
    fewer = without_types(config, set(small))
    return [
        Problem(
            "image_preload.parallel_pull",
            f"{', '.join(small)}: nodeadm silently skips FastImagePull below {vcpus} vCPUs or {memory_gib} GiB of "
            "memory",
            ("remove those instance types from the pool, or " if fewer else "") + "remove parallel_pull",
            (*fewer, removing("image_preload.parallel_pull")),
        )
    ]
