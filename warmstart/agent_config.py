"""The node agent's settings of an environment (contracts/agent_settings.py), from its config and the catalog."""

from __future__ import annotations

from contracts.agent_settings import (
    WEIGHTS_SIZE_TOLERANCE,
    AgentModel,
    AgentSettings,
    CompileSettings,
    GpuFacts,
    WeightsSettings,
)
from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.node_caches import weights_cached
from warmstart.sizing import candidate_instances, nvme_mount
from warmstart.workload import plan_model, weights_root


def agent_settings(config: EnvironmentConfig, catalog: Catalog) -> AgentSettings:
    models, gpus = [], {}
    for model in config.models:
        plan = plan_model(model, config, catalog)
        compile_settings = (
            CompileSettings(fingerprint=plan.factors.fingerprint(), factors=plan.factors.__dict__)
            if plan.compile_cache
            else None
        )
        weights = (
            WeightsSettings(
                s3_uri=model.s3_uri,
                prefix=model.prefix,
                max_bytes=int(model.size_gb * WEIGHTS_SIZE_TOLERANCE * 10**9),
            )
            if weights_cached(model, config)
            else None
        )
        if compile_settings is None and weights is None:
            continue
        models.append(AgentModel(name=model.name, compile=compile_settings, weights=weights))
        for instance in candidate_instances(model, config, catalog):
            gpus[instance.instance_type] = GpuFacts(gpu=instance.gpu_name, architecture=instance.architecture)
    return AgentSettings(
        bucket=config.buckets.compile_cache,
        model_bucket=config.buckets.models.name,
        region=config.region,
        models=models,
        gpus=gpus,
        weights_poll_seconds=config.caches.weights_poll_seconds,
        compile_archive_max_bytes=max(1, int(config.caches.compile_cache_reserve_gb * 10**9)),
        metrics_port=config.metrics.port,
        nvme_mount=nvme_mount(config.compute),
        weights_host_path=weights_root(config),
    )


def metrics_scraper_cidrs(config: EnvironmentConfig) -> list[str]:
    """Where the agent's metrics may be scraped from: the configured blocks, else the VPC (where Amazon Managed
    Service for Prometheus' collector places its network interfaces)."""
    return list(config.metrics.scraper_cidrs) if config.metrics.scraper_cidrs is not None else [config.network.cidr]
