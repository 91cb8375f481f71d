"""What the node agent needs to know, written by synth into a ConfigMap and read by the agent.

One model for both sides of the contract, so the two cannot drift.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from warmstart.catalog import Catalog
from warmstart.config import EnvironmentConfig
from warmstart.sizing import candidate_instances
from warmstart.workload import plan_model

AGENT_NAMESPACE = "warmstart-system"
AGENT_SERVICE_ACCOUNT = "warmstart-agent"
AGENT_CACHE_MOUNT = "/node-cache/compile-cache"  # where the DaemonSet mounts the node's compile-cache root
NODE_LABEL_DOMAIN = "compile-cache.warmstart.io"


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GpuFacts(_Strict):
    gpu: str
    architecture: str


class AgentModel(_Strict):
    name: str
    fingerprint: str
    factors: dict[str, Any]


class AgentSettings(_Strict):
    bucket: str
    region: str
    cache_root: str = AGENT_CACHE_MOUNT
    models: list[AgentModel]
    # GPU facts of every instance type a model may land on, keyed by node.kubernetes.io/instance-type.
    gpus: dict[str, GpuFacts]
    poll_seconds: int = Field(default=15, ge=1)
    last_use_touch_seconds: int = Field(default=6 * 3600, ge=60)
    download_part_bytes: int = Field(default=64 * 2**20, ge=5 * 2**20)
    download_threads: int = Field(default=8, ge=1, le=64)


def agent_settings(config: EnvironmentConfig, catalog: Catalog) -> AgentSettings:
    models, gpus = [], {}
    for model in config.models:
        plan = plan_model(model, config, catalog)
        if not plan.compile_cache:
            continue
        models.append(
            AgentModel(name=model.name, fingerprint=plan.factors.fingerprint(), factors=plan.factors.__dict__)
        )
        for instance in candidate_instances(model, config, catalog):
            gpus[instance.instance_type] = GpuFacts(gpu=instance.gpu_name, architecture=instance.architecture)
    return AgentSettings(bucket=config.buckets.compile_cache, region=config.region, models=models, gpus=gpus)
