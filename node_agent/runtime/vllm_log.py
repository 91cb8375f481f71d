"""What a vLLM container's log says about its start, read read-only from the node's pod log files.

kubelet keeps each container's output at /var/log/pods/<namespace>_<pod>_<uid>/<container>/<restart>.log, one
CRI line per output line: `<RFC3339Nano time> <stdout|stderr> <P|F> <text>` (P: a piece of a longer line).
The messages are vLLM 0.21.0's (docs/upstream-facts.md, "Pod start timeline and metrics (issue 13)"); each
process prefixes its lines ("(EngineCore pid=187) INFO 05-20 14:03:11 [core.py:299] ..."), so the patterns are
searched, not anchored.
A line that is not there leaves its fact None: the timeline names it missing, never guesses.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

VLLM_LOG_FORMAT = "vllm 0.21.0"
# vLLM writes its start in the first few MB; a huge log (a crash loop's traces) is not read past this.
MAX_LOG_BYTES = 16 * 2**20
_CRI_LINE = re.compile(r"^(\S+) (stdout|stderr) ([PF]) ?(.*)$")
_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
# gpu_model_runner.py (V1 runner; the opt-in V2 runner drops "memory"), then the default loader's own line.
WEIGHTS = re.compile(rf"Model loading took \S+ GiB (?:memory )?and {_NUMBER} seconds")
WEIGHTS_DEFAULT_LOADER = re.compile(rf"Loading weights took {_NUMBER} seconds")
# compilation/monitor.py; decorators.py when AOT compile is off (then it includes the profiling run).
COMPILE_TOTAL = re.compile(rf"torch\.compile (?:and initial profiling/warmup run together )?took {_NUMBER} s in total")
# compilation/backends.py and decorators.py: loaded from the cache (AOT or per graph) or compiled.
COMPILE_HIT = re.compile(r"Directly load (?:AOT compilation from path|the compiled graph\(s\))")
COMPILE_MISS = re.compile(
    r"Compiling a graph for compile range|saved AOT compiled function to|Compiling model again due to a load failure"
)
# decorators.py: a compiled artifact was there but vLLM could not load it, and compiled again (0.21.0-0.34.0).
COMPILE_LOAD_FAILURE = re.compile(
    r"Compiling model again due to a load failure from .*?, reason: (?P<reason>.*)$", re.DOTALL
)
# vLLM's reason is an exception's text (any length): the event, the label and the start record carry this much.
MAX_REASON_CHARS = 200
# v1/engine/core.py: KV-cache profiling (which runs the compile), cache allocation and warm-up.
ENGINE = re.compile(
    rf"init engine \(profile, create kv cache, warmup model\) took {_NUMBER} s(?: \(compilation: {_NUMBER} s)?"
)
# v1/worker/startup_plan.py (0.34.0): a persisted plan applied, one refused for less free memory, one saved (this
# boot profiled: no plan matched).
STARTUP_PLAN = {
    "loaded": re.compile(r"Applying persisted startup plan \(fingerprint "),
    "refused": re.compile(r"Startup plan not applied: current free memory"),
    "written": re.compile(r"Saved startup plan to "),
}
# model_executor/warmup/kernel_warmup.py (0.34.0): the per-rank autotune file in use (multi-rank deployments), and
# the tuning runs a loaded file skips. Whether a start that tuned wrote anything (vLLM saves the file only when the
# tuner found something new) is the files' to tell; the managed store's path (one rank) runs them always.
AUTOTUNE_FILE = re.compile(r"Using FlashInfer autotune cache file: ")
AUTOTUNE_RAN = re.compile(r"Running FlashInfer autotune with \d+ tokens")
# entrypoints/openai/api_server.py, then uvicorn once the app is up.
SERVER_UP = re.compile(r"Application startup complete\.|Starting vLLM server on ")


@dataclass(frozen=True)
class VllmStart:
    weights_seconds: float | None = None
    compile_seconds: float | None = None
    compile_cache: str | None = None  # hit | miss
    load_failure: str | None = None  # vLLM's reason when a compiled artifact it found failed to load
    engine_seconds: float | None = None  # init engine less its compilation
    server_up: float | None = None  # epoch seconds
    first_line: float | None = None  # epoch seconds of the container's first output
    missing: tuple[str, ...] = field(default_factory=tuple)
    # What vLLM said of its other caches (contracts/engine_caches.py names): loaded | written | refused.
    engine_caches: dict[str, str] = field(default_factory=dict)


def cri_time(text: str) -> float:
    """RFC3339Nano (Go drops trailing zeros, so 0-9 fraction digits) to epoch seconds."""
    head, _, rest = text.partition(".")
    if not rest:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    digits = re.match(r"\d*", rest).group(0)  # type: ignore[union-attr]
    zone = rest[len(digits) :].replace("Z", "+00:00")
    whole = datetime.fromisoformat(head + zone).timestamp()
    return whole + (int(digits) / 10 ** len(digits) if digits else 0.0)


def cri_lines(data: str) -> list[tuple[float, str]]:
    """(time, text) per output line; pieces of a long line (P) joined to their final piece (F)."""
    lines: list[tuple[float, str]] = []
    pending: dict[str, tuple[float, str]] = {}  # per stream: stdout and stderr pieces interleave
    for raw in data.split("\n"):  # only "\n" ends a CRI line: a bare "\r" (progress bars) stays inside one
        match = _CRI_LINE.match(raw)
        if not match:
            continue  # a torn last line of a file being written
        when, stream, text = cri_time(match.group(1)), match.group(2), match.group(4)
        if stream in pending:
            earlier = pending.pop(stream)
            when, text = earlier[0], earlier[1] + text
        if match.group(3) == "P":
            pending[stream] = (when, text)
            continue
        lines.append((when, text))
    return lines


def container_log_path(root: Path, namespace: str, pod: str, uid: str, container: str, restart: int) -> Path:
    return root / f"{namespace}_{pod}_{uid}" / container / f"{restart}.log"


def read_container_log(path: Path) -> list[tuple[float, str]] | None:
    """None when the file is not there (rotated away, another node, not started)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return cri_lines(handle.read(MAX_LOG_BYTES))
    except OSError:
        return None


def parse_start(lines: list[tuple[float, str]]) -> VllmStart:
    weights = compile_total = engine = engine_compile = server_up = None
    default_loader = None
    hit = miss = False
    load_failure = None
    for when, text in lines:
        if load_failure is None and (match := COMPILE_LOAD_FAILURE.search(text)):
            load_failure = match.group("reason").strip()[:MAX_REASON_CHARS] or "no reason given"
        if weights is None and (match := WEIGHTS.search(text)):
            weights = float(match.group(1))
        elif default_loader is None and (match := WEIGHTS_DEFAULT_LOADER.search(text)):
            default_loader = float(match.group(1))
        if compile_total is None and (match := COMPILE_TOTAL.search(text)):
            compile_total = float(match.group(1))
        hit = hit or bool(COMPILE_HIT.search(text))
        miss = miss or bool(COMPILE_MISS.search(text))
        if engine is None and (match := ENGINE.search(text)):
            engine = float(match.group(1))
            engine_compile = float(match.group(2)) if match.group(2) else None
        if server_up is None and SERVER_UP.search(text):
            server_up = when
    weights = weights if weights is not None else default_loader
    texts = [text for _, text in lines]
    # The engine line's figure covers every compiled part (language model and encoder); the first
    # "torch.compile took" line only one of them.
    compiled = engine_compile if engine_compile is not None else compile_total
    engine_only = max(0.0, engine - (compiled or 0.0)) if engine is not None else None
    facts = {
        "weights": weights,
        "compile": compiled,
        "engine": engine,
        "server": server_up,
    }
    return VllmStart(
        weights_seconds=weights,
        compile_seconds=compiled,
        # A graph compiled anew is a miss even if others came from the cache: the start paid for a compile.
        compile_cache="miss" if miss else ("hit" if hit else None),
        load_failure=load_failure,
        engine_seconds=engine_only,
        server_up=server_up,
        first_line=lines[0][0] if lines else None,
        missing=tuple(f"vllm-log:{name}" for name, value in facts.items() if value is None),
        engine_caches=engine_cache_lines(texts),
    )


def engine_cache_lines(texts: list[str]) -> dict[str, str]:
    """The startup plan's and FlashInfer autotune's fate, where vLLM printed it."""
    said: dict[str, str] = {}
    plan = [word for word, pattern in STARTUP_PLAN.items() if any(pattern.search(text) for text in texts)]
    if plan:
        # A refused plan is followed by a saved one: the refusal is the news.
        said["startup_plan"] = "refused" if "refused" in plan else plan[0]
    if any(AUTOTUNE_FILE.search(text) for text in texts) and not any(AUTOTUNE_RAN.search(text) for text in texts):
        said["flashinfer_autotune_cache"] = "loaded"
    return said
