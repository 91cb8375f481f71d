"""One vLLM pod start, phase by phase: the record the node agent publishes (a ConfigMap per node, in the agent's
namespace) and `warmstart status --starts` reads. One definition for both sides, so they cannot drift."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from contracts.agent_settings import AGENT_NAMESPACE
from contracts.engine_caches import MAX_LISTED_CACHES, USE_WORDS, cache_name_ok

# The measured phases, in the order a start goes through them; `other` is what the rest leaves of the total
# (container start, Python imports, the API server's start, probe periods, and any phase with no source).
TIMELINE_PHASES = ("node", "scheduling", "image", "restore", "weights", "compile", "engine", "other")
STARTS_LABEL = ("app.kubernetes.io/component", "start-timelines")
STARTS_KEY = "starts.json"
# Starts kept per node (the ConfigMap stays far below its 1 MiB limit; Prometheus keeps the history).
STARTS_KEPT = 20
RECORD_VERSION = 1
STARTS_PATH = f"/api/v1/namespaces/{AGENT_NAMESPACE}/configmaps?labelSelector={STARTS_LABEL[0]}%3D{STARTS_LABEL[1]}"


def starts_config_map_name(node: str) -> str:
    """The node's ConfigMap; the admission policy lets each agent write only the one named after its own node
    (EC2 node names are far below the 246 characters this leaves)."""
    return f"starts-{node}"


@dataclass(frozen=True)
class StartTimeline:
    model: str
    namespace: str
    pod: str
    uid: str
    node: str
    start: int  # the vLLM container's restart count: 0 for the pod's first start
    outcome: str  # ready | not-ready (the pod went away or its container restarted first)
    created: float  # epoch seconds, the pod's creationTimestamp
    ready: float | None  # epoch seconds, the Ready condition's transition
    new_node: bool  # the pod waited for a node that was created after it
    image: str | None  # pulled | present
    restore: str | None  # the node agent's compile-cache restore outcome for the pod's configuration
    weights_source: str | None  # node | s3 (the entry step's choice)
    compile_cache: str | None  # hit | miss (vLLM's own log lines)
    vllm_log_format: str  # which vLLM release's log lines were parsed
    phases: dict[str, float | None] = field(default_factory=dict)
    missing: tuple[str, ...] = ()  # the sources that were not there (a phase without them is None)
    # vLLM's reason when it found a compiled artifact and could not load it (the start compiled again: a miss).
    compile_load_failure: str | None = None
    # The engine's other caches this start had or filled: name (contracts/engine_caches.py) -> a USE_WORDS word.
    engine_caches: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> float | None:
        return None if self.ready is None else self.ready - self.created

    def to_dict(self) -> dict:
        return {"version": RECORD_VERSION, **asdict(self), "missing": list(self.missing)}

    @classmethod
    def from_dict(cls, document: dict) -> StartTimeline | None:
        """None for a record of another version or a malformed one (status and calibration skip it instead of
        failing): a node's ConfigMap is untrusted, so every field must have its type, every time and phase be a
        finite number (a phase from 0 to a day), and the texts be short."""
        if not isinstance(document, dict) or document.get("version") != RECORD_VERSION:
            return None
        fields: dict[str, Any] = {name: document.get(name) for name in cls.__dataclass_fields__}
        texts = ("model", "namespace", "pod", "uid", "node", "outcome", "vllm_log_format")
        optional_texts = ("image", "restore", "weights_source", "compile_cache", "compile_load_failure")
        if not all(_text(fields[name]) for name in texts) or not all(
            fields[name] is None or _text(fields[name]) for name in optional_texts
        ):
            return None
        if not (_count(fields["start"]) and _time(fields["created"]) and isinstance(fields["new_node"], bool)):
            return None
        if fields["ready"] is not None and not (_time(fields["ready"]) and fields["ready"] >= fields["created"]):
            return None
        phases, missing = fields["phases"] or {}, fields["missing"] or []
        if not isinstance(phases, dict) or not isinstance(missing, list) or len(phases) > len(TIMELINE_PHASES):
            return None
        if not all(name in TIMELINE_PHASES and (v is None or _seconds(v)) for name, v in phases.items()):
            return None
        if not all(_text(name) for name in missing) or len(missing) > 16:
            return None
        caches = fields["engine_caches"] or {}
        if not isinstance(caches, dict) or len(caches) > MAX_LISTED_CACHES:
            return None
        if not all(cache_name_ok(name) and use in USE_WORDS for name, use in caches.items()):
            return None
        fields["engine_caches"] = dict(caches)
        fields["missing"] = tuple(missing)
        fields["phases"] = {name: float(v) if v is not None else None for name, v in phases.items()}
        return cls(**fields)


MAX_TEXT = 253  # a Kubernetes name at most
DAY_SECONDS = 86_400


def _text(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= MAX_TEXT


def _number(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) < 2**53 if isinstance(value, int) else math.isfinite(value)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def _time(value: object) -> bool:
    return _number(value) and 0 <= value < 2**40  # type: ignore[operator]


def _seconds(value: object) -> bool:
    return _number(value) and 0 <= value <= DAY_SECONDS  # type: ignore[operator]
