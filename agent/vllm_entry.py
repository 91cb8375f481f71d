"""Entry script of the vLLM container (standard library only; runs in the serving image).

Chooses where the weights come from, then execs the vLLM command unchanged otherwise:
the node-local copy when the warmstart agent's pointer for this model is fresh, names this S3 source,
and its folder is marked complete; the S3 URI in every other case (no pointer, stale, another source).
Usage: python3 vllm_entry.py <command...> --model=s3://... --served-model-name=<name> ...
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def choose_model(args: list[str], weights_root: Path, max_age_seconds: float, now: float) -> tuple[list[str], str]:
    model_arg = next((a for a in args if a.startswith("--model=")), None)
    name_arg = next((a for a in args if a.startswith("--served-model-name=")), None)
    if model_arg is None or name_arg is None:
        return args, "no --model/--served-model-name: arguments unchanged"
    s3_uri, name = model_arg.split("=", 1)[1], name_arg.split("=", 1)[1]
    try:
        pointer = json.loads((weights_root / ".warmstart" / "current" / name).read_text())
    except (OSError, ValueError):
        return args, f"no local copy of {name}: streaming from {s3_uri}"
    key = str(pointer.get("key", ""))
    local = weights_root / name / key
    if pointer.get("s3_uri") != s3_uri:
        return args, f"local copy of {name} is of {pointer.get('s3_uri')}, not {s3_uri}: streaming from S3"
    if now - float(pointer.get("checked_at", 0)) > max_age_seconds:
        return args, f"local copy of {name} not confirmed against S3 for {max_age_seconds:.0f}s: streaming from S3"
    if not key or "/" in key or not (weights_root / name / f"{key}.complete").exists() or not local.is_dir():
        return args, f"local copy of {name} is incomplete: streaming from {s3_uri}"
    chosen = [f"--model={local}" if a == model_arg else a for a in args]
    return chosen, f"using the node-local copy {local} of {s3_uri}"


def main() -> None:
    command = sys.argv[1:]
    root = Path(os.environ.get("WARMSTART_WEIGHTS_ROOT", "/warmstart-weights"))
    max_age = float(os.environ.get("WARMSTART_WEIGHTS_MAX_AGE", "90"))
    chosen, reason = choose_model(command, root, max_age, time.time())
    print(f"warmstart: {reason}", flush=True)
    os.execvp(chosen[0], chosen)


if __name__ == "__main__":
    main()
