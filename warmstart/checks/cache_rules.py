"""The caches: the model bucket's keys, the compile cache's node folder, the pruner and its active set."""

from __future__ import annotations

import re

from contracts.active_set_format import ADVANCED_LIMIT, MAX_ACTIVE_SET_PARTS
from warmstart.active_set import active_keys, active_set_documents
from warmstart.catalog import Catalog
from warmstart.checks.fix import Edit, removing, setting, together
from warmstart.checks.rule import VALID_CONFIG, rule
from warmstart.config.environment import EnvironmentConfig
from warmstart.problem import Problem
from warmstart.sizing import (
    nvme_mount,
)
from warmstart.workload import (
    is_under,
)


@rule()
def _model_bucket_key(config: EnvironmentConfig) -> list[Problem]:
    bucket = config.buckets.models
    if bucket.create and bucket.kms_key_arn:
        return [
            Problem(
                "buckets.models.kms_key_arn",
                "a bucket warmstart creates is encrypted with SSE-S3, so a KMS key here would never be used",
                "remove kms_key_arn, or set create: false for an existing KMS-encrypted bucket",
                (removing("buckets.models.kms_key_arn"), setting("buckets.models.create", False)),
            )
        ]
    return []


@rule()
def _compile_host_path(config: EnvironmentConfig) -> list[Problem]:
    path = config.caches.compile_host_path
    mount = nvme_mount(config.compute)
    if path is None or is_under(path, mount):
        return []
    return [
        Problem(
            "caches.compile_host_path",
            f"{path!r} is not under {mount}, the NVMe mount of compute mode {config.compute.mode!r}; "
            "hostPath DirectoryOrCreate would silently create it on the EBS root volume",
            f"use a folder under {mount}/ (e.g. {mount}/compile-cache), or remove the override",
            (setting("caches.compile_host_path", f"{mount}/compile-cache"), removing("caches.compile_host_path")),
        )
    ]


@rule()
def _pruning(config: EnvironmentConfig) -> list[Problem]:
    return [
        Problem(
            f"pruning.extra_active_set_parameters[{i}]",
            f"{name!r} is not an active-set parameter name",
            "use /warmstart/<environment>/compile-cache/active-keys of the environment sharing the bucket, or "
            "remove it",
            (removing(f"pruning.extra_active_set_parameters[{i}]"),),
        )
        for i, name in enumerate(config.pruning.extra_active_set_parameters)
        if not re.fullmatch(r"/warmstart/[a-z0-9-]+/compile-cache/active-keys", name)
    ]


def _fewer_instance_types(config: EnvironmentConfig, catalog: Catalog) -> tuple:
    """Each model kept to one instance type of its candidates (the first), which bounds the active set's keys."""
    edits = []
    for index, model in enumerate(config.models):
        types = model.instance_types or config.compute.gpu_pool.instance_types
        if len(types) > 1:
            edits.append(Edit(f"models[{index}].instance_types", types[:1]))
    return (together(*edits),) if edits else ()


@rule(needs=VALID_CONFIG)
def _active_set_size(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    parts = len(active_set_documents(config, catalog))
    if parts <= MAX_ACTIVE_SET_PARTS:
        return []
    # One instance type per model leaves about one key per model: offered where that many keys fit.
    keys = len(active_keys(config, catalog))
    fewer = (
        _fewer_instance_types(config, catalog)
        if len(config.models) * parts <= keys * (MAX_ACTIVE_SET_PARTS - 1)
        else ()
    )
    # The keys grow with the models: as many models as the parts hold, less a part for the packing's slack.
    kept = max(1, len(config.models) * (MAX_ACTIVE_SET_PARTS - 1) // parts)
    return [
        Problem(
            "models",
            f"the compile-cache active set needs {parts} SSM parameters of {ADVANCED_LIMIT} bytes, over the "
            f"{MAX_ACTIVE_SET_PARTS} the pruner reads",
            ("restrict models to fewer instance types with different GPUs (instance_types), or " if fewer else "")
            + f"split the environment (this file keeping its first {kept} models)",
            (*fewer, together(*(Edit(f"models[{i}]") for i in range(kept, len(config.models))))),
        )
    ]
