"""Rules that span several fields or need the GPU catalog.

Each rule returns Problems (field path, what is wrong, how to fix it); `load_config` refuses a file
with any. They exist because every one of these mistakes would otherwise deploy and silently lose a
speed-up (or fail only on the GPU node, minutes into a scale-up).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from warmstart.active_set import ADVANCED_LIMIT, active_set_documents
from warmstart.cache_key import MAX_ACTIVE_SET_PARTS, RESERVED_VLLM_ENV
from warmstart.catalog import Catalog
from warmstart.config import GIB, AutoModeCompute, EnvironmentConfig, KarpenterCompute
from warmstart.image_preload import (
    AL2023_FAST_IMAGE_PULL_SINCE,
    BOTTLEROCKET_BOOTSTRAP_COMMANDS_SINCE,
    DATA_VOLUME_RESERVE_GB,
    FAST_IMAGE_PULL_MIN_MEMORY_GIB,
    FAST_IMAGE_PULL_MIN_VCPUS,
    KUBELET_IMAGE_GC_LOW_PERCENT,
    data_volume_gb,
    data_volume_need_gb,
    is_private_ecr,
    snapshot_obstacle,
)
from warmstart.naming import bucket_name_problems, moving_reference, reference_problem
from warmstart.sizing import (
    SizingError,
    ami_family,
    ami_version,
    candidate_instances,
    ephemeral_storage_below_nvme,
    nvme_mount,
    smallest_tensor_parallel,
    tensor_parallel_size,
    valid_tensor_parallel_sizes,
    weights_fit,
)
from warmstart.workload import (
    NVME_USABLE,
    is_under,
    node_gpus,
    nvme_need_gb,
    plan_model,
    serving_images,
    steady_pool_gpus,
    streaming_processes,
    weights_cached,
)

# Share of an instance's CPU and memory that kubelet leaves allocatable to pods (approximate upper bound).
NODE_ALLOCATABLE = 0.9


@dataclass(frozen=True)
class Problem:
    field: str
    message: str
    fix: str

    def __str__(self) -> str:
        # A problem with no fix that would work says so by having none.
        return f"{self.field}: {self.message}" + (f"\n    fix: {self.fix}" if self.fix else "")


def check_environment(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    problems = [
        *_availability_zones(config),
        *_endpoint_access(config),
        *_pool_instance_types(config, catalog),
        *_system_node_group(config),
        *_model_names(config),
        *_model_bucket_key(config),
        *_compile_host_path(config),
        *_pruning(config),
        *_environment_name(config),
        *_capacity_reservations(config),
        *_node_lifetime(config),
        *_single_replicas(config),
        *_alerts(config),
        *_image_preload(config),
        *_bucket_names(config),
        *_pause_image(config),
    ]
    if any(p.field.startswith("compute.gpu_pool.instance_types") for p in problems):
        return problems  # every rule below needs catalog facts for the pool
    problems += _ephemeral_storage(config, catalog)
    problems += _nvme_budget(config, catalog)
    problems += _fast_image_pull_nodes(config, catalog)
    problems += _gpu_budget(config, catalog)
    problems += _agent_policies(config)
    problems += _agent_image(config)
    problems += _autoscaling(config)
    for index, _ in enumerate(config.models):
        problems += _model(config, catalog, index)
    if not problems:  # it derives every model's keys, which needs every model valid
        problems += _active_set_size(config, catalog)
    return problems


# IAM role names are at most 64 characters; the pruner's role is named after the environment so the compile
# bucket's policy can name it (warmstart-<env>-compile-cache-pruner).
MAX_ENVIRONMENT_NAME = 36
# Auto Mode refuses a NodePool whose expireAfter plus terminationGracePeriod exceeds 21 days (the
# message Auto Mode returns: "the sum of expireAfter and terminationGracePeriod ... may not exceed 21 days").
AUTO_MODE_MAX_LIFETIME_HOURS = 21 * 24


def duration_hours(text: str) -> float:
    """'336h', '1h30m', '90s' -> hours."""
    units = {"h": 1.0, "m": 1 / 60, "s": 1 / 3600}
    return sum(float(number) * units[unit] for number, unit in re.findall(r"([0-9]+)([hms])", text))


def _environment_name(config: EnvironmentConfig) -> list[Problem]:
    if len(config.name) > MAX_ENVIRONMENT_NAME:
        return [
            Problem(
                "name",
                f"{len(config.name)} characters: roles named after the environment would exceed IAM's 64",
                f"use at most {MAX_ENVIRONMENT_NAME} characters",
            )
        ]
    return []


def _capacity_reservations(config: EnvironmentConfig) -> list[Problem]:
    pool = config.compute.gpu_pool
    reserved = "reserved" in pool.capacity_types
    if isinstance(config.compute, AutoModeCompute):
        if reserved or pool.capacity_reservations:
            return [
                Problem(
                    "compute.gpu_pool.capacity_types",
                    "capacity reservations are wired for the Karpenter mode only (its EC2NodeClass selects them)",
                    "remove 'reserved' and capacity_reservations, or use compute.mode: karpenter",
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
            )
        ]
    if pool.capacity_reservations and not reserved:
        return [
            Problem(
                "compute.gpu_pool.capacity_reservations",
                "reservations are selected but 'reserved' is not "
                "an allowed capacity type, so the pool never launches into them",
                "add 'reserved' to compute.gpu_pool.capacity_types, or remove capacity_reservations",
            )
        ]
    return []


def _node_lifetime(config: EnvironmentConfig) -> list[Problem]:
    pool = config.compute.gpu_pool
    if not isinstance(config.compute, AutoModeCompute):
        return []
    if pool.expire_after == "Never":
        return [
            Problem(
                "compute.gpu_pool.expire_after",
                "Auto Mode nodes live at most 21 days; 'Never' is refused",
                "use at most 480h (with the default 24h termination_grace_period), e.g. 336h",
            )
        ]
    total = duration_hours(pool.expire_after) + duration_hours(pool.termination_grace_period)
    if total > AUTO_MODE_MAX_LIFETIME_HOURS:
        most = AUTO_MODE_MAX_LIFETIME_HOURS - duration_hours(pool.termination_grace_period)
        return [
            Problem(
                "compute.gpu_pool.expire_after",
                f"{pool.expire_after} plus termination_grace_period {pool.termination_grace_period} is "
                f"{total:g}h; Auto Mode refuses node lifetimes above 21 days ({AUTO_MODE_MAX_LIFETIME_HOURS}h)",
                f"use at most {most:g}h, e.g. 336h (Auto Mode's default)",
            )
        ]
    return []


def _single_replicas(config: EnvironmentConfig) -> list[Problem]:
    return [
        Problem(
            f"models[{i}].replicas",
            "one replica goes offline whenever its node is replaced: nodes expire "
            f"({config.compute.gpu_pool.expire_after}, forcefully, without starting a replacement first), "
            "drift to a new AMI, or leave room for no surge during a rollout",
            "use replicas: 2 or more (they run on separate nodes), or accept the downtime with "
            "allow_single_replica_downtime: true",
        )
        for i, model in enumerate(config.models)
        if model.replicas == 1 and not model.autoscaling and not model.allow_single_replica_downtime
    ]


def _autoscaling(config: EnvironmentConfig) -> list[Problem]:
    problems = []
    for i, model in enumerate(config.models):
        scaling = model.autoscaling
        if scaling is None:
            continue
        field = f"models[{i}].autoscaling"
        if scaling.min_replicas > scaling.max_replicas:
            problems.append(
                Problem(
                    f"{field}.min_replicas",
                    f"{scaling.min_replicas} is above max_replicas ({scaling.max_replicas})",
                    "make min_replicas at most max_replicas",
                )
            )
        if scaling.min_replicas == 1 and not model.allow_single_replica_downtime:
            problems.append(
                Problem(
                    f"{field}.min_replicas",
                    "scaled in to one replica, the model goes offline whenever that node is replaced (expiry, "
                    "AMI drift, a rollout without room to surge)",
                    "use min_replicas: 2 or more, or accept the downtime with allow_single_replica_downtime: true",
                )
            )
        if "replicas" in model.model_fields_set:
            problems.append(
                Problem(
                    f"models[{i}].replicas",
                    f"the autoscaler sets the replica count (from {scaling.min_replicas} to {scaling.max_replicas}); "
                    "a fixed count would be applied again on every deploy and fight it",
                    "remove replicas (min_replicas is the floor)",
                )
            )
        if scaling.metric == "kv_cache_usage" and scaling.target_value is not None and scaling.target_value >= 1:
            problems.append(
                Problem(
                    f"{field}.target_value",
                    f"{scaling.target_value:g} is not a share of the KV cache (vLLM reports 0 to 1): pods would "
                    "never be added",
                    "use a share below 1, e.g. 0.8",
                )
            )
    return problems


def _alerts(config: EnvironmentConfig) -> list[Problem]:
    if config.alerts.topic_arn and config.alerts.emails:
        return [
            Problem(
                "alerts.emails",
                "emails are for the topic warmstart creates; an existing topic is given too",
                "subscribe the emails to your topic, or remove alerts.topic_arn",
            )
        ]
    topic_region = config.alerts.topic_arn.split(":")[3] if config.alerts.topic_arn else config.region
    if topic_region != config.region:
        # CloudWatch user guide, "Using Amazon CloudWatch alarms": an alarm notifies topics of its own Region.
        return [
            Problem(
                "alerts.topic_arn",
                f"the topic is in {topic_region}, the alarms in "
                f"{config.region}: an alarm only notifies a topic of its own Region",
                f"give a topic in {config.region}, or leave topic_arn out (warmstart creates one)",
            )
        ]
    return []


def _pause_image(config: EnvironmentConfig) -> list[Problem]:
    return _image_pinned(config.caches.pause_image, "caches.pause_image")


def _version(parts: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in parts)


def _image_preload(config: EnvironmentConfig) -> list[Problem]:
    preload, compute = config.image_preload, config.compute
    problems = []
    if preload.parallel_pull:
        if isinstance(compute, AutoModeCompute):
            problems.append(
                Problem(
                    "image_preload.parallel_pull",
                    "Auto Mode has no setting for the container "
                    "runtime's snapshotter (its NodeClass takes no user data)",
                    "remove parallel_pull, or use compute.mode: karpenter with an AL2023 ami_alias",
                )
            )
        elif ami_family(compute) == "bottlerocket" and preload.mode != "snapshot":  # refused below for snapshot
            problems.append(
                Problem(
                    "image_preload.parallel_pull",
                    "not wired for Bottlerocket: its SOCI store would have to move onto "
                    "the NVMe array with the rest of containerd's data, which this project has not verified",
                    "remove parallel_pull (image_preload.mode: snapshot puts the images on disk before boot instead), "
                    "or use an AL2023 ami_alias",
                )
            )
        elif ami_family(compute) == "al2023" and ami_version(compute) < AL2023_FAST_IMAGE_PULL_SINCE:
            problems.append(
                Problem(
                    "image_preload.parallel_pull",
                    f"{compute.ami_alias} predates v{_version(AL2023_FAST_IMAGE_PULL_SINCE)}"
                    ", from which the AL2023 AMI keeps SOCI's store on the NVMe array (earlier releases lack "
                    "FastImagePull or unpack every image onto the root EBS volume)",
                    f"pin compute.ami_alias to al2023@v{_version(AL2023_FAST_IMAGE_PULL_SINCE)} or later, or remove "
                    "parallel_pull",
                )
            )
    if preload.mode != "snapshot":
        return problems
    obstacle = snapshot_obstacle(compute)
    if obstacle is not None:
        where, why = obstacle
        return problems + [
            Problem(
                "image_preload.mode",
                f"nodes cannot start from an image snapshot {where}: {why}",
                "use image_preload.mode: prepull, or compute.mode: karpenter with a Bottlerocket ami_alias "
                f"(bottlerocket@v{_version(BOTTLEROCKET_BOOTSTRAP_COMMANDS_SINCE)} or later)",
            )
        ]
    assert isinstance(compute, KarpenterCompute)
    if ami_version(compute) < BOTTLEROCKET_BOOTSTRAP_COMMANDS_SINCE:
        problems.append(
            Problem(
                "compute.ami_alias",
                f"{compute.ami_alias} predates Bottlerocket's bootstrap "
                f"commands (v{_version(BOTTLEROCKET_BOOTSTRAP_COMMANDS_SINCE)}), which set up the "
                "NVMe array without moving the image store",
                f"pin bottlerocket@v{_version(BOTTLEROCKET_BOOTSTRAP_COMMANDS_SINCE)} or later",
            )
        )
    if preload.parallel_pull:
        problems.append(
            Problem(
                "image_preload.parallel_pull",
                "the snapshot already holds the images; pulls are only the fallback",
                "remove parallel_pull, or use image_preload.mode: prepull",
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
            )
        )
    return problems


def _fast_image_pull_nodes(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    if not config.image_preload.parallel_pull:
        return []
    small = [
        name
        for name in config.compute.gpu_pool.instance_types
        if catalog.instance(name).vcpus < FAST_IMAGE_PULL_MIN_VCPUS
        or catalog.instance(name).memory_gib < FAST_IMAGE_PULL_MIN_MEMORY_GIB
    ]
    if not small:
        return []
    return [
        Problem(
            "image_preload.parallel_pull",
            f"{', '.join(small)}: nodeadm silently skips FastImagePull below "
            f"{FAST_IMAGE_PULL_MIN_VCPUS} vCPUs or {FAST_IMAGE_PULL_MIN_MEMORY_GIB} GiB of memory",
            "remove those instance types from the pool, or remove parallel_pull",
        )
    ]


def _availability_zones(config: EnvironmentConfig) -> list[Problem]:
    return [
        Problem(
            f"network.availability_zones[{i}]",
            f"{az!r} is not in region {config.region!r}",
            f"use zones of {config.region}, e.g. {config.region}a and {config.region}b",
        )
        for i, az in enumerate(config.network.availability_zones)
        if not (az.startswith(config.region) and len(az) == len(config.region) + 1 and az[-1].isalpha())
    ]


def _endpoint_access(config: EnvironmentConfig) -> list[Problem]:
    cluster = config.cluster
    if cluster.endpoint_access == "private" and cluster.public_access_cidrs:
        return [
            Problem(
                "cluster.public_access_cidrs",
                "public CIDRs are set but the endpoint is private",
                "remove public_access_cidrs, or set endpoint_access: public_and_private",
            )
        ]
    return []


def _pool_instance_types(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    known = ", ".join(sorted(catalog.instances))
    return [
        Problem(
            f"compute.gpu_pool.instance_types[{i}]",
            f"{name!r} is not in the GPU catalog, so its GPUs and NVMe size are unknown",
            f"use one of: {known} (or add it to warmstart/catalog.yaml with its source)",
        )
        for i, name in enumerate(config.compute.gpu_pool.instance_types)
        if not catalog.knows(name)
    ]


def _system_node_group(config: EnvironmentConfig) -> list[Problem]:
    if isinstance(config.compute, KarpenterCompute):
        group = config.compute.system_node_group
        if group.min_size > group.max_size:
            return [
                Problem(
                    "compute.system_node_group.min_size",
                    f"min_size {group.min_size} is above max_size {group.max_size}",
                    "make min_size <= max_size",
                )
            ]
    return []


def _model_names(config: EnvironmentConfig) -> list[Problem]:
    seen: set[str] = set()
    problems = []
    for i, model in enumerate(config.models):
        if model.name in seen:
            problems.append(
                Problem(f"models[{i}].name", f"{model.name!r} is used twice", "give every model a unique name")
            )
        if model.name in RESERVED_NAMESPACES or model.name.startswith("kube-"):
            problems.append(
                Problem(
                    f"models[{i}].name",
                    f"{model.name!r} would make the model's namespace a system "
                    "namespace, which the stack would then own and delete with the model",
                    "choose another name",
                )
            )
        seen.add(model.name)
    return problems


# Each model gets a namespace of its name: never one that Kubernetes, EKS or warmstart itself owns.
RESERVED_NAMESPACES = {
    "default",
    "kube-system",
    "kube-public",
    "kube-node-lease",
    "amazon-cloudwatch",
    "warmstart-system",
}


def _active_set_size(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    parts = len(active_set_documents(config, catalog))
    if parts <= MAX_ACTIVE_SET_PARTS:
        return []
    return [
        Problem(
            "models",
            f"the compile-cache active set needs {parts} SSM parameters of {ADVANCED_LIMIT} bytes, over the "
            f"{MAX_ACTIVE_SET_PARTS} the pruner reads",
            "restrict models to fewer instance types with different GPUs (instance_types), or split the environment",
        )
    ]


def _pruning(config: EnvironmentConfig) -> list[Problem]:
    return [
        Problem(
            f"pruning.extra_active_set_parameters[{i}]",
            f"{name!r} is not an active-set parameter name",
            "use /warmstart/<environment>/compile-cache/active-keys of the environment sharing the bucket",
        )
        for i, name in enumerate(config.pruning.extra_active_set_parameters)
        if not re.fullmatch(r"/warmstart/[a-z0-9-]+/compile-cache/active-keys", name)
    ]


def _model_bucket_key(config: EnvironmentConfig) -> list[Problem]:
    bucket = config.buckets.models
    if bucket.create and bucket.kms_key_arn:
        return [
            Problem(
                "buckets.models.kms_key_arn",
                "a bucket warmstart creates is encrypted with SSE-S3, so a KMS key here would never be used",
                "remove kms_key_arn, or set create: false for an existing KMS-encrypted bucket",
            )
        ]
    return []


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
    return [
        Problem(
            "compute.ephemeral_storage_gib",
            f"{compute.ephemeral_storage_gib} GiB is not below the NVMe capacity of {names}; Auto Mode would "
            "then put /mnt/.ephemeral on the root EBS volume (no RAID0 instance store, ~30x slower)",
            f"set ephemeral_storage_gib to at most {largest_allowed}, or remove those instance types",
        )
    ]


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
            )
        )
    problems += _image_pinned(model.image, f"{at}.image")
    problems += _vllm_env(model.vllm_env, f"{at}.vllm_env")
    pool = config.compute.gpu_pool.instance_types
    if model.instance_types is not None:
        outside = [t for t in model.instance_types if t not in pool]
        if outside:
            return problems + [
                Problem(
                    f"{at}.instance_types",
                    f"{outside} are not in the GPU pool {pool}",
                    "list only instance types of compute.gpu_pool.instance_types",
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
                    )
                )
    tensor_parallel_problems = _tensor_parallel(model, instances, at, catalog)
    if tensor_parallel_problems:
        return problems + tensor_parallel_problems
    return (
        problems
        + _enforce_eager(config, model, tensor_parallel_size(model, config, catalog), at)
        + _pod_memory(config, catalog, model, at)
        + _requests_fit(model, instances, at)
    )


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
                )
            )
    return problems


def _enforce_eager(config: EnvironmentConfig, model, tensor_parallel: int, at: str) -> list[Problem]:
    if not model.enforce_eager:
        return []
    problems = []
    if tensor_parallel > 1:
        problems.append(
            Problem(
                f"{at}.enforce_eager",
                "enforce_eager forces vLLM's V0 path, which cannot stream weights distributed across "
                "tensor-parallel ranks (an error, or a silent fallback to rank 0 loading everything)",
                "remove enforce_eager, or set tensor_parallel_size: 1 if the model fits one GPU",
            )
        )
    if config.caches.compile:
        problems.append(
            Problem(
                f"{at}.enforce_eager",
                "with enforce_eager vLLM never writes the torch.compile cache, so the compile cache would "
                "have no effect",
                "remove enforce_eager, or set caches.compile: false",
            )
        )
    return problems


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
        )
    ]


def _pod_memory(config: EnvironmentConfig, catalog: Catalog, model, at: str) -> list[Problem]:
    plan = plan_model(model, config, catalog)
    needed = plan.streamer_buffer_bytes + config.streamer.process_headroom_gib * GIB
    if needed <= plan.memory_gib * GIB:
        return []
    buffers = (
        f"{streaming_processes(plan.tensor_parallel)} x min({plan.concurrency} x {plan.chunk_bytes / GIB:g} GiB, "
        f"{plan.memory_limit_bytes / GIB:.1f} GiB)"
    )
    return [
        Problem(
            f"{at}.memory_gib",
            f"the streamer's buffers ({buffers} = {plan.streamer_buffer_bytes / GIB:.1f} GiB) plus "
            f"{config.streamer.process_headroom_gib} GiB for vLLM need {needed / GIB:.1f} GiB, more than the "
            f"pod's {plan.memory_gib} GiB request",
            _memory_fix(config, catalog, model, math.ceil(needed / GIB)),
        )
    ]


def _memory_fix(config: EnvironmentConfig, catalog: Catalog, model, needed_gib: int) -> str:
    """Raise the request only where every candidate instance can allocate it; else name the pool's types that
    can (a request above an instance's allocatable memory is refused in turn)."""
    lower = "lower streamer.max_concurrency, streamer.chunk_bytes or streamer.memory_limit_bytes"
    instances = candidate_instances(model, config, catalog)
    if all(needed_gib <= math.floor(i.memory_gib * NODE_ALLOCATABLE) for i in instances):
        return f"raise memory_gib to at least {needed_gib}, or {lower}"
    roomy = [
        t
        for t in config.compute.gpu_pool.instance_types
        if needed_gib <= math.floor(catalog.instance(t).memory_gib * NODE_ALLOCATABLE)
    ]
    if roomy:
        return f"raise memory_gib to {needed_gib} with instance_types: {roomy} (they allocate it), or {lower}"
    return lower


def _requests_fit(model, instances, at: str) -> list[Problem]:
    problems = []
    for instance in instances:
        if model.cpu is not None and model.cpu > instance.vcpus * NODE_ALLOCATABLE:
            problems.append(
                Problem(
                    f"{at}.cpu",
                    f"{model.cpu:g} CPUs cannot be allocated on {instance.instance_type} ({instance.vcpus} vCPUs)",
                    f"request at most {math.floor(instance.vcpus * NODE_ALLOCATABLE)} or leave cpu unset",
                )
            )
        if model.memory_gib is not None and model.memory_gib > instance.memory_gib * NODE_ALLOCATABLE:
            problems.append(
                Problem(
                    f"{at}.memory_gib",
                    f"{model.memory_gib} GiB cannot be allocated on {instance.instance_type} "
                    f"({instance.memory_gib} GiB)",
                    f"request at most {math.floor(instance.memory_gib * NODE_ALLOCATABLE)} or leave memory_gib unset",
                )
            )
    return problems


def _vllm_env(env: dict[str, str], field: str) -> list[Problem]:
    problems = []
    for name, value in env.items():
        if not re.fullmatch(r"VLLM_[A-Z0-9_]+", name):
            problems.append(Problem(f"{field}.{name}", "only VLLM_* variables belong here", "rename or remove it"))
        elif name in RESERVED_VLLM_ENV:
            problems.append(Problem(f"{field}.{name}", f"not allowed here: {RESERVED_VLLM_ENV[name]}", "remove it"))
        elif "$(" in value:
            problems.append(
                Problem(
                    f"{field}.{name}",
                    "warmstart passes values to vLLM literally (no $(...) expansion), the same on every pod, as "
                    "the compile-cache key needs; a pod-specific value would make every pod hash differently",
                    "use a literal value",
                )
            )
    return problems


def _image_pinned(image: str, field: str) -> list[Problem]:
    malformed = reference_problem(image)
    if malformed:
        return [
            Problem(
                field,
                f"{image!r} {malformed}",
                "write registry/repository:tag or registry/repository@sha256:<64 hex>, e.g. vllm/vllm-openai:v0.21.0",
            )
        ]
    why = moving_reference(image)
    if why is None:
        return []
    return [
        Problem(
            field,
            f"{image!r} {why}: nodes would pull different images over time, and the image cache "
            "and the compile-cache key would not match what runs",
            "pin a release tag (vllm/vllm-openai:v0.21.0) or a digest (...@sha256:<64 hex>)",
        )
    ]


def _agent_image(config: EnvironmentConfig) -> list[Problem]:
    """A prebuilt agent image must name its digest: a tag can be pushed again, and the DaemonSet, the gates and
    their names (from the image's revision) would not follow."""
    image = config.deploy.agent_image
    if image is None:
        return []
    malformed = reference_problem(image)
    if malformed:
        return [Problem("deploy.agent_image", f"{image!r} {malformed}", "write registry/repository@sha256:<64 hex>")]
    if not re.search(r"@sha256:[0-9a-f]{64}$", image):
        return [
            Problem(
                "deploy.agent_image",
                f"{image!r} names no digest: a tag can be pushed again, and nodes would run different agents",
                "use the digest `make agent-image` prints (registry/repository@sha256:<64 hex>)",
            )
        ]
    return []


def _agent_policies(config: EnvironmentConfig) -> list[Problem]:
    from warmstart.scale import MANAGED_POLICIES_PER_ROLE, prefix_groups  # scale.py builds on Problem

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
        )
    ]


def _bucket_names(config: EnvironmentConfig) -> list[Problem]:
    named = [
        ("buckets.compile_cache", config.buckets.compile_cache),
        ("buckets.models.name", config.buckets.models.name),
    ]
    named += [(f"models[{i}].s3_uri", m.bucket) for i, m in enumerate(config.models)]
    problems = []
    for field, name in named:
        broken = bucket_name_problems(name)
        if broken:
            problems.append(
                Problem(
                    field,
                    f"bucket name {name!r} " + "; ".join(broken) + " (S3 bucket naming rules)",
                    "choose a name S3 accepts, e.g. warmstart-<env>-<purpose>-<account>",
                )
            )
    return problems


def _gpu_budget(config: EnvironmentConfig, catalog: Catalog) -> list[Problem]:
    """Karpenter launches a node only while the pool's GPUs (whole nodes) stay within gpu_limit: a limit below
    every instance type's GPUs launches nothing, and one below what the replicas hold leaves pods pending."""
    pool = config.compute.gpu_pool
    field = "compute.gpu_pool.gpu_limit"
    smallest = min(catalog.instance(t).gpu_count for t in pool.instance_types)
    if pool.gpu_limit < smallest:
        return [
            Problem(
                field,
                f"{pool.gpu_limit} is below the {smallest} GPUs of the smallest pool instance type: "
                "Karpenter could never launch a node, and every pod would wait forever",
                f"set gpu_limit to at least {smallest}",
            )
        ]
    problems = []
    for index, model in enumerate(config.models):
        types = model.instance_types or pool.instance_types
        if all(catalog.instance(t).gpu_count > pool.gpu_limit for t in types):
            problems.append(
                Problem(
                    f"models[{index}].instance_types",
                    f"every instance type of {model.name} has more "
                    f"than the pool's {pool.gpu_limit} GPUs: its pods could never be placed",
                    f"raise {field}, or list smaller instance types",
                )
            )
    if any(t not in pool.instance_types for m in config.models for t in (m.instance_types or [])):
        return problems  # a model outside the pool is refused on its own; its GPUs are not the pool's
    steady = steady_pool_gpus(config, catalog)
    surge = max(node_gpus(m, config, catalog) for m in config.models) if pool.surge else 0
    if steady + surge > pool.gpu_limit:
        scaled = [m.name for m in config.models if m.autoscaling]
        need = (
            f"{steady} GPUs of nodes for every replica on its own node"
            + (f" (autoscaled at max_replicas: {', '.join(scaled)})" if scaled else "")
            + (f", plus {surge} for the node a rollout starts first" if surge else "")
        )
        problems.append(
            Problem(
                field,
                f"{pool.gpu_limit} is below what the models need: {need}",
                f"set gpu_limit to at least {steady + surge}"
                + (
                    ", or set surge: false (rollouts then replace one pod at a time)"
                    if surge
                    else ", or lower replicas"
                )
                + (", or lower max_replicas" if scaled else ""),
            )
        )
    return problems


def _tensor_parallel(model, instances, at: str, catalog: Catalog) -> list[Problem]:
    field = f"{at}.tensor_parallel_size"
    if model.tensor_parallel_size == "auto":
        try:
            smallest_tensor_parallel(model.size_gb, instances, model.weights_memory_fraction)
        except SizingError as error:
            fix = _fit_fix(model, instances, catalog)
            message = str(error) + (
                ""
                if fix
                else "; no instance type of the catalog holds these weights on one "
                "node (serving across nodes is out of scope)"
            )
            return [Problem(field, message, fix)]
        return []
    size = model.tensor_parallel_size
    problems = []
    for instance in instances:
        valid = valid_tensor_parallel_sizes(instance)
        if size > instance.gpu_count:
            problems.append(
                Problem(
                    field,
                    f"{size} is larger than the {instance.gpu_count} GPUs of {instance.instance_type}",
                    f"use one of {valid} or 'auto'",
                )
            )
        elif size not in valid:
            problems.append(
                Problem(
                    field,
                    f"{size} does not divide the {instance.gpu_count} GPUs of {instance.instance_type}",
                    f"use one of {valid} or 'auto'",
                )
            )
        elif not weights_fit(model.size_gb, size, instance, model.weights_memory_fraction):
            problems.append(
                Problem(
                    field,
                    f"{model.size_gb:g} GB of weights on {size} x {instance.gpu_memory_gb} GB "
                    f"({instance.instance_type}) leaves less than {1 - model.weights_memory_fraction:.0%} "
                    "of GPU memory for the KV cache",
                    _fit_fix(model, [instance], catalog, size),
                )
            )
    return problems


MAX_WEIGHTS_FRACTION = 0.95  # the config's upper bound on weights_memory_fraction


def _fit_fix(model, instances, catalog: Catalog, size: int | None = None) -> str:
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
            return f"raise tensor_parallel_size to {larger[0]} (or use 'auto')"
    sizes = (
        [size]
        if size is not None
        else sorted(set.intersection(*(set(valid_tensor_parallel_sizes(i)) for i in instances)))
    )
    needed = min((max(model.size_gb / (s * i.gpu_memory_gb) for i in instances) for s in sizes), default=1.0)
    if needed <= MAX_WEIGHTS_FRACTION:
        return (
            f"raise weights_memory_fraction to at least {math.ceil(needed * 100) / 100:g} (it leaves "
            f"{1 - needed:.0%} of GPU memory for the KV cache), or use instance types with more GPU memory"
        )
    every = (catalog.instance(name) for name in catalog.instances)
    holders = sorted(
        (i for i in every if i.total_gpu_memory_gb * fraction >= model.size_gb),
        key=lambda i: (i.total_gpu_memory_gb, i.instance_type),
    )
    if not holders:
        return ""  # no single node in the catalog holds these weights: multi-node serving is out of scope
    return (
        f"use instance types whose GPUs hold {model.size_gb:g} GB at weights_memory_fraction {fraction:g}, "
        f"e.g. {', '.join(i.instance_type for i in holders[:3])}"
    )
