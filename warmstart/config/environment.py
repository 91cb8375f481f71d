"""The one validated configuration model of an environment: every section, and the rules that span them.

Structure and single-field rules live in the sections (pydantic); rules that span several fields and the GPU
catalog live in `warmstart/checks/`, so that every problem is reported with its field path and its fix."""

from __future__ import annotations

from pydantic import (
    Field,
)

from warmstart.config.base import DNS_LABEL, Strict, TagKey, TagValue
from warmstart.config.caches import CacheSwitches, ImagePreload
from warmstart.config.cluster import ClusterConfig
from warmstart.config.compute import Compute
from warmstart.config.models import ModelSpec, StartEstimate, StreamerTuning
from warmstart.config.network import NetworkConfig
from warmstart.config.operations import (
    AgentMetricsAccess,
    Alerts,
    BucketsConfig,
    DeploySettings,
    MonitoringExports,
    PruningPolicy,
    ServingAccess,
)


class EnvironmentConfig(Strict):
    name: str = Field(pattern=DNS_LABEL)
    account: str = Field(pattern=r"^\d{12}$")
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$")
    network: NetworkConfig
    cluster: ClusterConfig
    compute: Compute
    buckets: BucketsConfig
    models: list[ModelSpec] = Field(min_length=1)
    streamer: StreamerTuning = StreamerTuning()
    caches: CacheSwitches = CacheSwitches()
    image_preload: ImagePreload = ImagePreload()
    pruning: PruningPolicy = PruningPolicy()
    serving: ServingAccess = ServingAccess()
    alerts: Alerts = Alerts()
    estimate: StartEstimate = StartEstimate()
    metrics: AgentMetricsAccess = AgentMetricsAccess()
    monitoring: MonitoringExports = MonitoringExports()
    deploy: DeploySettings = DeploySettings()
    # AWS tags on every resource (at most 50 per resource, some added by CDK and EKS: keep well below).
    tags: dict[TagKey, TagValue] = Field(default_factory=dict, max_length=40)
