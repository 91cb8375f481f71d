"""`warmstart plan --estimate`: each model's pod start, phase by phase, in three cases, before anything is deployed.

- cold node, no warmstart: a new GPU node, the image pulled plainly, the weights downloaded through the NAT gateway
  to the root volume and loaded with vLLM's default loader, torch.compile from nothing;
- new node, warmstart: a new GPU node, the image from the image snapshot or pulled (in parallel where the node does),
  the weights streamed straight to the GPUs through the S3 gateway endpoint, the compile cache restored;
- warm node: a node that already ran the model: image present, the weights from the node copy (when the weights
  cache is on, else streamed from S3), the compile cache on the node.

Each phase follows the physics of its path: bytes over the slowest of the rates on the way (a client's ceiling
times the clients, the instance network, S3's per-prefix request rate, the disk). The rates are published
measurements or limits (`estimate` settings, the node OS objects, the GPU catalog; docs/estimate.md cites each),
and the concurrency and processes are the workload plan's, so the estimate and the manifest cannot disagree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from warmstart.catalog import Catalog, GpuInstance
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import ModelSpec, StartEstimate
from warmstart.workload import PROBE_PERIOD_SECONDS, plan_model, startup_plan_setting

PHASES = ("node", "image", "restore", "weights", "compile", "kernels", "engine", "ready")
# Compute capabilities on which vLLM runs DeepGEMM (vllm/platforms/cuda.py `support_deep_gemm`, 0.34.0: 9.0 and the
# 10.x and 12.x families); its FP8 linear and MoE layers JIT-compile their kernels there.
DEEP_GEMM_MAJORS = (10, 12)
DEEP_GEMM_EXACT = ((9, 0),)
# GPUs from which an instance is a multi-card P-class node (8 GPUs, EFA cards).
LARGE_NODE_GPUS = 8
# S3 traffic leaves through the primary ENA interface on network card 0; P5-class instances list the bandwidth of
# all their cards (3,200 Gbit/s, EFA included), 100 Gbit/s per card (EC2 user guide, "Network cards").
ENA_CARD_GBIT_PER_S = 100
CASES = ("cold node, no warmstart", "new node, warmstart", "warm node")
BITS_PER_BYTE = 8
MIB = 2**20
# Where a figure comes from, for the table and the chart.
MEASURED, PUBLISHED, MODELLED = "measured", "published", "modelled"


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    how: str  # the path and the rate behind the figure, for the table
    basis: str = PUBLISHED  # measured (this cluster's starts), published (a cited figure), modelled (derived)


@dataclass(frozen=True)
class StartEstimateCase:
    case: str
    phases: tuple[Phase, ...]

    @property
    def total_seconds(self) -> float:
        return sum(phase.seconds for phase in self.phases)

    def seconds(self, name: str) -> float:
        return self.phase(name).seconds

    def phase(self, name: str) -> Phase:
        return next(phase for phase in self.phases if phase.name == name)

    @property
    def dominant(self) -> Phase:
        return max(self.phases, key=lambda phase: phase.seconds)


@dataclass(frozen=True)
class ModelEstimate:
    model: str
    instance_type: str
    nodes: int
    cases: tuple[StartEstimateCase, ...]

    def case(self, name: str) -> StartEstimateCase:
        return next(case for case in self.cases if case.case == name)


# ---- one phase each: pure, unit-tested ----


def jit_compiles_deep_gemm(model: ModelSpec, instance: GpuInstance) -> bool:
    """An FP8 model (its quantization, or FP8 in its name or path, as FP8 checkpoints are published) on a GPU
    where vLLM's image runs DeepGEMM: its kernels are JIT-compiled on a node that has none of them."""
    fp8 = (model.quantization or "").startswith("fp8") or "fp8" in f"{model.name} {model.s3_uri}".lower()
    capability = instance.compute_capability
    return fp8 and (capability in DEEP_GEMM_EXACT or capability[0] in DEEP_GEMM_MAJORS)


def compile_seconds(model: ModelSpec, settings: StartEstimate, *, cached: bool) -> float:
    """torch.compile: the model's measured times when the config has them, else the size-based figures."""
    if model.compile_seconds is not None:
        return model.compile_seconds.cached if cached else model.compile_seconds.cold
    if cached:
        return settings.compile_cached_seconds
    return settings.compile_cold_base_seconds + settings.compile_cold_seconds_per_ln_gb * math.log(
        max(model.size_gb, 1.0)
    )


def network_gb_per_s(instance: GpuInstance) -> float:
    """What S3 traffic can use of the instance's network: one card's worth on multi-card P-class instances."""
    gbit = instance.network_gbit_per_s
    if instance.gpu_count >= LARGE_NODE_GPUS and gbit > ENA_CARD_GBIT_PER_S:
        gbit = ENA_CARD_GBIT_PER_S
    return gbit / BITS_PER_BYTE


def image_pull_seconds(size_gb: float, mb_per_s: float, instance: GpuInstance) -> tuple[float, float]:
    """A pull at the runtime's rate, never faster than the instance network: (seconds, GB/s)."""
    rate = min(mb_per_s / 1000, network_gb_per_s(instance))
    return size_gb / rate, rate


def s3_prefix_gb_per_s(settings: StartEstimate) -> float:
    """S3's request rate per partitioned prefix times the part each request fetches."""
    return settings.s3_prefix_gets_per_s * settings.s3_part_mib * MIB / 1e9


def streamed_weights_seconds(
    size_gb: float, instance: GpuInstance, settings: StartEstimate, *, clients: int, processes: int, pods: int = 1
) -> tuple[float, str]:
    """The Run:ai streamer through the S3 gateway endpoint: each process opens `clients` S3 clients, each up to
    its throughput target; the instance network and S3's per-prefix rate bound them all, shared by the pods
    streaming on the node at once."""
    ceiling = clients * processes * settings.streamer_client_gbit_per_s / BITS_PER_BYTE
    rate = min(ceiling, network_gb_per_s(instance) / pods, s3_prefix_gb_per_s(settings))
    bound = min(
        (ceiling, f"{clients} x {processes} clients"),
        (network_gb_per_s(instance) / pods, "instance network"),
        (s3_prefix_gb_per_s(settings), "S3 prefix request rate"),
    )[1]
    return size_gb / rate, f"streamer via gateway {rate:.2f} GB/s ({bound})"


def node_copy_weights_seconds(
    size_gb: float, instance: GpuInstance, settings: StartEstimate, *, readers: int, processes: int
) -> tuple[float, str]:
    """The node copy on the RAID0 array, read by the streamer's readers (each at a local reader's rate)."""
    disk = instance.nvme_read_gb_per_s or settings.nvme_gb_per_s
    rate = min(disk, readers * processes * settings.local_reader_gb_per_s)
    return size_gb / rate, f"node copy on NVMe {rate:.2f} GB/s"


def baseline_weights_seconds(
    size_gb: float, instance: GpuInstance, settings: StartEstimate, nodes: int
) -> tuple[float, str]:
    """Without warmstart: a download through the NAT (shared by the nodes scaling out) to the root volume, then
    vLLM's default loader reads it."""
    rate = min(
        settings.download_connections * settings.s3_connection_mb_per_s / 1000,
        settings.nat_gbit_per_s / BITS_PER_BYTE / nodes,
        network_gb_per_s(instance),
        settings.root_volume_gb_per_s,
    )
    seconds = size_gb / rate + size_gb / settings.loader_gb_per_s
    return seconds, f"download {rate:.2f} GB/s, then loader {settings.loader_gb_per_s:g} GB/s"


def ready_seconds() -> float:
    """From the server listening to Ready: half the rendered probe period on average."""
    return PROBE_PERIOD_SECONDS / 2


# ---- the three cases ----


def estimate_instance(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog) -> GpuInstance:
    """The largest candidate: what a scale-out usually gets for a model that needs the GPUs."""
    return max(
        (catalog.instance(name) for name in model.instance_types or config.compute.gpu_pool.instance_types),
        key=lambda candidate: (candidate.gpu_count, candidate.network_gbit_per_s),
    )


def estimate_model(
    model: ModelSpec, config: EnvironmentConfig, catalog: Catalog, *, nodes: int | None = None
) -> ModelEstimate:
    settings = config.estimate
    nodes = nodes or settings.scale_out_nodes
    plan = plan_model(model, config, catalog)
    instance = estimate_instance(model, config, catalog)
    size = model.size_gb
    processes = plan.tensor_parallel_size if plan.distributed else 1
    node_os = config.compute.node_os
    image_gb = model.image_size_gb or settings.image_size_gb
    measured = MEASURED if model.compile_seconds is not None else PUBLISHED
    fitted = set(settings.measured)

    def basis(*names: str, otherwise: str = PUBLISHED) -> str:
        """Measured where a setting behind the figure was fitted to this cluster's starts."""
        return MEASURED if fitted.intersection(names) else otherwise

    parallel_mb = settings.parallel_pull_mb_per_s or node_os.parallel_pull_mb_per_s

    def pulled(in_parallel: bool) -> Phase:
        mb_per_s = parallel_mb if in_parallel else settings.plain_pull_mb_per_s
        seconds, rate = image_pull_seconds(image_gb, mb_per_s, instance)
        name = "parallel_pull_mb_per_s" if in_parallel else "plain_pull_mb_per_s"
        how = f"{'parallel' if in_parallel else 'plain'} pull {rate * 1000:.0f} MB/s"
        return Phase("image", seconds, how, basis(name, otherwise=MODELLED))

    # Without warmstart the node pulls as its OS does by itself (Auto Mode: in parallel on GPU instances).
    unconfigured = config.image_preload.model_copy(update={"parallel_pull": False})
    engine = (
        Phase(
            "engine",
            settings.engine_eager_seconds,
            "KV-cache profiling, warm-up (eager: no CUDA graphs)",
            basis("engine_eager_seconds"),
        )
        if model.enforce_eager
        else Phase(
            "engine", settings.engine_seconds, "KV-cache profiling, warm-up, CUDA graphs", basis("engine_seconds")
        )
    )
    ready = Phase("ready", ready_seconds(), f"probe every {PROBE_PERIOD_SECONDS} s", MODELLED)
    # The published node times are of 1-GPU G instances; an 8-GPU P instance (EFA, NVSwitch) takes at least as long.
    large = instance.gpu_count >= LARGE_NODE_GPUS
    node = Phase(
        "node",
        settings.node_ready_seconds,
        "launch, boot, join" + (" (a lower bound: no published figure for 8-GPU nodes)" if large else ""),
        basis("node_ready_seconds", otherwise=MODELLED if large else PUBLISHED),
    )

    deep_gemm = jit_compiles_deep_gemm(model, instance)

    def kernels(cached: bool) -> Phase:
        if not deep_gemm:
            return Phase("kernels", 0.0, "no DeepGEMM kernels (not an FP8 model on Hopper or Blackwell)", MODELLED)
        if cached:
            return Phase("kernels", 0.0, "DeepGEMM's kernels in the compile cache", MODELLED)
        how = "DeepGEMM JIT-compiles the FP8 kernels (no cache on the node)"
        return Phase("kernels", settings.deep_gemm_jit_seconds, how, basis("deep_gemm_jit_seconds"))

    # A restored or local startup plan (warmstart turns it on) spares a start its memory profiling.
    if startup_plan_setting(model, compile_cache=plan.compile_cache) not in (None, "0"):
        saved = min(settings.profiling_seconds, engine.seconds)
        planned_engine = Phase(
            "engine", engine.seconds - saved, f"{engine.how}, less memory profiling (vLLM's startup plan)", MODELLED
        )
    else:
        planned_engine = engine

    def compiled(cached: bool, how: str) -> Phase:
        if model.enforce_eager:
            return Phase("compile", 0.0, "enforce_eager: no torch.compile", MODELLED)
        source = basis("compile_cached_seconds", otherwise=measured) if cached else measured
        return Phase("compile", compile_seconds(model, settings, cached=cached), how, source)

    weights_cold, how_cold = baseline_weights_seconds(size, instance, settings, nodes)
    cold = StartEstimateCase(
        CASES[0],
        (
            node,
            pulled(node_os.pulls_in_parallel(unconfigured, instance.instance_type)),
            Phase("restore", 0.0, "no compile cache", MODELLED),
            Phase("weights", weights_cold, how_cold, MODELLED),
            compiled(False, "compiled from nothing"),
            kernels(False),
            engine,
            ready,
        ),
    )

    streamed, how_streamed = streamed_weights_seconds(
        size, instance, settings, clients=plan.concurrency, processes=processes
    )
    if config.image_preload.strategy.boots_with_images:
        image_new = Phase("image", settings.image_present_seconds, "on the node's data volume (image snapshot)")
    else:  # a prepull DaemonSet pulls on a new node at the same time as the pod: no gain for its first pod
        image_new = pulled(node_os.pulls_in_parallel(config.image_preload, instance.instance_type))
    compile_cache = plan.compile_cache
    new = StartEstimateCase(
        CASES[1],
        (
            node,
            image_new,
            Phase("restore", settings.restore_seconds, "compile cache from S3")
            if compile_cache
            else Phase("restore", 0.0, "compile cache off", MODELLED),
            Phase("weights", streamed, how_streamed, basis("streamer_client_gbit_per_s", otherwise=MODELLED)),
            compiled(compile_cache, "restored cache" if compile_cache else "compiled from nothing"),
            kernels(compile_cache),
            planned_engine,
            ready,
        ),
    )

    if plan.weights_cache:
        weights_warm, how_warm = node_copy_weights_seconds(
            size, instance, settings, readers=plan.concurrency, processes=processes
        )
    else:
        weights_warm, how_warm = streamed, how_streamed
    warm = StartEstimateCase(
        CASES[2],
        (
            Phase("node", 0.0, "already running", MODELLED),
            Phase("image", settings.image_present_seconds, "present (the node ran the model)"),
            Phase("restore", 0.0, "on the node", MODELLED),
            Phase(
                "weights",
                weights_warm,
                how_warm,
                basis(
                    "local_reader_gb_per_s" if plan.weights_cache else "streamer_client_gbit_per_s", otherwise=MODELLED
                ),
            ),
            compiled(True, "cache on the node"),
            kernels(compile_cache),
            planned_engine,
            ready,
        ),
    )
    return ModelEstimate(model.name, instance.instance_type, nodes, (cold, new, warm))


def estimate_environment(
    config: EnvironmentConfig, catalog: Catalog, *, nodes: int | None = None
) -> list[ModelEstimate]:
    return [estimate_model(model, config, catalog, nodes=nodes) for model in config.models]


def physical_floor(model: ModelSpec, config: EnvironmentConfig, catalog: Catalog) -> StartEstimateCase:
    """What a new node's first pod cannot beat on its instance type: the node's launch (the published figure), the
    image and the weights at the instance's own network rate (the weights at the slower of the network and the
    NVMe array), the restore, a cached compile and the engine's start. The estimate's new-node case sits above it
    by the software's rates (pulls, streams); this is the number warmstart is trying to reach."""
    settings = config.estimate
    instance = estimate_instance(model, config, catalog)
    network = network_gb_per_s(instance)
    image_gb = model.image_size_gb or settings.image_size_gb
    disk = instance.nvme_read_gb_per_s or settings.nvme_gb_per_s
    engine = settings.engine_eager_seconds if model.enforce_eager else settings.engine_seconds
    return StartEstimateCase(
        "physical floor",
        (
            Phase("node", settings.node_ready_seconds, "launch, boot, join"),
            Phase("image", image_gb / network, f"at the network's {network:.2f} GB/s", MODELLED),
            Phase("restore", settings.restore_seconds, "compile cache from S3"),
            Phase("weights", model.size_gb / min(network, disk), f"at {min(network, disk):.2f} GB/s", MODELLED),
            Phase("compile", 0.0 if model.enforce_eager else settings.compile_cached_seconds, "cached"),
            Phase("kernels", 0.0, "cached", MODELLED),
            Phase("engine", engine, "vLLM's engine start"),
            Phase("ready", ready_seconds(), "probe", MODELLED),
        ),
    )
