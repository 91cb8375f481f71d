"""`warmstart plan`: every model's derived settings, from the same functions synth uses."""

from __future__ import annotations

import json

from contracts.cache_key import compile_cache_key
from warmstart.autoscaling import scaling_policy
from warmstart.catalog import Catalog
from warmstart.config.base import GIB
from warmstart.config.environment import EnvironmentConfig
from warmstart.image_preload import (
    data_volume_need_gb,
    image_route,
    image_set_key,
    snapshot_images,
    snapshot_parameter_name,
    volume_initialization_seconds,
)
from warmstart.notes import config_notes
from warmstart.placement import models_inside_pool, rollout_placement, steady_placement
from warmstart.preload_modes.base import pulls_in_parallel
from warmstart.sizing import candidate_instances
from warmstart.vllm_release import serving_release, serving_torch, serving_version
from warmstart.workload import VLLM_PORT, ModelPlan, nvme_need_gb, plan_model


def key_rows(plan: ModelPlan, config: EnvironmentConfig, catalog: Catalog) -> list[tuple[str, str]]:
    """One compile-cache key per GPU the model may land on, and the factors behind them."""
    if not plan.compile_cache:
        return [("compile-cache key", "none (compile cache off)")]
    by_gpu: dict[tuple[str, str], list[str]] = {}
    for instance in candidate_instances(plan.model, config, catalog):
        by_gpu.setdefault((instance.gpu_name, instance.architecture), []).append(instance.instance_type)
    rows = [
        (
            "compile-cache key",
            f"s3://{config.buckets.compile_cache}/"
            f"{compile_cache_key(plan.factors, gpu=gpu, architecture=arch).prefix} ({', '.join(types)})",
        )
        for (gpu, arch), types in by_gpu.items()
    ]
    factors = {k: v for k, v in json.loads(plan.factors.canonical()).items() if v not in (None, {}, [])}
    rows.append(
        (
            "key factors",
            ", ".join(f"{k}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in sorted(factors.items())),
        )
    )
    return rows


def plan_rows(plan: ModelPlan, config: EnvironmentConfig) -> list[tuple[str, str]]:
    model = plan.model
    tensor_parallel_size = f"{plan.tensor_parallel_size}" + (" (auto)" if model.tensor_parallel_size == "auto" else "")
    concurrency = f"{plan.concurrency}" + (" (capped)" if plan.concurrency_capped else "")
    need = nvme_need_gb(config, [model] if plan.weights_cache else [])
    nvme = f"{'fits' if plan.fits_nvme else 'DOES NOT FIT'}: needs {need:g} GB of {plan.nvme_gb_min} GB (smallest)"
    return [
        ("weights", f"{model.s3_uri} ({model.size_gb:g} GB)"),
        ("instance types", ", ".join(model.instance_types or config.compute.gpu_pool.instance_types)),
        ("tensor parallel", tensor_parallel_size),
        ("distributed streaming", "yes" if plan.distributed else "no (TP 1)"),
        ("streamer concurrency", concurrency),
        ("chunk", f"{plan.chunk_bytes / GIB:g} GiB"),
        (
            "streamer buffers",
            f"{plan.streamer_buffer_bytes / GIB:.1f} GiB (limit {plan.memory_limit_bytes / GIB:.1f} GiB"
            + (" per node, shared by its ranks)" if plan.streamer_limit_per_node else "/process)"),
        ),
        ("requests", f"cpu {plan.cpu:g}, memory {plan.memory_gib} GiB (also its limit), nvidia.com/gpu {plan.gpus}"),
        (
            "replicas",
            (
                f"{model.autoscaling.min_replicas}-{model.autoscaling.max_replicas} on load"
                if model.autoscaling
                else f"{model.replicas}"
            )
            + (
                ", each on its own node (spread over zones where possible)"
                if model.least_replicas > 1
                else ", offline while its node is replaced"
            ),
        ),
        ("rollout", plan.rollout),
        (
            "startup budget",
            f"{plan.startup_budget_seconds} s (startup probe: {plan.startup_failure_threshold} x 10 s "
            f"after 30 s)" + (" (set)" if model.startup_budget_seconds else ""),
        ),
        ("clients", "namespaces " + ", ".join([model.name, *plan.client_namespaces]) + f", port {VLLM_PORT} only"),
        ("compile cache", plan.compile_host_path or "off"),
        ("NVMe", f"{plan.nvme_mount}; {nvme}"),
        (
            "weights cache",
            f"on: {plan.weights_host_path}/{model.name}/<listing key>/, served to the pod's streamer "
            "on its loopback under the same S3 URI while fresh, else streamed from S3"
            if plan.weights_cache
            else "off",
        ),
        ("image", f"{model.image}: {image_route(config)}"),
        ("vLLM", _vllm_row(model, plan)),
        ("warnings", "; ".join(plan.warnings) or "none"),
    ]


def _vllm_row(model, plan: ModelPlan) -> str:
    """The release the pods run and what follows from it (warmstart/vllm_releases/)."""
    known = serving_release(model)
    command = " ".join(plan.server_command)
    if known is None:
        return (
            f"{serving_version(model)} (no recorded facts: PyTorch {serving_torch(model)} as configured; "
            f"started with {command})"
        )
    torch = "as configured" if model.torch_version else "its pin"
    return (
        f"{known.version} (released {known.released}; PyTorch {serving_torch(model)}, {torch}; Run:ai streamer "
        f"{known.image['streamer']} in its image; started with {command})"
    )


def scaling_rows(model, config: EnvironmentConfig, catalog: Catalog) -> list[tuple[str, str]]:
    policy = scaling_policy(model, config, catalog)
    if policy is None:
        return []
    return [
        (
            "autoscaling",
            f"{policy.min_replicas}-{policy.max_replicas} pods on {policy.source_metric}, {policy.target:g} per pod "
            f"(custom metric {policy.metric}); up at once, at most +100% or +4 pods per 15 s; down 1 pod a minute "
            f"after {policy.scale_down_window} s of lower load (1.5 x the {policy.start_seconds:.0f} s estimated "
            "start on a new node)",
        )
    ]


def image_preload_lines(config: EnvironmentConfig) -> list[str]:
    preload = config.image_preload
    line = f"image preload {preload.mode}" + (", SOCI parallel pull" if pulls_in_parallel(config) else "")
    if not preload.strategy.boots_with_images:
        return [line]
    snapshot = preload.snapshot
    init = volume_initialization_seconds(config)
    return [
        f"{line}: {', '.join(snapshot_images(config))} on a {snapshot.data_volume_gib} GiB data volume "
        f"(needs {data_volume_need_gb(config):g} GB), built by {snapshot.builder_instance_type} when the image set "
        f"changes (key {image_set_key(config)}), recorded in {snapshot_parameter_name(config.name)}",
        "  a new node's data volume is local within "
        + (
            f"~{init} s (its size at the initialization rate; sooner when the images take less)"
            if init
            else "its first reads (no initialization rate set)"
        ),
    ]


def pool_lines(config: EnvironmentConfig, catalog: Catalog) -> list[str]:
    """Where the pods go, as the GPU budget places them on the node model (what a node offers the models' pods)."""
    pool = config.compute.gpu_pool
    lines = [f"GPU pool {', '.join(pool.instance_types)}, gpu_limit {pool.gpu_limit}"]
    if not models_inside_pool(config):
        return [*lines, "  placement: not computed (a model lists instance types outside the pool)"]
    steady = steady_placement(config, catalog)
    lines += [f"  node {line}" for line in steady.describe_nodes().split("; ")]
    lines.append(f"  steady: {steady.gpus} GPUs of nodes: {steady.describe()}")
    if pool.surge:
        rollout = rollout_placement(config, catalog)
        lines.append(f"  every model's rollout pod at once: {rollout.gpus} GPUs of nodes: {rollout.describe()}")
    return lines


def render_plan(config: EnvironmentConfig, catalog: Catalog, source: str) -> str:
    lines = [
        f"environment {config.name} ({source}): compute {config.compute.mode}, region {config.region}",
        *image_preload_lines(config),
        *pool_lines(config, catalog),
        "",
    ]
    for model in config.models:
        plan = plan_model(model, config, catalog)
        rows = plan_rows(plan, config) + scaling_rows(model, config, catalog) + key_rows(plan, config, catalog)
        width = max(len(name) for name, _ in rows)
        lines.append(f"model {model.name}")
        lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
        lines.append("")
    notes = config_notes(config)
    if notes:
        lines += ["notes (what the recorded facts do not reach; no refusal):", *(f"  - {n}" for n in notes), ""]
    return "\n".join(lines)
