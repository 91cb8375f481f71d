"""Each model's workload: names, replicas, placement, tensor parallelism, memory and requests, vLLM settings."""

from __future__ import annotations

import math

from contracts.agent_settings import AGENT_NAMESPACE
from warmstart.catalog import Catalog
from warmstart.checks.fix import Edit, Fix, removing, setting, together
from warmstart.checks.rule import POOL_FACTS, rule
from warmstart.config.base import GIB
from warmstart.config.compute import GpuPool
from warmstart.config.environment import EnvironmentConfig
from warmstart.naming import moving_reference, reference_problem
from warmstart.node_caches import weights_cached
from warmstart.node_model import MIB_PER_GIB, node_shape
from warmstart.problem import Problem
from warmstart.sizing import (
    SizingError,
    candidate_instances,
    derived_tensor_parallel_size,
    smallest_tensor_parallel_size,
    valid_tensor_parallel_sizes,
    weights_fit,
)
from warmstart.vllm_release import DEFAULT_IMAGE
from warmstart.workload import NVME_USABLE, nvme_need_gb, plan_model, streaming_processes

# Each model gets a namespace of its name: never one that Kubernetes, EKS or warmstart itself owns.
RESERVED_NAMESPACES = {
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "amazon-cloudwatch",
    "warmstart-system",
}


MAX_WEIGHTS_FRACTION = 0.95


@rule()
def _model_names(config: EnvironmentConfig) -> list[Problem]:
    names = [model.name for model in config.models]
    seen: set[str] = set()
    problems = []
    for i, model in enumerate(config.models):
        rename = (setting(f"models[{i}].name", _free_name(model.name, names)),)
        if model.name in seen:
            problems.append(
                Problem(f"models[{i}].name", f"{model.name!r} is used twice", "give every model a unique name", rename)
            )
        if _reserved(model.name):
            problems.append(
                Problem(
                    f"models[{i}].name",
                    f"{model.name!r} would make the model's namespace a system "
                    "namespace, which the stack would then own and delete with the model",
                    "choose another name",
                    rename,
                )
            )
        seen.add(model.name)
    return problems


@rule()
def _trusted_node_readers(config: EnvironmentConfig) -> list[Problem]:
    """warmstart's own namespaces keep their own rules: trusting them as node readers would let a model's pod read
    (and, as root, write below) the node's root."""
    own = {AGENT_NAMESPACE, *(m.name for m in config.models)}
    listed = config.cluster.trusted_node_readers
    mine = [name for name in listed if name in own]
    if not mine:
        return []
    field = "cluster.trusted_node_readers"
    return [
        Problem(
            field,
            f"{', '.join(mine)} {'is' if len(mine) == 1 else 'are'} warmstart's own (the agent's or a model's "
            "namespace), whose pods the host-path policy keeps to what warmstart renders",
            f"remove {', '.join(mine)} from it",
            (setting(field, [name for name in listed if name not in own]),),
        )
    ]


def _reserved(name: str) -> bool:
    return name in RESERVED_NAMESPACES or name.startswith("kube-")


def _free_name(name: str, taken: list[str]) -> str:
    """A DNS label like the name that no model has and no system namespace is: model-<name>, then -2, -3..."""
    base = f"model-{name}"[:58].rstrip("-")
    candidates = (base if n == 1 else f"{base}-{n}" for n in range(1, len(taken) + 2))
    return next(c for c in candidates if c not in taken and not _reserved(c))


@rule()
def _single_replicas(config: EnvironmentConfig) -> list[Problem]:
    return [
        Problem(
            f"models[{i}].replicas",
            "one replica goes offline whenever its node is replaced: nodes expire "
            f"({config.compute.gpu_pool.expire_after}, forcefully, without starting a replacement first), "
            "drift to a new AMI, or leave room for no surge during a rollout",
            "use replicas: 2 or more (they run on separate nodes), or accept the downtime with "
            "allow_single_replica_downtime: true",
            (setting(f"models[{i}].replicas", 2), setting(f"models[{i}].allow_single_replica_downtime", True)),
        )
        for i, model in enumerate(config.models)
        if model.replicas == 1 and not model.autoscaling and not model.allow_single_replica_downtime
    ]


@rule(needs=POOL_FACTS)
def _models(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    problems = []
    for index, _ in enumerate(config.models):
        problems += _model(config, catalog, index)
    return problems


def _model(config: EnvironmentConfig, catalog: Catalog, index: int) -> list[Problem]:
    model = config.models[index]
    at = f"models[{index}]"
    problems = []
    if model.bucket != config.buckets.models.name:
        problems.append(
            Problem(
                f"{at}.s3_uri",
                f"bucket {model.bucket!r} is not the model bucket {config.buckets.models.name!r}; "
                "the pods' read-only role covers the model bucket only",
                f"use s3://{config.buckets.models.name}/<path>/",
                (setting(f"{at}.s3_uri", f"s3://{config.buckets.models.name}/{model.prefix}"),),
            )
        )
    problems += image_pinned(model.image, f"{at}.image", DEFAULT_IMAGE)
    pool = config.compute.gpu_pool.instance_types
    if model.instance_types is not None:
        outside = [t for t in model.instance_types if t not in pool]
        if outside:
            return problems + [
                Problem(
                    f"{at}.instance_types",
                    f"{outside} are not in the GPU pool {pool}",
                    "list only instance types of compute.gpu_pool.instance_types, or remove instance_types",
                    _inside_pool(model.instance_types, pool, at),
                )
            ]
    instances = candidate_instances(model, config, catalog)
    if weights_cached(model, config):
        for instance in instances:
            need = nvme_need_gb(config, [model])
            if need > instance.nvme_gb * NVME_USABLE:
                problems.append(
                    Problem(
                        f"{at}.size_gb",
                        f"{model.size_gb:g} GB does not fit the {instance.nvme_gb} GB NVMe of {instance.instance_type} "
                        f"with the weights cache on: it needs {need:g} GB (two copies while an update replaces the "
                        f"old one, the image, the compile cache) of {instance.nvme_gb * NVME_USABLE:g} GB usable",
                        "turn the weights cache off for this model (weights_cache: false), or restrict the model "
                        "(instance_types) to instances with more NVMe",
                        (setting(f"{at}.weights_cache", False),),
                    )
                )
    tensor_parallel_problems = _tensor_parallel_size(model, instances, at, catalog, config.compute.gpu_pool)
    if tensor_parallel_problems:
        return problems + tensor_parallel_problems
    return (
        problems
        + _enforce_eager(config, model, derived_tensor_parallel_size(model, config, catalog), at)
        + _pod_memory(config, catalog, model, at)
        + _requests_fit(config, model, instances, at)
    )


def _inside_pool(types: list[str], pool: list[str], at: str) -> tuple[Fix, ...]:
    inside = [t for t in types if t in pool]
    return ((setting(f"{at}.instance_types", inside),) if inside else ()) + (removing(f"{at}.instance_types"),)


def _enforce_eager(config: EnvironmentConfig, model, tensor_parallel_size: int, at: str) -> list[Problem]:
    if not model.enforce_eager:
        return []
    problems = []
    if tensor_parallel_size > 1:
        problems.append(
            Problem(
                f"{at}.enforce_eager",
                "enforce_eager forces vLLM's V0 path, which cannot stream weights distributed across "
                "tensor-parallel ranks (an error, or a silent fallback to rank 0 loading everything)",
                "remove enforce_eager, or set tensor_parallel_size: 1 if the model fits one GPU",
                (removing(f"{at}.enforce_eager"),),
            )
        )
    if config.caches.compile:
        problems.append(
            Problem(
                f"{at}.enforce_eager",
                "with enforce_eager vLLM never writes the torch.compile cache, so the compile cache would "
                "have no effect",
                "remove enforce_eager, or set caches.compile: false",
                (removing(f"{at}.enforce_eager"), setting("caches.compile", False)),
            )
        )
    return problems


def _pod_memory(config: EnvironmentConfig, catalog: Catalog, model, at: str) -> list[Problem]:
    plan = plan_model(model, config, catalog)
    needed = plan.streamer_buffer_bytes + config.streamer.process_headroom_gib * GIB
    if needed <= plan.memory_gib * GIB:
        return []
    processes = streaming_processes(plan.tensor_parallel_size)
    cap = f"{plan.memory_limit_bytes / GIB:.1f} GiB"
    if plan.streamer_limit_per_node:  # the node's total, shared by its ranks (at least one chunk each)
        cap = f"max({cap} / {processes}, {plan.chunk_bytes / GIB:g} GiB)"
    buffers = f"{processes} x min({plan.concurrency} x {plan.chunk_bytes / GIB:g} GiB, {cap})"
    return [
        Problem(
            f"{at}.memory_gib",
            f"the streamer's buffers ({buffers} = {plan.streamer_buffer_bytes / GIB:.1f} GiB) plus "
            f"{config.streamer.process_headroom_gib} GiB for vLLM need {needed / GIB:.1f} GiB, more than the "
            f"pod's {plan.memory_gib} GiB request",
            *_memory_fix(config, catalog, model, math.ceil(needed / GIB), at),
        )
    ]


def _memory_fix(config: EnvironmentConfig, catalog: Catalog, model, needed_gib: int, at: str) -> tuple:
    """Raise the request only where every candidate instance can allocate it; else name the pool's types that
    can (a request above what a node of the type offers is refused in turn). Lowering the streamer's buffers:
    a memory limit that fits the request beside the headroom."""
    plan = plan_model(model, config, catalog)
    room = plan.memory_gib * GIB - config.streamer.process_headroom_gib * GIB
    processes = streaming_processes(plan.tensor_parallel_size)
    limit = room // processes
    if plan.streamer_limit_per_node:  # a node total: each rank's share is limit // ranks, but never below a chunk
        limit = limit * processes if limit >= plan.chunk_bytes else 0
    lower = f"lower streamer.memory_limit_bytes to at most {limit}"
    lowered = (setting("streamer.memory_limit_bytes", limit),) if limit >= 1 else ()
    if not lowered:
        lower = "raise memory_gib"
    instances = candidate_instances(model, config, catalog)
    raise_to = Edit(f"{at}.memory_gib", needed_gib)
    if all(needed_gib <= node_shape(i, config).for_models.whole_gib for i in instances):
        return f"raise memory_gib to at least {needed_gib}, or {lower}", (together(raise_to), *lowered)
    roomy = [
        t
        for t in config.compute.gpu_pool.instance_types
        if needed_gib <= node_shape(catalog.instance(t), config).for_models.whole_gib
    ]
    if roomy:
        return (
            f"raise memory_gib to {needed_gib} with instance_types: {roomy} (they allocate it), or {lower}",
            (together(raise_to, Edit(f"{at}.instance_types", roomy)), *lowered),
        )
    return lower, lowered


def _requests_fit(config: EnvironmentConfig, model, instances, at: str) -> list[Problem]:
    """A pod's requests must fit what a node offers the models' pods (warmstart/node_model.py): the scheduler
    places it on no node, and Karpenter launches none for it, when they do not."""
    problems = []
    shapes = [node_shape(i, config) for i in instances]
    # What every candidate offers: the fix requests at most that, in whole CPUs and GiB.
    cpus = min(s.for_models.whole_cpus for s in shapes)
    memory = min(s.for_models.whole_gib for s in shapes)
    for shape in shapes:
        offered = shape.for_models
        if model.cpu is not None and round(model.cpu * 1000) > offered.cpu_millis:
            problems.append(
                Problem(
                    f"{at}.cpu",
                    f"{model.cpu:g} CPUs cannot be placed on {shape.instance.instance_type} "
                    f"({shape.instance.vcpus} vCPUs): a node offers {shape.offers()}",
                    f"request at most {cpus} or leave cpu unset",
                    (setting(f"{at}.cpu", cpus), removing(f"{at}.cpu")),
                )
            )
        if model.memory_gib is not None and model.memory_gib * MIB_PER_GIB > offered.memory_mib:
            problems.append(
                Problem(
                    f"{at}.memory_gib",
                    f"{model.memory_gib} GiB cannot be placed on {shape.instance.instance_type} "
                    f"({shape.instance.memory_gib} GiB): a node offers {shape.offers()}",
                    f"request at most {memory} or leave memory_gib unset",
                    (setting(f"{at}.memory_gib", memory), removing(f"{at}.memory_gib")),
                )
            )
    return problems


def image_pinned(image: str, field: str, example: str) -> list[Problem]:
    """A fixed, well-formed image reference; the fix offers `example` (a pinned image of the same kind)."""
    instead = (setting(field, example),)
    malformed = reference_problem(image)
    if malformed:
        return [
            Problem(
                field,
                f"{image!r} {malformed}",
                f"write registry/repository:tag or registry/repository@sha256:<64 hex>, e.g. {example}",
                instead,
            )
        ]
    why = moving_reference(image)
    if why is None:
        return []
    return [
        Problem(
            field,
            f"{image!r} {why}: nodes would pull different images over time, and the prepull DaemonSet "
            "and the compile-cache key would not match what runs",
            f"pin a release tag ({example}) or a digest (...@sha256:<64 hex>)",
            instead,
        )
    ]


def _tensor_parallel_size(model, instances, at: str, catalog: Catalog, pool: GpuPool) -> list[Problem]:
    field = f"{at}.tensor_parallel_size"
    if model.tensor_parallel_size == "auto":
        try:
            smallest_tensor_parallel_size(model.size_gb, instances, model.weights_memory_fraction)
        except SizingError as error:
            fix, fixes = _fit_fix(model, instances, catalog, at, pool)
            message = str(error) + (
                ""
                if fix
                else "; no instance type of the catalog holds these weights on one "
                "node (serving across nodes is out of scope)"
            )
            return [Problem(field, message, fix, fixes)]
        return []
    size = model.tensor_parallel_size
    problems = []
    # Sizes that divide every candidate's GPUs and hold the weights on each: what the fix may offer.
    fitting = [
        s
        for s in sorted(set.intersection(*(set(valid_tensor_parallel_sizes(i)) for i in instances)))
        if all(weights_fit(model.size_gb, s, i, model.weights_memory_fraction) for i in instances)
    ]
    other_size = (
        f"use {' or '.join(map(str, fitting))}, or 'auto'" if fitting else "use 'auto'",
        tuple(setting(field, s) for s in [*fitting[:1], "auto"]),
    )
    for instance in instances:
        valid = valid_tensor_parallel_sizes(instance)
        if size > instance.gpu_count:
            what = f"{size} is larger than the {instance.gpu_count} GPUs of {instance.instance_type}"
            problems.append(Problem(field, what, *other_size))
        elif size not in valid:
            what = f"{size} does not divide the {instance.gpu_count} GPUs of {instance.instance_type}"
            problems.append(Problem(field, what, *other_size))
        elif not weights_fit(model.size_gb, size, instance, model.weights_memory_fraction):
            problems.append(
                Problem(
                    field,
                    f"{model.size_gb:g} GB of weights on {size} x {instance.gpu_memory_gb} GB "
                    f"({instance.instance_type}) leaves less than {1 - model.weights_memory_fraction:.0%} "
                    "of GPU memory for the KV cache",
                    *_fit_fix(model, [instance], catalog, at, pool, size),
                )
            )
    return problems


def _fit_fix(
    model, instances, catalog: Catalog, at: str, pool: GpuPool, size: int | None = None
) -> tuple[str, tuple[Fix, ...]]:
    """A fix that makes the weights fit, or none: a larger tensor parallel size, a higher weights fraction (only
    where 0.95 is enough), or instance types that hold the weights (named from the catalog)."""
    fraction = model.weights_memory_fraction
    if size is not None:
        larger = [
            s
            for s in valid_tensor_parallel_sizes(instances[0])
            if s > size and weights_fit(model.size_gb, s, instances[0], fraction)
        ]
        if larger:
            return (
                f"raise tensor_parallel_size to {larger[0]} (or use 'auto')",
                (setting(f"{at}.tensor_parallel_size", larger[0]), setting(f"{at}.tensor_parallel_size", "auto")),
            )
    sizes = (
        [size]
        if size is not None
        else sorted(set.intersection(*(set(valid_tensor_parallel_sizes(i)) for i in instances)))
    )
    needed = min((max(model.size_gb / (s * i.gpu_memory_gb) for i in instances) for s in sizes), default=1.0)
    if needed <= MAX_WEIGHTS_FRACTION:
        least = math.ceil(needed * 100) / 100
        return (
            f"raise weights_memory_fraction to at least {least:g} (it leaves "
            f"{1 - needed:.0%} of GPU memory for the KV cache), or use instance types with more GPU memory",
            (setting(f"{at}.weights_memory_fraction", least),),
        )
    every = (catalog.instance(name) for name in catalog.instances)
    holders = sorted(
        (i for i in every if i.total_gpu_memory_gb * fraction >= model.size_gb),
        key=lambda i: (i.total_gpu_memory_gb, i.instance_type),
    )
    if not holders:
        return "", ()  # no single node in the catalog holds these weights: multi-node serving is out of scope
    holder = holders[0]
    # The holder joins the pool, and this model keeps to it (the others stay where they are); its larger nodes
    # may need a larger GPU limit, which the budget's own refusal then sizes.
    edits = [
        Edit("compute.gpu_pool.instance_types", list(dict.fromkeys([*pool.instance_types, holder.instance_type]))),
        Edit(f"{at}.instance_types", [holder.instance_type]),
    ]
    larger = holder.gpu_count * (model.most_replicas + 1) > pool.gpu_limit
    return (
        f"use instance types whose GPUs hold {model.size_gb:g} GB at weights_memory_fraction {fraction:g}, "
        f"e.g. {', '.join(i.instance_type for i in holders[:3])}"
        + (f" (then also raise gpu_limit for {model.most_replicas} of them and a rollout's)" if larger else ""),
        (together(*edits, then_also=("compute.gpu_pool.gpu_limit",) if larger else ()),),
    )
