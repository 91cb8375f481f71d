"""Synth time for 1, 10 and 100 models (prod's first model, renamed; one stack per model), in the same run
(after one untimed synth that starts the jsii process; median of 3).

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
    rows = []
    for count in COUNTS:
        config = many_models(count)
        runs = [report.timed(lambda: synthesize(config, Path(tempfile.mkdtemp()), f"{count}")) for _ in range(RUNS)]
        sizes = [p.stat().st_size for p in runs[0][1].template_paths()]
        rows.append(
            {
                "models": count,
                "seconds": report.median([r[0] for r in runs]),
                "stacks": len(sizes),
                "largest_template_kb": max(sizes) / 1000,
            }
        )
    per_model_low = (rows[1]["seconds"] - rows[0]["seconds"]) / (COUNTS[1] - COUNTS[0])
    per_model_high = (rows[2]["seconds"] - rows[1]["seconds"]) / (COUNTS[2] - COUNTS[1])
    print(report.table(rows, ["models", "seconds", "stacks", "largest_template_kb"]))
    print(
        f"seconds per extra model: {per_model_low:.3f} (1 -> 10), {per_model_high:.3f} (10 -> 100); "
        f"ratio {per_model_high / per_model_low:.2f} (1.0 = linear)"
    )
    figures = {"rows": rows, "seconds_per_model_1_to_10": per_model_low, "seconds_per_model_10_to_100": per_model_high}
    print("wrote", report.write("synth_scale", figures))


if __name__ == "__main__":
    main()
