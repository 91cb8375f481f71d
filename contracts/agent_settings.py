"""What the node agent needs to know, written by synth into a ConfigMap (warmstart/agent_config.py) and read by
the agent. One model for both sides of the contract, so the two cannot drift."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

AGENT_NAMESPACE = "warmstart-system"
AGENT_SERVICE_ACCOUNT = "warmstart-agent"
AGENT_CACHE_MOUNT = "/node-cache/compile-cache"  # the node's compile-cache root, inside the agent
AGENT_WEIGHTS_MOUNT = "/node-cache/weights"  # the node's weights root, inside the agent
AGENT_PODS_MOUNT = "/node-cache/pods"  # the vLLM pods' entry records, inside the agent
AGENT_POD_LOGS_MOUNT = "/node-logs/pods"  # kubelet's /var/log/pods, read-only, inside the agent
POD_LOGS_HOST_PATH = "/var/log/pods"  # kubelet's default podLogsDir (Auto Mode and the EKS AMIs keep it)
NODE_LABEL_DOMAIN = "compile-cache.warmstart.io"
# Whether the last vLLM pod started on the node used a compile cache (hit) or compiled (miss).
COMPILE_USE_LABEL_DOMAIN = "compile-use.warmstart.io"
# Why that start missed, in one word (node_agent/runtime/compile_judgement.py Cause: load-failure, hash-changed, ...).
COMPILE_MISS_LABEL_DOMAIN = "compile-miss.warmstart.io"
WEIGHTS_LABEL_DOMAIN = "weights.warmstart.io"
LABEL_DOMAINS = (NODE_LABEL_DOMAIN, COMPILE_USE_LABEL_DOMAIN, COMPILE_MISS_LABEL_DOMAIN, WEIGHTS_LABEL_DOMAIN)
# A model's S3 prefix may hold this much more than its configured size_gb before the agent refuses it: sizes are
# written rounded ("67 GB"), never off by half.
WEIGHTS_SIZE_TOLERANCE = 1.5
WEIGHTS_MAX_OBJECTS = 20_000
# The agent container's memory request and limit: its own ~120 MB plus the page cache of what it writes, which
# cgroup v2 charges to the pod (the weights benchmark gives s5cmd the same limit).
AGENT_MEMORY_GIB = 1


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GpuFacts(_Strict):
    gpu: str
    architecture: str


class CompileSettings(_Strict):
    fingerprint: str
    factors: dict[str, Any]


class WeightsSettings(_Strict):
    s3_uri: str
    prefix: str
    # What a listing of the prefix may hold before the agent refuses to copy it (the owner of the bucket, or a
    # mistake, could put anything there): the configured size with room for rounding, and a file count far
    # above any model's.
    max_bytes: int = Field(ge=1)
    max_objects: int = Field(default=WEIGHTS_MAX_OBJECTS, ge=1)


class AgentModel(_Strict):
    name: str
    compile: CompileSettings | None = None
    weights: WeightsSettings | None = None

    @property
    def compile_cache(self) -> CompileSettings:
        """The compile settings of a model the agent caches compiles for (one of compile_models)."""
        if self.compile is None:
            raise ValueError(f"{self.name}: no compile cache")
        return self.compile

    @property
    def weights_cache(self) -> WeightsSettings:
        """The weights settings of a model the agent copies to the node (one of weights_models)."""
        if self.weights is None:
            raise ValueError(f"{self.name}: no weights cache")
        return self.weights


class AgentSettings(_Strict):
    bucket: str  # the compile-cache bucket
    model_bucket: str
    region: str
    cache_root: str = AGENT_CACHE_MOUNT
    weights_root: str = AGENT_WEIGHTS_MOUNT
    pod_records: str = AGENT_PODS_MOUNT
    pod_logs: str = AGENT_POD_LOGS_MOUNT
    metrics_port: int = 9400
    # Host paths, for the agent's check that the weights land on the instance-store filesystem.
    nvme_mount: str
    weights_host_path: str
    models: list[AgentModel]
    # GPU facts of every instance type a model may land on, keyed by node.kubernetes.io/instance-type.
    gpus: dict[str, GpuFacts]
    poll_seconds: int = Field(default=15, ge=1)
    weights_poll_seconds: int = Field(default=30, ge=5)
    last_use_touch_seconds: int = Field(default=6 * 3600, ge=60)
    # Measured (make bench, weights_prefetch): 8 streams of 64 MiB ranges through 1 MiB buffers keep the
    # agent near 60 MB and on par with s5cmd on a 2-core machine; large nodes can raise the streams.
    download_part_bytes: int = Field(default=64 * 2**20, ge=5 * 2**20)
    download_threads: int = Field(default=8, ge=1, le=64)
    download_buffer_bytes: int = Field(default=2**20, ge=2**20, multiple_of=4096)
    # The NVMe reserved for the compile cache (caches.compile_cache_reserve_gb): no archive a node published may
    # claim or unpack to more.
    compile_archive_max_bytes: int = Field(default=10 * 10**9, ge=1)
    # Longest the agent holds a weights download back while a pod of the node streams the model from S3
    # (it streams within the startup probe's 30 s + 60 x 10 s; a pod stuck longer no longer holds it back).
    max_weights_defer_seconds: int = Field(default=630, ge=0)

    @property
    def compile_models(self) -> list[AgentModel]:
        return [m for m in self.models if m.compile]

    @property
    def weights_models(self) -> list[AgentModel]:
        return [m for m in self.models if m.weights]
