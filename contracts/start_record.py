"""One vLLM pod start, phase by phase: the record the node agent publishes (a ConfigMap per node, in the agent's
namespace) and `warmstart status --starts` reads. One definition for both sides, so they cannot drift."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from contracts.agent_settings import AGENT_NAMESPACE

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

    @property
    def total(self) -> float | None:
        return None if self.ready is None else self.ready - self.created

    def to_dict(self) -> dict:
        return {"version": RECORD_VERSION, **asdict(self), "missing": list(self.missing)}

    @classmethod
    def from_dict(cls, document: dict) -> StartTimeline | None:
        """None for a record of another version or a malformed one (status skips it instead of failing)."""
        if not isinstance(document, dict) or document.get("version") != RECORD_VERSION:
            return None
        try:
            fields = {name: document[name] for name in cls.__dataclass_fields__ if name in document}
            fields["missing"] = tuple(fields.get("missing", ()))
            return cls(**fields)
        except TypeError:
            return None
