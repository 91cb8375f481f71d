"""`plan --estimate --calibrate <records>`: measured beats estimated. The node agents' start records (what
`warmstart status --starts` shows; `kubectl get configmaps -n warmstart-system -l
app.kubernetes.io/component=start-timelines -o json`, or `status --starts --json`) give each phase as this cluster
runs it; from them the instance-specific settings are fitted (the median of the starts that measure each), and the
estimate is shown beside the measurements, phase by phase."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.start_record import StartTimeline
from warmstart.catalog import Catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import MeasuredCompile, StartEstimate
from warmstart.estimate import BITS_PER_BYTE, CASES, PHASES, ModelEstimate, estimate_instance, estimate_model
from warmstart.workload import plan_model
from warmstart_cli.status import read_starts, strict_json

# A phase shorter than this measures nothing a rate can be fitted from (clock resolution, a cached read).
MIN_SECONDS = 0.1
# The file a calibration reads, at most: the starts ConfigMaps of 64 nodes at the API server's 1 MiB each, far
# more starts than a median needs. A larger file (nodes write the records) is refused before it is read.
MAX_RECORDS_BYTES = 64 * 2**20


class RecordsError(ValueError):
    """A records file that cannot be read as start records."""


def read_records(path: Path) -> list[StartTimeline]:
    """Start records from a ConfigMap list (kubectl's JSON) or a JSON list of records; others are skipped."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_RECORDS_BYTES + 1)
    except OSError as error:
        raise RecordsError(f"{path}: not a JSON file of start records ({error})") from None
    if len(data) > MAX_RECORDS_BYTES:  # before decoding: the cut may split a character
        raise RecordsError(
            f"{path}: larger than {MAX_RECORDS_BYTES // 2**20} MiB; calibrate from fewer nodes' starts "
            "(kubectl get configmap <node's starts ConfigMap> -o json, or one environment's nodes)"
        )
    try:
        text = data.decode()
    except ValueError as error:
        raise RecordsError(f"{path}: not a JSON file of start records ({error})") from None
    document = strict_json(text)
    if document is None:
        raise RecordsError(f"{path}: not a JSON file of start records (not JSON, or NaN, Infinity, too deep)")
    if isinstance(document, dict):
        return read_starts(document)
    if isinstance(document, list):
        return [t for t in (StartTimeline.from_dict(d) for d in document) if t is not None]
    raise RecordsError(f"{path}: expected a ConfigMap list or a list of start records")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _node_seconds(timeline: StartTimeline) -> float:
    """The node's launch and the pod's scheduling onto it: the estimate's node phase."""
    return (timeline.phases.get("node") or 0) + (timeline.phases.get("scheduling") or 0)


def case_of(timeline: StartTimeline) -> str:
    """Which of the estimate's cases a recorded start is (a warmstart cluster has no cold, warmstart-less start)."""
    return CASES[1] if timeline.new_node else CASES[2]


@dataclass(frozen=True)
class Calibration:
    settings: dict[str, float]  # estimate settings fitted from the records
    compile_seconds: dict[str, MeasuredCompile]  # per model, where both a miss and a hit were measured
    starts: int  # ready starts used


def calibrate(config: EnvironmentConfig, catalog: Catalog, timelines: list[StartTimeline]) -> Calibration:
    names = {m.name: m for m in config.models}
    ready = [t for t in timelines if t.outcome == "ready" and t.model in names]

    def measured(phase: str, keep=lambda t: True) -> list[float]:
        """The phase's values, each long enough to measure something (a shorter one is a clock's resolution)."""
        return [
            value
            for t in ready
            if keep(t) and isinstance(value := t.phases.get(phase), (int, float)) and value >= MIN_SECONDS
        ]

    fitted: dict[str, float] = {}
    node = _median([_node_seconds(t) for t in ready if t.new_node and t.phases.get("node")])
    if node is not None:
        fitted["node_ready_seconds"] = round(node, 1)
    engine = _median(measured("engine"))
    if engine is not None:
        fitted["engine_seconds"] = round(engine, 1)
    cached = _median(measured("compile", lambda t: t.compile_cache == "hit"))
    if cached is not None:
        fitted["compile_cached_seconds"] = round(cached, 1)
    fitted.update(_pull_rates(config, catalog, ready, names))
    fitted.update(_stream_rates(config, catalog, ready, names))
    compiles = {}
    for name in names:
        miss = _median(measured("compile", lambda t, n=name: t.model == n and t.compile_cache == "miss"))
        hit = _median(measured("compile", lambda t, n=name: t.model == n and t.compile_cache == "hit"))
        if miss and hit:
            compiles[name] = MeasuredCompile(cold=round(miss, 1), cached=round(hit, 1))
    return Calibration(fitted, compiles, len(ready))


def _pull_rates(config, catalog, ready, names) -> dict[str, float]:
    """MB/s of the pulls (image size over the image phase), as parallel or plain pulls of this node OS."""
    settings = config.estimate
    rates: dict[str, list[float]] = {"parallel_pull_mb_per_s": [], "plain_pull_mb_per_s": []}
    for t in ready:
        seconds = t.phases.get("image")
        if t.image != "pulled" or not seconds or seconds < MIN_SECONDS:
            continue
        model = names[t.model]
        instance = estimate_instance(model, config, catalog)
        parallel = config.compute.node_os.pulls_in_parallel(config.image_preload, instance.instance_type)
        size = model.image_size_gb or settings.image_size_gb
        rates["parallel_pull_mb_per_s" if parallel else "plain_pull_mb_per_s"].append(size * 1000 / seconds)
    return {name: round(statistics.median(values), 1) for name, values in rates.items() if values}


def _stream_rates(config, catalog, ready, names) -> dict[str, float]:
    """A streamer client's rate from the starts that streamed from S3 (where the clients, not the network, bound
    the stream), and a local reader's from those that read the node copy."""
    client: list[float] = []
    reader: list[float] = []
    for t in ready:
        seconds = t.phases.get("weights")
        if not seconds or seconds < MIN_SECONDS:
            continue
        model = names[t.model]
        plan = plan_model(model, config, catalog)
        processes = plan.tensor_parallel_size if plan.distributed else 1
        rate = model.size_gb / seconds
        if t.weights_source == "s3":
            network = estimate_instance(model, config, catalog).network_gbit_per_s / BITS_PER_BYTE
            if rate < 0.9 * network:
                client.append(rate * BITS_PER_BYTE / (plan.concurrency * processes))
        elif t.weights_source == "node":
            reader.append(rate / (plan.concurrency * processes))
    fitted = {}
    if client:
        fitted["streamer_client_gbit_per_s"] = round(statistics.median(client), 3)
    if reader:
        fitted["local_reader_gb_per_s"] = round(statistics.median(reader), 3)
    return fitted


def calibrated_config(config: EnvironmentConfig, calibration: Calibration) -> EnvironmentConfig:
    """The config with the fitted settings, validated as the file would be (a value the model refuses is left
    out, never used)."""
    current = config.estimate.model_dump()
    kept = {}
    for name, value in calibration.settings.items():
        try:
            StartEstimate.model_validate({**current, name: value})
        except ValueError:
            continue
        kept[name] = value
    measured = sorted({*config.estimate.measured, *kept})
    estimate = StartEstimate.model_validate({**current, **kept, "measured": measured})
    models = [
        m.model_copy(update={"compile_seconds": calibration.compile_seconds[m.name]})
        if m.name in calibration.compile_seconds
        else m
        for m in config.models
    ]
    return config.model_copy(update={"estimate": estimate, "models": models})


def measured_phases(timelines: list[StartTimeline], model: str, case: str) -> dict[str, float | None]:
    """The median of each phase over a model's ready starts of one case (the record's `other` is read as
    `ready`: what is left after the engine, probes included)."""
    mine = [t for t in timelines if t.model == model and t.outcome == "ready" and case_of(t) == case]
    names = {"ready": "other"}
    result: dict[str, float | None] = {}
    for phase in PHASES:
        values = [t.phases.get(names.get(phase, phase)) for t in mine]
        numbers = [v for v in values if isinstance(v, (int, float))]
        if phase == "node":
            numbers = [_node_seconds(t) for t in mine]
        result[phase] = _median(numbers)
    result["total"] = _median([t.total for t in mine if t.total is not None])
    return result


def render_calibration(
    config: EnvironmentConfig, catalog: Catalog, calibration: Calibration, timelines: list[StartTimeline]
) -> str:
    fitted = calibrated_config(config, calibration)
    lines = [f"calibrated from {calibration.starts} ready start(s): estimate (fitted) against measured, seconds"]
    for model in fitted.models:
        estimate: ModelEstimate = estimate_model(model, fitted, catalog)
        for case in CASES[1:]:
            measured = measured_phases(timelines, model.name, case)
            if measured["total"] is None:
                continue
            lines.append(f"model {model.name}, {case}")
            start = estimate.case(case)
            rows: list[tuple[str, ...]] = [("", *PHASES, "total")]
            rows.append(("estimate", *(f"{start.seconds(p):.0f}" for p in PHASES), f"{start.total_seconds:.0f}"))
            rows.append(("measured", *(_cell(measured[p]) for p in PHASES), _cell(measured["total"])))
            widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
            lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.append("")
    lines.append("to keep them, add to the environment's file:")
    lines.append(_yaml_snippet(calibration))
    return "\n".join(lines)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _yaml_snippet(calibration: Calibration) -> str:
    document: dict[str, Any] = {}
    if calibration.settings:
        document["estimate"] = dict(sorted(calibration.settings.items()))
    lines = []
    for key, values in document.items():
        lines.append(f"{key}:")
        lines += [f"  {name}: {value:g}" for name, value in values.items()]
    for name, measured in calibration.compile_seconds.items():
        lines.append(
            f"# models[name={name}]: compile_seconds: {{cold: {measured.cold:g}, cached: {measured.cached:g}}}"
        )
    return "\n".join(lines) or "(no phase was measured)"
