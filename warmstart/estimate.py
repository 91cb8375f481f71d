"""`warmstart plan --estimate`: each model's pod start, phase by phase, in three cases, before anything is deployed.

- cold node, no warmstart: a new GPU node, the weights downloaded through the NAT gateway to the node's disk and
  loaded from its root volume (no streamer), the image pulled, torch.compile from nothing;
- new node, warmstart: a new GPU node, the weights streamed straight to the GPUs through the S3 gateway endpoint,
  the compile cache restored, the image from the image snapshot where the environment builds one;
- warm node: a node that already ran the model: image present, the weights from the node copy (when the weights
  cache is on, else streamed from S3), the compile cache on the node.

Pure functions of the config, its `estimate` settings and the GPU catalog; docs/estimate.md gives the origin of
every default and the published figures they are calibrated against (tests/unit/test_estimate.py holds them).
"""

from __future__ import annotations

from dataclasses import dataclass

from warmstart.catalog import Catalog, GpuInstance
from warmstart.config import EnvironmentConfig, ModelSpec, StartEstimate
from warmstart.workload import plan_model

PHASES = ("node", "image", "restore", "weights", "compile", "engine", "ready")
CASES = ("cold node, no warmstart", "new node, warmstart", "warm node")
BITS_PER_BYTE = 8


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    how: str  # the path and the rate behind the figure, for the table


@dataclass(frozen=True)
class StartEstimateCase:
    case: str
    phases: tuple[Phase, ...]

    @property
    def total_seconds(self) -> float:
        return sum(phase.seconds for phase in self.phases)

    def seconds(self, name: str) -> float:
        return next(phase.seconds for phase in self.phases if phase.name == name)


@dataclass(frozen=True)
class ModelEstimate:
    model: str
    instance_type: str
    nodes: int
    cases: tuple[StartEstimateCase, ...]

    def case(self, name: str) -> StartEstimateCase:
        return next(case for case in self.cases if case.case == name)


# ---- one phase each: pure, unit-tested ----


def compile_seconds(model: ModelSpec, settings: StartEstimate, *, cached: bool) -> float:
    """torch.compile: the model's measured times when the config has them, else the size-based defaults."""
    if model.compile_seconds is not None:
        return model.compile_seconds.cached if cached else model.compile_seconds.cold
    if cached:
        return settings.compile_cached_seconds
    return settings.compile_cold_base_seconds + settings.compile_cold_seconds_per_gb * model.size_gb


def image_pull_seconds(model: ModelSpec, settings: StartEstimate, *, parallel_pull: bool) -> float:
    size = model.image_size_gb or settings.image_size_gb
    speedup = settings.parallel_pull_speedup if parallel_pull else 1.0
    return size * settings.image_pull_seconds_per_gb / speedup


def nat_share_gb_per_s(settings: StartEstimate, nodes: int) -> float:
    """Each new node's share of the NAT gateway when `nodes` download at once."""
    return settings.nat_gbit_per_s / BITS_PER_BYTE / nodes


def network_gb_per_s(instance: GpuInstance) -> float:
    return instance.network_gbit_per_s / BITS_PER_BYTE


def baseline_weights_seconds(
    size_gb: float, instance: GpuInstance, settings: StartEstimate, nodes: int
) -> tuple[float, str]:
    """Without warmstart: download through the NAT (shared by the nodes scaling out) to disk, then load."""
    rate = min(settings.download_gb_per_s, network_gb_per_s(instance), nat_share_gb_per_s(settings, nodes))
    seconds = size_gb / rate + size_gb / settings.root_volume_gb_per_s
    return seconds, f"NAT {rate:.2f} GB/s then disk {settings.root_volume_gb_per_s:g} GB/s"


def streamed_weights_seconds(
    size_gb: float, instance: GpuInstance, settings: StartEstimate, *, concurrency: int, processes: int
) -> tuple[float, str]:
    """The Run:ai streamer through the S3 gateway endpoint: no NAT, each process with its own streams."""
    rate = min(network_gb_per_s(instance), settings.s3_stream_gb_per_s * concurrency * processes)
    return size_gb / rate, f"streamer via gateway {rate:.2f} GB/s"


def node_copy_weights_seconds(size_gb: float, instance: GpuInstance, settings: StartEstimate) -> tuple[float, str]:
    rate = instance.nvme_read_gb_per_s or settings.nvme_gb_per_s
    return size_gb / rate, f"node copy on NVMe {rate:g} GB/s"


# ---- the three cases ----


def estimate_model(
    model: ModelSpec, config: EnvironmentConfig, catalog: Catalog, *, nodes: int | None = None
) -> ModelEstimate:
    settings = config.estimate
    nodes = nodes or settings.scale_out_nodes
    plan = plan_model(model, config, catalog)
    # The largest candidate: what a scale-out usually gets for a model that needs the GPUs.
    instance = max(
        (catalog.instance(name) for name in model.instance_types or config.compute.gpu_pool.instance_types),
        key=lambda candidate: (candidate.gpu_count, candidate.network_gbit_per_s),
    )
    size = model.size_gb
    processes = plan.tensor_parallel if plan.distributed else 1
    compile_cache = plan.compile_cache
    eager = model.enforce_eager
    pull = image_pull_seconds(model, settings, parallel_pull=config.image_preload.parallel_pull)
    plain_pull = image_pull_seconds(model, settings, parallel_pull=False)
    engine = Phase("engine", settings.engine_init_seconds, "KV-cache profiling, CUDA graphs")
    ready = Phase("ready", settings.ready_seconds, "readiness probe")

    def compiled(cached: bool, how: str) -> Phase:
        if eager:
            return Phase("compile", 0.0, "enforce_eager: no torch.compile")
        return Phase("compile", compile_seconds(model, settings, cached=cached), how)

    weights_cold, how_cold = baseline_weights_seconds(size, instance, settings, nodes)
    cold = StartEstimateCase(
        CASES[0],
        (
            Phase("node", settings.node_ready_seconds, "launch, boot, join"),
            Phase("image", plain_pull, "pulled from the registry"),
            Phase("restore", 0.0, "no compile cache"),
            Phase("weights", weights_cold, how_cold),
            compiled(False, "compiled from nothing"),
            engine,
            ready,
        ),
    )

    streamed, how_streamed = streamed_weights_seconds(
        size, instance, settings, concurrency=plan.concurrency, processes=processes
    )
    if config.image_preload.strategy.boots_with_images:
        image_new = Phase("image", settings.image_present_seconds, "on the node's data volume (image snapshot)")
    else:  # a pre-pull DaemonSet pulls on a new node at the same time as the pod: no gain for its first pod
        image_new = Phase(
            "image", pull, "pulled" + (" (SOCI parallel pull)" if config.image_preload.parallel_pull else "")
        )
    new = StartEstimateCase(
        CASES[1],
        (
            Phase("node", settings.node_ready_seconds, "launch, boot, join"),
            image_new,
            Phase("restore", settings.restore_seconds, "compile cache from S3")
            if compile_cache
            else Phase("restore", 0.0, "compile cache off"),
            Phase("weights", streamed, how_streamed),
            compiled(compile_cache, "restored cache" if compile_cache else "compiled from nothing"),
            engine,
            ready,
        ),
    )

    if plan.weights_cache:
        weights_warm, how_warm = node_copy_weights_seconds(size, instance, settings)
    else:
        weights_warm, how_warm = streamed, how_streamed
    warm = StartEstimateCase(
        CASES[2],
        (
            Phase("node", 0.0, "already running"),
            Phase("image", settings.image_present_seconds, "present (the node ran the model)"),
            Phase("restore", 0.0, "on the node"),
            Phase("weights", weights_warm, how_warm),
            compiled(True, "cache on the node"),
            engine,
            ready,
        ),
    )
    return ModelEstimate(model.name, instance.instance_type, nodes, (cold, new, warm))


def estimate_environment(
    config: EnvironmentConfig, catalog: Catalog, *, nodes: int | None = None
) -> list[ModelEstimate]:
    return [estimate_model(model, config, catalog, nodes=nodes) for model in config.models]


# ---- output ----


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def render_estimates(estimates: list[ModelEstimate]) -> str:
    lines = []
    for estimate in estimates:
        lines.append(
            f"model {estimate.model} on {estimate.instance_type}, {estimate.nodes} node(s) scaling out at once"
        )
        header: tuple[str, ...] = ("case", *PHASES, "total")
        rows: list[tuple[str, ...]] = [header]
        for case in estimate.cases:
            rows.append((case.case, *(f"{case.seconds(p):.0f}" for p in PHASES), _minutes(case.total_seconds)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines += [
            "  "
            + "  ".join(
                cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
            )
            for row in rows
        ]
        cold, new, warm = (case.total_seconds for case in estimate.cases)
        lines.append(f"  new node with warmstart: {cold / new:.1f}x faster than without; warm node {cold / warm:.1f}x")
        how = {p.name: p.how for p in estimate.cases[1].phases if p.seconds}
        lines.append("  new node paths: " + "; ".join(f"{name}: {text}" for name, text in how.items()))
        lines.append("")
    return "\n".join(lines)
