"""`warmstart status`: per model, how many GPU nodes are targeted and how many are ready, for the weights
cache, the compile cache and the prepulled image (as HyperPod reports TARGET / READY), from API objects; with
`--starts`, the last pod starts per model, phase by phase, as the node agents published them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from contracts.agent_settings import AGENT_NAMESPACE, COMPILE_USE_LABEL_DOMAIN, NODE_LABEL_DOMAIN, WEIGHTS_LABEL_DOMAIN
from contracts.pod_labels import GPU_POOL_LABEL
from contracts.start_record import STARTS_KEY, TIMELINE_PHASES, StartTimeline
from warmstart.autoscaling import METRICS
from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.quantity import parse_quantity
from warmstart.terminal_text import shown
from warmstart.workload import plan_model, prepull_daemonset_name

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
COMPILE_READY = {"restored", "present", "published"}
# The API paths the status needs (read with the user's kubeconfig).
NODES_PATH = "/api/v1/nodes"
DAEMON_SETS_PATH = f"/apis/apps/v1/namespaces/{AGENT_NAMESPACE}/daemonsets"
HPAS_PATH = "/apis/autoscaling/v2/horizontalpodautoscalers"


@dataclass(frozen=True)
class CacheCount:
    state: str  # off | no-nodes | ready | warming | cold
    target: int = 0
    ready: int = 0
    refused: int = 0  # weights: nodes without instance store, where the agent does not fill

    def __str__(self) -> str:
        text = self.state if self.state == "off" else f"{self.state} {self.ready}/{self.target}"
        return text + (f" ({self.refused} no-nvme)" if self.refused else "")


@dataclass(frozen=True)
class CompileUse:
    """What vLLM did with the compile cache on each node's last observed pod start."""

    hits: int = 0
    misses: int = 0

    def __str__(self) -> str:
        return f"{self.hits} hit, {self.misses} miss" if self.hits + self.misses else "none yet"


@dataclass(frozen=True)
class Replicas:
    """An autoscaled model's replicas (current/desired) and its metric (per pod, against the target)."""

    autoscaled: bool
    fixed: int = 0
    current: int | None = None
    desired: int | None = None
    metric: str | None = None  # e.g. "waiting 6.5/5"

    def __str__(self) -> str:
        if not self.autoscaled:
            return f"{self.fixed} fixed"
        if self.current is None:
            return "no autoscaler yet"
        return f"{self.current}/{self.desired}" + (f" ({self.metric})" if self.metric else "")


def _quantity(text: str) -> float:
    """A Kubernetes quantity as the autoscaler writes it: "6500m" -> 6.5, "5" -> 5, "2k" -> 2000."""
    value = parse_quantity(text)
    if value is None:
        raise ValueError(f"{text!r} is no Kubernetes quantity")
    return float(value)


def autoscaler_status(model, hpas: dict) -> Replicas:
    if model.autoscaling is None:
        return Replicas(autoscaled=False, fixed=model.replicas)
    hpa = next(
        (
            h
            for h in hpas.get("items", [])
            if h["metadata"].get("namespace") == model.name and h["metadata"].get("name") == "vllm"
        ),
        None,
    )
    if hpa is None:
        return Replicas(autoscaled=True)
    status = hpa.get("status", {})
    metric = None
    # KEDA's HPA reads an External metric (the sum over the pods, an AverageValue target); one deployed before
    # KEDA took it over reads the Pods metric prometheus-adapter served. Either way: the value per pod.
    for current in status.get("currentMetrics") or []:
        kind = current.get("type", "").lower()
        reading = current.get(kind) or {}
        spec = next((m.get(kind) for m in hpa["spec"].get("metrics", []) if m.get("type", "").lower() == kind), None)
        if kind in ("external", "pods") and spec and "averageValue" in reading.get("current", {}):
            name = METRICS[model.autoscaling.metric].removeprefix("vllm:")
            value, target = (
                _quantity(reading["current"]["averageValue"]),
                _quantity(str(spec["target"]["averageValue"])),
            )
            metric = f"{name} {value:g}/{target:g} per pod"
    return Replicas(
        True, current=status.get("currentReplicas", 0), desired=status.get("desiredReplicas", 0), metric=metric
    )


def _count(target: int, ready: int, refused: int = 0) -> CacheCount:
    if target == 0:
        return CacheCount("no-nodes", 0, 0)
    return CacheCount("ready" if ready >= target else ("warming" if ready else "cold"), target, ready, refused)


def model_status(
    config: EnvironmentConfig, catalog: Catalog, nodes: dict, daemon_sets: dict, hpas: dict | None = None
) -> dict[str, dict[str, CacheCount | CompileUse | Replicas]]:
    gpu_nodes = [
        n for n in nodes.get("items", []) if n["metadata"].get("labels", {}).get(GPU_POOL_LABEL[0]) == GPU_POOL_LABEL[1]
    ]
    by_name = {d["metadata"]["name"]: d for d in daemon_sets.get("items", [])}
    result: dict[str, dict[str, CacheCount | CompileUse | Replicas]] = {}
    for model in config.models:
        plan = plan_model(model, config, catalog)
        types = set(model.instance_types or config.compute.gpu_pool.instance_types)
        targets = [n for n in gpu_nodes if n["metadata"]["labels"].get(INSTANCE_TYPE_LABEL) in types]

        def labelled(domain: str, accepted: set[str]) -> int:
            return sum(n["metadata"]["labels"].get(f"{domain}/{model.name}") in accepted for n in targets)

        weights = CacheCount("off")
        if plan.weights_cache:
            ready, refused = labelled(WEIGHTS_LABEL_DOMAIN, {"ready"}), labelled(WEIGHTS_LABEL_DOMAIN, {"no-nvme"})
            weights = _count(len(targets), ready, refused)
        compile_cache = (
            _count(len(targets), labelled(NODE_LABEL_DOMAIN, COMPILE_READY))
            if plan.compile_cache
            else CacheCount("off")
        )
        if not config.image_preload.strategy.prepulls:
            image = CacheCount("off")
        else:
            status = by_name.get(prepull_daemonset_name(model.image), {}).get("status", {})
            image = _count(status.get("desiredNumberScheduled", len(targets)), status.get("numberReady", 0))
        use = CompileUse(labelled(COMPILE_USE_LABEL_DOMAIN, {"hit"}), labelled(COMPILE_USE_LABEL_DOMAIN, {"miss"}))
        result[model.name] = {
            "weights": weights,
            "compile": compile_cache,
            "use": use,
            "image": image,
            "replicas": autoscaler_status(model, hpas or {}),
        }
    return result


def render_status(config: EnvironmentConfig, statuses: dict[str, dict[str, CacheCount | CompileUse | Replicas]]) -> str:
    rows: list[tuple[str, ...]] = [("MODEL", "WEIGHTS", "COMPILE CACHE", "LAST POD PER NODE", "IMAGE", "REPLICAS")]
    rows += [
        (name, *(str(s[column]) for column in ("weights", "compile", "use", "image", "replicas")))
        for name, s in statuses.items()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [f"environment {config.name}: READY/TARGET GPU nodes per cache"]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)).rstrip() for row in rows]
    return "\n".join(lines)


# ---- `warmstart status --starts` ----

PHASE_LETTERS = {
    "node": "N",
    "scheduling": "S",
    "image": "I",
    "restore": "R",
    "weights": "W",
    "compile": "C",
    "engine": "E",
    "other": ".",
}
BAR_WIDTH = 40


def read_starts(config_maps: dict) -> list[StartTimeline]:
    """Every node's published starts (records of another version skipped)."""
    timelines: list[StartTimeline] = []
    items = config_maps.get("items", []) if isinstance(config_maps, dict) else []
    for item in items if isinstance(items, list) else []:
        data = item.get("data") if isinstance(item, dict) else None
        text = data.get(STARTS_KEY, "[]") if isinstance(data, dict) else None
        if not isinstance(text, str):
            continue
        documents = strict_json(text)
        if isinstance(documents, list):
            timelines += [t for t in (StartTimeline.from_dict(d) for d in documents) if t is not None]
    return timelines


def strict_json(text: str) -> object:
    """JSON a node wrote (untrusted): None where it is not JSON, holds NaN or Infinity, or nests too deep."""

    def refuse(constant: str) -> object:
        raise ValueError(f"{constant} is not a number")

    try:
        return json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return None


def start_bar(timeline: StartTimeline, scale: float) -> str:
    """One character per `scale` seconds, a letter per phase: the slow phase is the long run of its letter."""
    cells = []
    for phase in TIMELINE_PHASES:
        seconds = timeline.phases.get(phase)
        if seconds:
            cells.append(PHASE_LETTERS[phase] * max(1, round(seconds / scale)))
    return "".join(cells)


def _missing(timeline: StartTimeline) -> str:
    return "missing " + ", ".join(timeline.missing) if timeline.missing else ""


def _cell(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.0f}"


def render_starts(config: EnvironmentConfig, timelines: list[StartTimeline], *, last: int = 5) -> str:
    lines = [f"environment {config.name}: the last {last} pod starts per model, seconds per phase"]
    legend = ", ".join(f"{letter} {phase}" for phase, letter in PHASE_LETTERS.items())
    known = [t for t in timelines if t.model in {m.name for m in config.models}]
    if not known:
        return "\n".join([*lines, "no pod start recorded yet (the node agents publish each start once it ends)"])
    longest = max((t.total or sum(v for v in t.phases.values() if v)) for t in known) or 1.0
    scale = longest / BAR_WIDTH
    header = ("STARTED (UTC)", "POD", "NODE", "OUTCOME", *(p.upper() for p in TIMELINE_PHASES), "TOTAL", "SOURCES")
    for model in config.models:
        mine = sorted((t for t in known if t.model == model.name), key=lambda t: t.created, reverse=True)[:last]
        if not mine:
            continue
        rows: list[tuple[str, ...]] = [header]
        bars: list[tuple[str, str]] = []
        for t in mine:
            sources = ", ".join(
                f"{name} {value}"
                for name, value in (
                    ("image", t.image),
                    ("restore", t.restore),
                    ("weights", t.weights_source),
                    ("compile", t.compile_cache),
                    ("load failure:", t.compile_load_failure),
                )
                if value
            )
            # The engine's other caches, grouped by what the start did with them (its fill is the news).
            for use in ("written", "loaded", "refused"):
                names = [name for name, word in t.engine_caches.items() if word == use]
                if names:
                    sources += f", {use} {'+'.join(names)}"
            rows.append(
                (
                    datetime.fromtimestamp(t.created, UTC).strftime("%m-%d %H:%M:%S"),
                    shown(t.pod),
                    "new" if t.new_node else "existing",
                    shown(t.outcome),
                    *(_cell(t.phases.get(p)) for p in TIMELINE_PHASES),
                    _cell(t.total),
                    shown("; ".join(part for part in (sources, _missing(t)) if part)),
                )
            )
            bars.append((shown(t.pod), start_bar(t, scale)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        lines.append(f"model {model.name}")
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]
        pod_width = max(len(pod) for pod, _ in bars)
        lines += [f"  {pod.ljust(pod_width)}  |{bar}" for pod, bar in bars]
        lines.append("")
    lines.append(f"bars: one character per {scale:.0f} s; {legend}")
    return "\n".join(lines)
