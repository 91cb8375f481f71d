"""Derived settings of one served model: streamer tuning, tensor parallelism, pod sizing, cache paths.

Pure functions of the config and the GPU catalog; the cdk8s workload chart and `warmstart plan` both use
`plan_model`, so what the plan prints is what gets deployed.
"""

from __future__ import annotations

import hashlib
import json
import math
import posixpath
from dataclasses import dataclass, field

from contracts.cache_key import ModelFactors
from contracts.engine_caches import STARTUP_PLAN_VARIABLE, VLLM_ROOT_FOLDER, cache_variables
from contracts.node_layout import COMPILE_CACHE_CONTENT, model_cache_folder
from warmstart.catalog import Catalog
from warmstart.config.base import GIB
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import ModelSpec
from warmstart.node_caches import compile_cached, serving_images, weights_cached
from warmstart.placement import rollout_placement
from warmstart.sizing import candidate_instances, default_requests, derived_tensor_parallel_size, nvme_mount
from warmstart.vllm_release import facts_for, serving_torch, version_key

VLLM_PORT = 8000
# A pod leaving (scale-down, rollout, node replacement): the endpoint is removed while the preStop sleep runs
# (requests routed meanwhile still land), then vLLM finishes what runs for up to the timeout; the grace period
# covers both.
PRESTOP_SLEEP_SECONDS = 10
SHUTDOWN_TIMEOUT_SECONDS = 45
TERMINATION_GRACE_SECONDS = PRESTOP_SLEEP_SECONDS + SHUTDOWN_TIMEOUT_SECONDS + 15
# Inside the container; one fixed absolute path: vLLM stores absolute artifact paths in its cache index and
# hashes the model path (docs/upstream-facts.md, vLLM compile cache).
COMPILE_CACHE_MOUNT = "/compile-cache"
COMPILE_CACHE_FOLDER = "compile-cache"
# vLLM pulls config and tokenizer files of an s3:// model into <VLLM_ASSETS_CACHE>/model_streamer/<hash> and
# hashes that path: one fixed path in every pod, on a fresh emptyDir so no stale file survives a restart.
VLLM_ASSETS_MOUNT = "/warmstart-assets"
# Node folder where each vLLM container's entry step records what it chose (weights source, the compile
# folders it found); the agent reads it to tell which copies are in use and whether vLLM hit its cache.
POD_RECORDS_FOLDER = "warmstart/pods"
POD_RECORDS_MOUNT = "/warmstart-pods"
# One MCS level for the agent and every vLLM pod. Bottlerocket (Auto Mode) runs SELinux enforcing and gives
# each pod two random categories; hostPath folders are not relabelled. Files on a local_t hostPath carry no
# categories, but the Auto Mode policy is not published: a shared level keeps the agent's restored files and
# vLLM's compiled ones readable to each other whatever the policy labels them (docs/upstream-facts.md).
SHARED_SELINUX_LEVEL = "s0:c418,c711"


def streamer_concurrency(size_gb: float, chunk_bytes: int, ceiling: int) -> int:
    """ceil(model size / chunk size), chunk in the same unit as the size (4 GiB chunks: 67 GB -> 17)."""
    return max(1, min(ceiling, math.ceil(size_gb / (chunk_bytes / GIB))))


def streaming_processes(tensor_parallel_size: int) -> int:
    """With distributed streaming every TP rank streams its own shard; otherwise rank 0 alone."""
    return tensor_parallel_size if tensor_parallel_size > 1 else 1


# runai-model-streamer 0.17.0 made RUNAI_STREAMER_MEMORY_LIMIT a node total for distributed streaming: each of the
# node's ranks buffers at most max(limit // ranks, its largest range) (distributed_streamer.py `rank_memory_limit`,
# test_rank_memory_limit.py); before it, each process read the limit as its own. The image's streamer decides
# (warmstart/vllm_releases/: 0.15.9 in vLLM 0.21.0's image, 0.17.1 in 0.34.0's).
STREAMER_NODE_TOTAL_SINCE = "0.17.0"


def limit_is_node_total(streamer_version: str) -> bool:
    return version_key(streamer_version) >= version_key(STREAMER_NODE_TOTAL_SINCE)


def streamer_buffer_bytes(
    concurrency: int, chunk_bytes: int, memory_limit_bytes: int, processes: int, *, node_total: bool = False
) -> int:
    """Host memory the streamer may hold at once: one chunk per stream, capped by the limit: per process, or (a node
    total) each process's share of it, at least one chunk (the largest range a read takes)."""
    share = max(memory_limit_bytes // processes, chunk_bytes) if node_total and processes > 1 else memory_limit_bytes
    return processes * min(concurrency * chunk_bytes, share)


# Startup budget (the startup probe): the slowest published starts, not the estimate's typical ones, since a budget
# too short kills a healthy pod. Weights at the slowest published stream per streaming process (streamer 0.6.0's
# ~0.1 GB/s per client; HyperPod's 145 GB in over 20 minutes, 0.12 GB/s; docs/estimate-figures.yaml), and
# torch.compile, CUDA graphs and engine start at the slowest published total (Llama 3 70B at TP 8: ~70 s of
# compile, ~60 s of graphs, ~60 s of a peer-access check; vllm-project/vllm#19824), with headroom; the probe starts
# after 30 s.
STARTUP_STREAM_GB_PER_S = 0.1
STARTUP_COMPILE_AND_INIT_SECONDS = 190
STARTUP_EAGER_INIT_SECONDS = 60
STARTUP_HEADROOM = 1.5
STARTUP_MINIMUM_SECONDS = 300
PROBE_INITIAL_DELAY_SECONDS = 30
PROBE_PERIOD_SECONDS = 10


def startup_budget_seconds(model: ModelSpec, tensor_parallel_size: int) -> int:
    if model.startup_budget_seconds is not None:
        return model.startup_budget_seconds
    load = model.size_gb / (STARTUP_STREAM_GB_PER_S * streaming_processes(tensor_parallel_size))
    start = STARTUP_EAGER_INIT_SECONDS if model.enforce_eager else STARTUP_COMPILE_AND_INIT_SECONDS
    return max(STARTUP_MINIMUM_SECONDS, math.ceil((load + start) * STARTUP_HEADROOM))


# Share of the instance-store NVMe warmstart plans to fill (the rest: filesystem overhead, kubelet, logs).
NVME_USABLE = 0.9
WEIGHTS_FOLDER = "warmstart/weights"


def prepull_daemonset_name(image: str) -> str:
    """Name of the prepull DaemonSet of one serving image (shared by every model that uses it)."""
    return f"image-cache-{hashlib.sha256(image.encode()).hexdigest()[:12]}"


def image_gate_name(image: str, revision: str) -> str:
    """Name of the rollout gate Job of one serving image. A Job's pod template cannot change, so the name changes
    with the image and with `revision` (a digest of the rendered Job): a new image gets a new Job, and so a new
    wait."""
    digest = hashlib.sha256(f"{image}|{revision}".encode()).hexdigest()
    return f"image-gate-{digest[:12]}"


def images_gb(config: EnvironmentConfig) -> float:
    """Disk the serving images take on a node (caches.image_size_gb each, unpacked)."""
    return len(serving_images(config)) * config.caches.image_size_gb


def images_on_data_volume(config: EnvironmentConfig) -> bool:
    """In snapshot mode containerd stays on the Bottlerocket data volume (made from the snapshot); only the
    kubelet's folders and pod logs move to the NVMe array."""
    return config.image_preload.strategy.boots_with_images


def nvme_need_gb(config: EnvironmentConfig, cached_models: list[ModelSpec]) -> float:
    """NVMe the cached models need on one node: each model once, the largest twice (an update fills the new
    copy before the old one goes), one image per distinct serving image (containerd's store is on the NVMe
    array, whether the image was prepulled or pulled by the pod, except in snapshot mode, where it is on the
    data volume), and the compile cache."""
    weights = sum(m.size_gb for m in cached_models) + max((m.size_gb for m in cached_models), default=0)
    images = 0 if images_on_data_volume(config) else images_gb(config)
    compile_reserve = config.caches.compile_cache_reserve_gb if config.caches.compile else 0
    return round(weights + images + compile_reserve, 3)


def weights_root(config: EnvironmentConfig) -> str:
    """Node folder of the weights cache: <NVMe>/warmstart/weights/<model>/<key>/."""
    return posixpath.join(nvme_mount(config.compute), WEIGHTS_FOLDER)


def pod_records_root(config: EnvironmentConfig) -> str:
    return posixpath.join(nvme_mount(config.compute), POD_RECORDS_FOLDER)


def compile_cache_root(config: EnvironmentConfig) -> str:
    """Node folder holding every model's compile cache and the agent's markers."""
    return config.caches.compile_host_path or posixpath.join(nvme_mount(config.compute), COMPILE_CACHE_FOLDER)


def model_factors(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog) -> ModelFactors:
    return ModelFactors(
        model=model.name,
        weights_revision=model.weights_revision,
        image=model.image,
        torch_version=serving_torch(model),
        tensor_parallel=derived_tensor_parallel_size(model, config, catalog),  # the key factor keeps its name
        pipeline_parallel=model.pipeline_parallel_size,
        max_model_len=model.max_model_len,
        max_num_batched_tokens=model.max_num_batched_tokens,
        dtype=model.dtype,
        quantization=model.quantization,
        kv_cache_dtype=model.kv_cache_dtype,
        compilation_config=model.compilation_config,
        vllm_env=dict(sorted(model.vllm_env.items())),
    )


def is_under(path: str, root: str) -> bool:
    normalized = posixpath.normpath(path)
    return normalized != root and normalized.startswith(root.rstrip("/") + "/") and normalized == path.rstrip("/")


@dataclass(frozen=True)
class ModelPlan:
    model: ModelSpec
    region: str
    tensor_parallel_size: int
    concurrency: int
    concurrency_capped: bool
    distributed: bool
    chunk_bytes: int
    request_timeout_ms: int
    low_speed_limit_bytes_per_s: int
    memory_limit_bytes: int
    streamer_buffer_bytes: int
    # RUNAI_STREAMER_MEMORY_LIMIT is the node's total, shared by the streaming ranks (the image's streamer >= 0.17.0)
    streamer_limit_per_node: bool
    cpu: float
    memory_gib: int
    compile_cache: bool
    compile_host_path: str | None
    compile_cache_root: str
    restore_wait_seconds: int
    factors: ModelFactors
    nvme_mount: str
    nvme_gb_min: int
    fits_nvme: bool
    weights_cache: bool
    weights_host_path: str
    pod_records_host_path: str
    # How old the agent's last confirmation against S3 may be for a pod to trust the local copy.
    weights_max_age_seconds: int
    startup_budget_seconds: int
    # A rollout starts the new pod first only when the pool's GPU limit leaves a node for it; otherwise it
    # replaces pods one at a time (a single replica is then offline during the rollout).
    surge: bool
    rollout: str
    kubernetes_version: str  # the cluster's minor (the namespace's Pod Security labels are pinned to it)
    # How the pod starts vLLM's OpenAI server, as the image's vLLM release does it (`vllm serve` where it has it).
    server_command: list[str] = field(default_factory=list)
    client_namespaces: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def startup_failure_threshold(self) -> int:
        return max(1, math.ceil((self.startup_budget_seconds - PROBE_INITIAL_DELAY_SECONDS) / PROBE_PERIOD_SECONDS))

    @property
    def loader_extra_config(self) -> dict:
        extra: dict = {"concurrency": self.concurrency}
        if self.distributed:
            extra["distributed"] = True
        return extra

    @property
    def gpus(self) -> int:
        return self.tensor_parallel_size

    @property
    def entry_step(self) -> bool:
        """The entry step runs in front of vLLM whenever a node cache serves the pod: it picks the weights
        source and records what the pod found, for the agent to judge."""
        return self.compile_cache or self.weights_cache


def plan_model(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog) -> ModelPlan:
    streamer = config.streamer
    instances = candidate_instances(model, config, catalog)
    tensor_parallel_size = derived_tensor_parallel_size(model, config, catalog)
    uncapped = math.ceil(model.size_gb / (streamer.chunk_bytes / GIB))
    concurrency = streamer_concurrency(model.size_gb, streamer.chunk_bytes, streamer.max_concurrency)
    distributed = tensor_parallel_size > 1
    default_cpu, default_memory = default_requests(instances, tensor_parallel_size)
    compile_cache = compile_cached(model, config)
    factors = model_factors(model, config, catalog)
    node_total = distributed and limit_is_node_total(facts_for(model).image["streamer"])
    warnings = []
    if uncapped > concurrency:
        warnings.append(f"concurrency capped at {concurrency} (size/chunk gives {uncapped})")
    if model.enforce_eager:
        warnings.append("enforce_eager: no torch.compile or CUDA graphs (lower throughput)")
    if not config.caches.compile:
        warnings.append("compile cache off: every pod compiles from scratch")
    # With surge on, the synth checks keep room in gpu_limit for every model's rollout pod at once.
    surge = config.compute.gpu_pool.surge
    if surge:
        rollout = (
            f"new pod first (with every model's rollout pod placed: {rollout_placement(config, catalog).gpus} of "
            f"the pool's {config.compute.gpu_pool.gpu_limit} GPUs)"
        )
    else:
        rollout = "one pod at a time (compute.gpu_pool.surge: false)"
        warnings.append(
            "no surge: "
            + (
                "the model is offline during every rollout"
                if model.least_replicas == 1
                else "rollouts run one replica short"
            )
        )
    return ModelPlan(
        model=model,
        region=config.region,
        tensor_parallel_size=tensor_parallel_size,
        concurrency=concurrency,
        concurrency_capped=uncapped > concurrency,
        distributed=distributed,
        chunk_bytes=streamer.chunk_bytes,
        request_timeout_ms=streamer.request_timeout_ms,
        low_speed_limit_bytes_per_s=streamer.low_speed_limit_bytes_per_s,
        memory_limit_bytes=streamer.memory_limit_bytes,
        streamer_buffer_bytes=streamer_buffer_bytes(
            concurrency,
            streamer.chunk_bytes,
            streamer.memory_limit_bytes,
            streaming_processes(tensor_parallel_size),
            node_total=node_total,
        ),
        streamer_limit_per_node=node_total,
        cpu=model.cpu or default_cpu,
        memory_gib=model.memory_gib or default_memory,
        compile_cache=compile_cache,
        compile_host_path=(
            posixpath.join(compile_cache_root(config), model_cache_folder(model.name, factors.fingerprint()))
            if compile_cache
            else None
        ),
        compile_cache_root=compile_cache_root(config),
        restore_wait_seconds=config.caches.restore_wait_seconds,
        factors=factors,
        nvme_mount=nvme_mount(config.compute),
        nvme_gb_min=min(i.nvme_gb for i in instances),
        fits_nvme=all(nvme_need_gb(config, [model]) <= i.nvme_gb * NVME_USABLE for i in instances),
        weights_cache=weights_cached(model, config),
        weights_host_path=weights_root(config),
        pod_records_host_path=pod_records_root(config),
        weights_max_age_seconds=2 * config.caches.weights_poll_seconds + 30,
        startup_budget_seconds=startup_budget_seconds(model, tensor_parallel_size),
        surge=surge,
        rollout=rollout,
        kubernetes_version=config.cluster.kubernetes_version,
        server_command=facts_for(model).server_command,
        client_namespaces=sorted(
            set(model.client_namespaces if model.client_namespaces is not None else config.serving.client_namespaces)
        ),
        warnings=warnings,
    )


def vllm_args(plan: ModelPlan) -> list[str]:
    model = plan.model
    # `vllm serve` takes the model as its first argument (0.34.0 warns that --model will go); the module form
    # takes --model.
    serve = plan.server_command[-1:] == ["serve"]
    args = [
        model.s3_uri if serve else f"--model={model.s3_uri}",
        "--load-format=runai_streamer",
        f"--model-loader-extra-config={json.dumps(plan.loader_extra_config, separators=(',', ':'))}",
        f"--tensor-parallel-size={plan.tensor_parallel_size}",
        f"--max-model-len={model.max_model_len}",
        f"--dtype={model.dtype}",
        # The API name stays the same whether weights come from S3 or a node-local copy.
        f"--served-model-name={model.name}",
        "--host=0.0.0.0",
        f"--port={VLLM_PORT}",
        # On SIGTERM, finish the requests in flight for up to this long (vLLM's default 0 aborts them); not a
        # factor of vLLM's compile hash (VllmConfig.shutdown_timeout is outside compute_hash).
        f"--shutdown-timeout={SHUTDOWN_TIMEOUT_SECONDS}",
    ]
    if model.max_num_batched_tokens is not None:
        args.append(f"--max-num-batched-tokens={model.max_num_batched_tokens}")
    if model.quantization is not None:
        args.append(f"--quantization={model.quantization}")
    if model.kv_cache_dtype != "auto":
        args.append(f"--kv-cache-dtype={model.kv_cache_dtype}")
    if model.compilation_config is not None:
        args.append(
            f"--compilation-config={json.dumps(model.compilation_config, sort_keys=True, separators=(',', ':'))}"
        )
    if model.enforce_eager:
        args.append("--enforce-eager")
    return args


def vllm_env(plan: ModelPlan) -> dict[str, str]:
    env = {
        "RUNAI_STREAMER_CHUNK_BYTESIZE": str(plan.chunk_bytes),
        "RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS": str(plan.request_timeout_ms),
        "RUNAI_STREAMER_S3_LOW_SPEED_LIMIT": str(plan.low_speed_limit_bytes_per_s),
        "RUNAI_STREAMER_MEMORY_LIMIT": str(plan.memory_limit_bytes),
        "AWS_REGION": plan.region,
        "AWS_DEFAULT_REGION": plan.region,
        "VLLM_ASSETS_CACHE": VLLM_ASSETS_MOUNT,
        **plan.model.vllm_env,
    }
    if plan.compile_cache:
        content = f"{COMPILE_CACHE_MOUNT}/{COMPILE_CACHE_CONTENT}"
        # Every cache the engine writes at start, on the node's NVMe rather than in the pod's HOME or /tmp (lost
        # with the pod): vLLM's own under VLLM_CACHE_ROOT, each kernel library's by its variable
        # (contracts/engine_caches.py); the agent archives the portable ones.
        env |= {
            "XDG_CACHE_HOME": content,
            "VLLM_CACHE_ROOT": f"{content}/{VLLM_ROOT_FOLDER}",
            **cache_variables(content),
        }
        if (setting := startup_plan_setting(plan.model, compile_cache=True)) is not None:
            env[STARTUP_PLAN_VARIABLE] = setting
    return env


def startup_plan_setting(model: ModelSpec, *, compile_cache: bool) -> str | None:
    """VLLM_ENABLE_STARTUP_PLAN as the model's pods get it, None where they get none. vLLM keeps a boot's
    memory-profiling result under VLLM_CACHE_ROOT (the compile cache's folder) and a later boot with its fingerprint
    skips profiling: on where the serving release has it, unless the model's own vllm_env turns it off."""
    if not compile_cache or STARTUP_PLAN_VARIABLE not in facts_for(model).known_env:
        return None
    return model.vllm_env.get(STARTUP_PLAN_VARIABLE, "1")
