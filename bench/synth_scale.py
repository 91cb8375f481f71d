"""Synth time for 1, 10 and 100 models (prod's first model, renamed; one stack per model), in the same run
(after one untimed synth that starts the jsii process; 3 rounds, each count once per round: median, min, max).

Reports seconds per extra model between 10 and 100 and between 1 and 10: synth should grow linearly.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import report  # noqa: E402
from tests.scale_config import many_models  # noqa: E402
from tests.synth import synthesize  # noqa: E402

COUNTS = (1, 10, 100)
RUNS = 3


def main() -> None:
    synthesize(many_models(1), Path(tempfile.mkdtemp()), "warm-up")  # the jsii process starts once per run
    configs = {count: many_models(count) for count in COUNTS}
    seconds: dict[int, list[float]] = {count: [] for count in COUNTS}
    sizes: dict[int, list[int]] = {}
    load_before = report.machine_load()
    for _ in range(RUNS):  # round by round (1, 10, 100, 1, 10, 100 ...): a slow spell hits every count alike
        for count in COUNTS:
            took, assembly = report.timed(lambda: synthesize(configs[count], Path(tempfile.mkdtemp()), f"{count}"))
            seconds[count].append(took)
            sizes[count] = [p.stat().st_size for p in assembly.template_paths()]
    load_after = report.machine_load()
    rows = [
        {
            "models": count,
            "seconds": report.median(seconds[count]),
            "min": min(seconds[count]),
            "max": max(seconds[count]),
            "stacks": len(sizes[count]),
            "largest_template_kb": max(sizes[count]) / 1000,
        }
        for count in COUNTS
    ]
    low, middle, high = COUNTS
    per_model_low = [(b - a) / (middle - low) for a, b in zip(seconds[low], seconds[middle], strict=True)]
    per_model_high = [(c - b) / (high - middle) for b, c in zip(seconds[middle], seconds[high], strict=True)]
    linearity = report.paired_ratio(per_model_high, per_model_low)
    print(f"synth of {', '.join(map(str, COUNTS))} models, {RUNS} rounds")
    print(report.table(rows, ["models", "seconds", "min", "max", "stacks", "largest_template_kb"]))
    print(
        f"seconds per extra model: {report.median(per_model_low):.3f} ({low} -> {middle}), "
        f"{report.median(per_model_high):.3f} ({middle} -> {high})"
    )
    print(report.said(f"per extra model, {middle} -> {high} over {low} -> {middle} (1.0 = linear)", linearity))
    print(f"load before {load_before['load_1m']:.2f}, after {load_after['load_1m']:.2f}")
    figures = {
        "rows": rows,
        "seconds": {str(count): values for count, values in seconds.items()},
        "seconds_per_model_1_to_10": report.median(per_model_low),
        "seconds_per_model_10_to_100": report.median(per_model_high),
        "linearity": linearity,
        "load_before": load_before,
        "load_after": load_after,
    }
    print("wrote", report.write("synth_scale", figures))


if __name__ == "__main__":
    main()
