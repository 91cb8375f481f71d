"""The `models` section (one `ModelSpec` per served model, with its autoscaling), the streamer's tuning and the
start estimate's measured figures."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    field_validator,
)

from warmstart.checks.fix import setting
from warmstart.config.base import DNS_LABEL, GIB, MIB, Strict
from warmstart.problem import Refused
from warmstart.vllm_release import VERSION_PATTERN as VLLM_VERSION_PATTERN


class MeasuredCompile(Strict):
    """torch.compile times measured for one model (vLLM logs them: `warmstart status --starts` shows them)."""

    cold: PositiveFloat  # the first pod of a configuration, nothing cached
    cached: PositiveFloat  # a pod that finds the compiled artifacts (same node, or restored on a new one)


class StartEstimate(Strict):
    """What `warmstart plan --estimate` assumes beyond the config and the GPU catalog: each default is a published
    measurement or a published limit (docs/estimate.md gives each one's source, and the figures it is checked
    against, none of them the parameter's own); `plan --estimate --calibrate` fits them to a cluster's starts."""

    # A GPU node from launch to Ready (Karpenter maintainers, aws/karpenter-provider-aws#6165: "about 30-40s").
    node_ready_seconds: float = Field(default=35, ge=0)
    # A serving image's compressed size (assumption: the vLLM 0.21.0 DLC is 8.8 GB; a model's image_size_gb wins).
    image_size_gb: PositiveFloat = 10
    # Plain containerd pull and unpack (an AI-on-EKS startup workshop, g6.4xlarge, Bottlerocket: 9.35 GB, 98 MB/s).
    plain_pull_mb_per_s: PositiveFloat = 98
    # SOCI parallel pull; default: the node OS's published figure (warmstart/node_os/).
    parallel_pull_mb_per_s: PositiveFloat | None = None
    # Starting a container whose image is on the node (the same workshop's warm start: 1-2 s).
    image_present_seconds: float = Field(default=1, ge=0)
    # The Run:ai streamer: each S3 client's throughput target (RUNAI_STREAMER_S3_TARGET_GBPS, the AWS CRT default
    # of 10 Gbit/s per client), times its clients (the rendered concurrency) and streaming processes.
    streamer_client_gbit_per_s: PositiveFloat = 10
    # S3's request rate per partitioned prefix (5,500 GET/s) times the CRT client's part size (8 MiB).
    s3_prefix_gets_per_s: PositiveInt = 5500
    s3_part_mib: PositiveInt = 8
    # One streamer reader on a local disk (Run:ai benchmark: Llama 3 8B, 16.06 GB, in 47.56 s at concurrency 1, gp3).
    local_reader_gb_per_s: PositiveFloat = 0.3377
    # Instance-store read rate where the catalog has no published figure (assumption; see docs/estimate.md).
    nvme_gb_per_s: PositiveFloat = 2.0
    # Without warmstart: a downloader (the AWS CLI's 10 concurrent requests, S3's 85-90 MB/s per connection)
    # through a NAT gateway (up to 100 Gbit/s, shared by the nodes scaling out) to the root EBS volume (~1 GB/s),
    # then vLLM's default safetensors loader (Run:ai benchmark: the same 16.06 GB in 47.99 s).
    download_connections: PositiveInt = 10
    s3_connection_mb_per_s: PositiveFloat = 87.5
    nat_gbit_per_s: PositiveFloat = 100
    root_volume_gb_per_s: PositiveFloat = 1.0
    loader_gb_per_s: PositiveFloat = 0.3347
    # How many new nodes start at once (they share the NAT without warmstart); `plan --estimate --nodes N`.
    scale_out_nodes: PositiveInt = 1
    # torch.compile from nothing: base + per ln(GB) (least squares on the EKS guide's 53 s at 60 GB, 60 s at 140 GB
    # and 80 s at 640 GB: the compiled graph grows far slower than the weights).
    compile_cold_base_seconds: float = Field(default=4.34, ge=0)
    compile_cold_seconds_per_ln_gb: float = Field(default=11.61, ge=0)
    # torch.compile with the artifacts on the node (EKS guide: ~6 s, 4-6 s, for every size).
    compile_cached_seconds: float = Field(default=6, ge=0)
    # Restoring the compile cache on a new node (a ~15 MB archive through the gateway endpoint, unpacked).
    restore_seconds: float = Field(default=1, ge=0)
    # vLLM's engine start after the weights: KV-cache profiling, warm-up and CUDA graph capture (the workshop's
    # vLLM 0.22 on g6.4xlarge: 27.9 s and 4.0 s); with enforce_eager, no capture.
    engine_seconds: float = Field(default=31.9, ge=0)
    engine_eager_seconds: float = Field(default=27.9, ge=0)
    # DeepGEMM's JIT of an FP8 model's kernels on a Hopper or Blackwell node without them (vLLM PR #48190: a boot
    # that missed all 41 kernels took 93.7 s more, of 170.6 s; H100 NVL, Qwen3-30B-A3B-FP8). Nothing once they
    # are on the node.
    deep_gemm_jit_seconds: float = Field(default=93.7, ge=0)
    # vLLM's memory profiling at start, which a matching startup plan skips (vLLM issue #47456: "profile / kv /
    # misc ~12s", H100 NVL, Qwen3-30B-A3B-FP8, vLLM 0.24.0); taken out of engine_seconds where the plan applies.
    # An upper bound: with a plan vLLM still runs its profile pass (it skips the measurement and the CUDA-graph
    # memory estimate); no figure of the plan's own saving is published.
    profiling_seconds: float = Field(default=12, ge=0)
    # The settings above measured in this cluster (`plan --estimate --calibrate` writes them): their phases are
    # marked as measured.
    measured: list[str] = Field(default_factory=list)

    @field_validator("measured")
    @classmethod
    def _known_settings(cls, value: list[str]) -> list[str]:
        unknown = [name for name in value if name not in cls.model_fields or name == "measured"]
        if unknown:
            raise Refused(
                f"names no estimate setting: {', '.join(unknown)}",
                "list only the settings above",
                setting("", [name for name in value if name not in unknown]),
            )
        return value


class Autoscaling(Strict):
    """The model's pods scale on vLLM's own load (a HorizontalPodAutoscaler); the GPU pool adds and removes nodes
    for them. The replicas setting gives way to min_replicas."""

    min_replicas: PositiveInt
    max_replicas: PositiveInt
    # waiting_requests: requests queued per pod (vLLM's vllm:num_requests_waiting); kv_cache_usage: the share of
    # the KV cache in use per pod (vllm:kv_cache_usage_perc, 0 to 1).
    metric: Literal["waiting_requests", "kv_cache_usage"] = "waiting_requests"
    # The per-pod value to hold: default 5 waiting requests, or 0.8 of the KV cache.
    target_value: PositiveFloat | None = None


class ModelSpec(Strict):
    name: str = Field(pattern=DNS_LABEL)
    s3_uri: str = Field(pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/(.+/)?$")
    size_gb: PositiveFloat
    tensor_parallel_size: PositiveInt | Literal["auto"] = "auto"
    # Share of one GPU's memory the weights may take; the rest is KV cache and activations.
    weights_memory_fraction: float = Field(default=0.8, gt=0, le=0.95)
    max_model_len: PositiveInt = 8192
    image: str = Field(min_length=1)
    replicas: PositiveInt = 1
    # With one replica, replacing its node (expiry, an AMI change, a rollout without room to surge) takes the
    # model offline until the new pod is Ready; refused unless accepted here (a dev environment).
    allow_single_replica_downtime: bool = False
    # Longest the pod may take to serve after it starts (startup probe); default: derived from the model's
    # size, tensor parallelism and torch.compile, with headroom (see `warmstart plan`).
    startup_budget_seconds: int | None = Field(default=None, ge=60, le=7200)
    # Namespaces whose pods may call this model's serving port; default: serving.client_namespaces.
    client_namespaces: list[Annotated[str, Field(pattern=DNS_LABEL)]] | None = None
    # Disables torch.compile and CUDA graphs (fast start, lower throughput); refused with the compile cache on.
    enforce_eager: bool = False
    # Restricts the model to some of the pool's instance types; default: all of them.
    instance_types: list[str] | None = None
    # Pod requests; default: the model's share (by GPUs) of the smallest candidate instance, less headroom.
    cpu: PositiveFloat | None = None
    memory_gib: PositiveInt | None = None
    # /dev/shm for NCCL between tensor-parallel ranks (memory-backed).
    shared_memory_gib: PositiveInt = 16
    # For `warmstart plan --estimate` only: the serving image's compressed size (default estimate.image_size_gb)
    # and torch.compile times measured for this model (default: estimate's size-based figures).
    image_size_gb: PositiveFloat | None = None
    compile_seconds: MeasuredCompile | None = None
    # Scale on load instead of a fixed replica count (off by default).
    autoscaling: Autoscaling | None = None

    # The vLLM release inside the image; default: the one its tag names (vllm/vllm-openai:v0.34.0, AWS's
    # .../vllm:0.34.0-gpu-...). Needed for an image whose tag names none (a digest alone, your own build):
    # warmstart reads the release's facts (warmstart/vllm_releases/) from it.
    vllm_version: str | None = Field(default=None, pattern=VLLM_VERSION_PATTERN)

    # Compile-relevant identity: every field below is a factor of the torch.compile cache key.
    # Which weights (a commit, release or date): new weights under the same name get a new key.
    weights_revision: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    # PyTorch inside the serving image, in which compiled kernels are specific; default: what the image's vLLM
    # release pins (its wheel's metadata). Needed for a release warmstart has no facts of.
    torch_version: str | None = Field(default=None, pattern=r"^\d+\.\d+(\.\d+)?([+a-z0-9.]*)$")
    # Single-node serving: pipeline stages across nodes are out of scope; kept as a key factor.
    pipeline_parallel_size: Literal[1] = 1
    max_num_batched_tokens: PositiveInt | None = None
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    quantization: str | None = Field(default=None, pattern=r"^[a-z0-9_]+$")
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    compilation_config: dict[str, Any] | None = None
    # Weights cache on node NVMe for this model; default: caches.weights.
    weights_cache: bool | None = None
    # Extra VLLM_* variables for every pod of the model (pod-specific ones are refused: they would make
    # every pod's compile hash different).
    vllm_env: dict[str, str] = Field(default_factory=dict)

    @property
    def bucket(self) -> str:
        return self.s3_uri.removeprefix("s3://").split("/", 1)[0]

    @property
    def least_replicas(self) -> int:
        """The fewest replicas the model runs: what availability rules hold."""
        return self.autoscaling.min_replicas if self.autoscaling else self.replicas

    @property
    def most_replicas(self) -> int:
        """The most replicas the model runs: what the GPU budget must hold."""
        return self.autoscaling.max_replicas if self.autoscaling else self.replicas

    @property
    def prefix(self) -> str:
        return self.s3_uri.removeprefix("s3://").split("/", 1)[1]


class StreamerTuning(Strict):
    """Run:ai Model Streamer settings: each stream holds one chunk in memory, concurrency is at most size / chunk,
    and RUNAI_STREAMER_MEMORY_LIMIT caps a process's buffers (docs/upstream-facts.md, Run:ai streamer)."""

    chunk_bytes: int = Field(default=4 * GIB, ge=8 * MIB)
    request_timeout_ms: PositiveInt = 3000
    low_speed_limit_bytes_per_s: PositiveInt = 1 * MIB
    # Upper bound on concurrency = ceil(size / chunk): each stream holds one chunk in memory.
    max_concurrency: int = Field(default=64, ge=1, le=512)
    # RUNAI_STREAMER_MEMORY_LIMIT: the streamer never buffers more than this per process.
    memory_limit_bytes: PositiveInt = 40 * 10**9
    # Memory the vLLM process needs beside the streamer's buffers (Python, tokenizer, CUDA host state).
    process_headroom_gib: PositiveInt = 8
