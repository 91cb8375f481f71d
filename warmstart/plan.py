"""`warmstart plan`: every model's derived settings, from the same functions synth uses."""

from __future__ import annotations

from warmstart.catalog import Catalog
from warmstart.config import GIB, EnvironmentConfig
from warmstart.workload import ModelPlan, plan_model


def plan_rows(plan: ModelPlan, config: EnvironmentConfig) -> list[tuple[str, str]]:
    model = plan.model
    tensor_parallel = f"{plan.tensor_parallel}" + (" (auto)" if model.tensor_parallel_size == "auto" else "")
    concurrency = f"{plan.concurrency}" + (" (capped)" if plan.concurrency_capped else "")
    nvme = f"{'fits' if plan.fits_nvme else 'DOES NOT FIT'}: {model.size_gb:g} GB of {plan.nvme_gb_min} GB (smallest)"
    return [
        ("weights", f"{model.s3_uri} ({model.size_gb:g} GB)"),
        ("instance types", ", ".join(model.instance_types or config.compute.gpu_pool.instance_types)),
        ("tensor parallel", tensor_parallel),
        ("distributed streaming", "yes" if plan.distributed else "no (TP 1)"),
        ("streamer concurrency", concurrency),
        ("chunk", f"{plan.chunk_bytes / GIB:g} GiB"),
        ("streamer buffers", f"{plan.streamer_buffer_bytes / GIB:.1f} GiB (limit {plan.memory_limit_bytes / GIB:.1f} GiB/process)"),
        ("requests", f"cpu {plan.cpu:g}, memory {plan.memory_gib} GiB, nvidia.com/gpu {plan.gpus}"),
        ("compile cache", plan.compile_host_path or "off"),
        ("NVMe", f"{plan.nvme_mount}; {nvme}"),
        ("weights cache", "on" if config.caches.weights else "off"),
        ("warnings", "; ".join(plan.warnings) or "none"),
    ]


def render_plan(config: EnvironmentConfig, catalog: Catalog, source: str) -> str:
    lines = [f"environment {config.name} ({source}): compute {config.compute.mode}, region {config.region}", ""]
    for model in config.models:
        rows = plan_rows(plan_model(model, config, catalog), config)
        width = max(len(name) for name, _ in rows)
        lines.append(f"model {model.name}")
        lines += [f"  {name.ljust(width)}  {value}" for name, value in rows]
        lines.append("")
    return "\n".join(lines)
