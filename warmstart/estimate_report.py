"""The estimate in words: a table per model, where each figure comes from, and advice: the phase that dominates a
start and the setting that would cut it, with the saving the estimate predicts for the changed config (only
settings the config's own checks accept are offered)."""

from __future__ import annotations

from dataclasses import dataclass

from warmstart.catalog import Catalog
from warmstart.checks.environment import check_environment
from warmstart.checks.fix import Edit, Fix, apply_fix
from warmstart.config.compute import KarpenterCompute
from warmstart.config.environment import EnvironmentConfig
from warmstart.estimate import CASES, MEASURED, PHASES, PUBLISHED, ModelEstimate, estimate_model
from warmstart.node_os import alias_for_kubernetes, snapshot_aliases

MARKS = {MEASURED: "*", PUBLISHED: "", "modelled": "~"}


@dataclass(frozen=True)
class Advice:
    case: str
    phase: str
    seconds: float
    setting: str  # the change, as the config writes it
    saving: float | None  # seconds the changed config saves on this case; None: no setting cuts it
    why: str = ""


def _candidates(config: EnvironmentConfig, phase: str, case: str) -> list[tuple[str, Fix]]:
    """Settings that can cut a phase, as edits of the config."""
    preload = config.image_preload
    karpenter = isinstance(config.compute, KarpenterCompute)
    found: list[tuple[str, Fix]] = []
    if phase == "image" and karpenter and not preload.strategy.boots_with_images:
        for alias in (alias_for_kubernetes(a, config.cluster.kubernetes_version) for a in snapshot_aliases()):
            found.append(
                (
                    f"compute.ami_alias: {alias} (or later) with image_preload.mode: snapshot",
                    Fix(
                        (
                            Edit("compute.ami_alias", alias),
                            Edit("image_preload.mode", "snapshot"),
                            Edit("image_preload.parallel_pull", False),
                        )
                    ),
                )
            )
        if not preload.parallel_pull:
            found.append(("image_preload.parallel_pull: true", Fix((Edit("image_preload.parallel_pull", True),))))
    if phase in ("compile", "kernels") and not config.caches.compile:
        found.append(("caches.compile: true", Fix((Edit("caches.compile", True),))))
    if phase == "weights" and case == CASES[2] and not config.caches.weights:
        found.append(("caches.weights: true", Fix((Edit("caches.weights", True),))))
    return found


def _changed(config: EnvironmentConfig, fix: Fix, catalog: Catalog) -> EnvironmentConfig | None:
    """The config with the change made, if its own checks accept it."""
    try:
        changed = EnvironmentConfig.model_validate(apply_fix(config.model_dump(mode="json", exclude_unset=True), fix))
    except ValueError:
        return None
    return None if check_environment(changed, catalog) else changed


WHY_NOT = {
    "node": "no setting shortens a node's launch; a warm node skips it (min_replicas, consolidate_after)",
    "engine": "vLLM's engine start (KV-cache profiling, CUDA graphs) is the same on every node; vLLM 0.34.0's "
    "startup plan, which warmstart turns on, spares a node its memory profiling once the compile cache holds it",
    "kernels": "DeepGEMM JIT-compiles an FP8 model's kernels on a node without them: warmstart's compile cache "
    "keeps them on the node and restores them on new ones",
    "weights": "bounded by the instance network and S3: instance types with more network bandwidth",
    "image": "pulled in parallel already, and no image snapshot is possible here (Auto Mode, or no OS release for "
    "this Kubernetes version)",
}


def advise(estimate: ModelEstimate, config: EnvironmentConfig, catalog: Catalog, case: str) -> Advice:
    """The dominant phase of a case and the accepted setting that cuts it most."""
    start = estimate.case(case)
    phase = start.dominant
    model = next(m for m in config.models if m.name == estimate.model)
    best: tuple[float, str] | None = None
    for words, fix in _candidates(config, phase.name, case):
        changed = _changed(config, fix, catalog)
        if changed is None:
            continue
        other = estimate_model(model, changed, catalog, nodes=estimate.nodes).case(case)
        saving = start.total_seconds - other.total_seconds
        if saving > 0 and (best is None or saving > best[0]):
            best = (saving, words)
    if best is None:
        return Advice(case, phase.name, phase.seconds, "", None, WHY_NOT.get(phase.name, "no setting cuts it"))
    return Advice(case, phase.name, phase.seconds, best[1], best[0])


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def _said(advice: Advice) -> str:
    head = f"{advice.case}: {advice.phase} dominates ({advice.seconds:.0f} s)"
    if advice.saving is None:
        return f"{head}; {advice.why}"
    return f"{head}; {advice.setting} would save {advice.saving:.0f} s"


def render_estimates(estimates: list[ModelEstimate], config: EnvironmentConfig, catalog: Catalog) -> str:
    lines = []
    for estimate in estimates:
        lines.append(
            f"model {estimate.model} on {estimate.instance_type}, {estimate.nodes} node(s) scaling out at once"
        )
        header: tuple[str, ...] = ("case", *PHASES, "total")
        rows: list[tuple[str, ...]] = [header]
        for case in estimate.cases:
            cells = (f"{p.seconds:.0f}{MARKS[p.basis]}" for p in (case.phase(name) for name in PHASES))
            rows.append((case.case, *cells, _minutes(case.total_seconds)))
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
        jit = estimate.cases[0].phase("kernels").seconds
        if jit:
            kept = estimate.cases[1].phase("kernels").seconds == 0
            keeps = "the compile cache keeps" if kept else "caches.compile: true would keep"
            lines.append(
                f"  kernels: an FP8 model on this GPU JIT-compiles DeepGEMM's kernels on a node that has none "
                f"({jit:.0f} s); {keeps} them on the node and restores them on new nodes"
            )
        for case_name in CASES[1:]:
            lines.append("  advice, " + _said(advise(estimate, config, catalog, case_name)))
        lines.append("")
    lines.append(
        "figures: plain = a published figure or limit (docs/estimate.md); ~ = modelled from published rates; "
        "* = measured in this cluster (compile_seconds, --calibrate)"
    )
    return "\n".join(lines)
