"""A vLLM pod's start, phase by phase, from the most reliable source of each fact (pure: tested on recorded API
responses and log files).

- The Kubernetes API: creation, scheduling and Ready (pod conditions, whole seconds), whether the pod waited for
  a new node (the node's creation and Ready condition), the restore wait (its init container's start and end),
  the image pull (kubelet's Pulling/Pulled events, whose message carries the pull's own duration).
- The node agent: the compile-cache restore outcome of the pod's configuration (its done marker) and what the
  pod's entry step chose (its record: weights from the node copy or S3).
- vLLM's log lines (vllm_log.py): weights loading, torch.compile and whether it used a cache, engine start.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from contracts.pod_labels import MODEL_LABEL, RESTORE_WAIT_CONTAINER, VLLM_CONTAINER
from contracts.start_record import TIMELINE_PHASES, StartTimeline
from node_agent.runtime.vllm_log import VLLM_LOG_FORMAT, VllmStart

# kubelet's image events (pkg/kubelet/images/image_manager.go): the pull's duration first, then with waiting.
PULLED = re.compile(r'Successfully pulled image "([^"]+)" in (\S+) ')
PRESENT = re.compile(r'Container image "([^"]+)" already present on machine')
_GO_DURATION = re.compile(r"([0-9]*\.?[0-9]+)(h|ms|m|s|us|µs|ns)")
_UNIT_SECONDS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def api_time(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def go_duration(text: str) -> float:
    """Go's time.Duration text ("1m2.345s", "850ms", "1h2m3.4s") in seconds."""
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        raise ValueError(f"not a Go duration: {text!r}")
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


def condition_time(obj: dict, kind: str) -> float | None:
    for condition in obj.get("status", {}).get("conditions", []):
        if condition.get("type") == kind and condition.get("status") == "True":
            return api_time(condition.get("lastTransitionTime"))
    return None


def container_status(pod: dict, name: str, *, init: bool = False) -> dict | None:
    key = "initContainerStatuses" if init else "containerStatuses"
    return next((s for s in pod.get("status", {}).get(key, []) if s.get("name") == name), None)


def vllm_restarts(pod: dict) -> int:
    return int((container_status(pod, VLLM_CONTAINER) or {}).get("restartCount", 0))


def image_pull(events: list[dict], image: str) -> tuple[str | None, float | None]:
    """('pulled', seconds) from the first pull of the serving image for any of the pod's containers (the restore
    wait runs the same image, so the pull may be its), ('present', 0) when kubelet found it, else (None, None)."""
    present = False
    for event in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or ""):
        message = event.get("message", "")
        if event.get("reason") == "Pulled" and (match := PULLED.search(message)) and match.group(1) == image:
            try:
                return "pulled", go_duration(match.group(2))
            except ValueError:
                continue
        if event.get("reason") == "Pulled" and (match := PRESENT.search(message)) and match.group(1) == image:
            present = True
    return ("present", 0.0) if present else (None, None)


def restore_wait(pod: dict) -> float | None:
    state = (container_status(pod, RESTORE_WAIT_CONTAINER, init=True) or {}).get("state", {}).get("terminated")
    if not state:
        return None
    started, finished = api_time(state.get("startedAt")), api_time(state.get("finishedAt"))
    return None if started is None or finished is None else max(0.0, finished - started)


@dataclass
class _PodSide:
    """What the Kubernetes API says about a start: when it began and ended, and the phases before vLLM's."""

    created: float
    ready: float | None
    new_node: bool
    image: str | None
    phases: dict[str, float | None]
    missing: list[str]


def assemble(
    *,
    pod: dict,
    node: dict,
    events: list[dict],
    vllm: VllmStart | None,
    weights_source: str | None,
    restore_outcome: str | None,
    outcome: str,
) -> StartTimeline:
    side = _restarted(pod, outcome) if vllm_restarts(pod) else _first_start(pod, node, events, outcome)
    # vLLM's own phases from its log, and `other`: what the known phases leave of the total.
    vllm = vllm or VllmStart(missing=("vllm-log",))
    phases = {
        **side.phases,
        "weights": vllm.weights_seconds,
        "compile": vllm.compile_seconds,
        "engine": vllm.engine_seconds,
    }
    if side.ready is not None:
        known = sum(value for name, value in phases.items() if name != "other" and value is not None)
        phases["other"] = max(0.0, (side.ready - side.created) - known)
    metadata = pod["metadata"]
    return StartTimeline(
        model=metadata.get("labels", {}).get(MODEL_LABEL, ""),
        namespace=metadata.get("namespace", ""),
        pod=metadata.get("name", ""),
        uid=metadata.get("uid", ""),
        node=node.get("metadata", {}).get("name", ""),
        start=vllm_restarts(pod),
        outcome=outcome,
        created=side.created,
        ready=side.ready,
        new_node=side.new_node,
        image=side.image,
        restore=restore_outcome,
        weights_source=weights_source,
        compile_cache=vllm.compile_cache,
        compile_load_failure=vllm.load_failure,
        vllm_log_format=VLLM_LOG_FORMAT,
        phases={name: None if value is None else round(value, 3) for name, value in phases.items()},
        missing=(*side.missing, *vllm.missing),
    )


def _first_start(pod: dict, node: dict, events: list[dict], outcome: str) -> _PodSide:
    """The pod's first start: from its creation, through a new node (when it waited for one), scheduling, the
    image pull and the restore wait."""
    created = api_time(pod["metadata"]["creationTimestamp"])
    assert created is not None
    missing: list[str] = []
    node_created = api_time(node.get("metadata", {}).get("creationTimestamp"))
    new_node = node_created is not None and node_created > created
    node_ready = condition_time(node, "Ready") if new_node else None
    scheduled = condition_time(pod, "PodScheduled")
    ready = condition_time(pod, "Ready") if outcome == "ready" else None
    image = next((c.get("image") for c in pod.get("spec", {}).get("containers", []) if c["name"] == VLLM_CONTAINER), "")
    image_state, image_seconds = image_pull(events, image or "")
    has_restore_wait = any(
        c.get("name") == RESTORE_WAIT_CONTAINER for c in pod.get("spec", {}).get("initContainers", [])
    )
    restore_seconds = restore_wait(pod) if has_restore_wait else 0.0

    phases: dict[str, float | None] = dict.fromkeys(TIMELINE_PHASES)
    if new_node:
        phases["node"] = max(0.0, node_ready - created) if node_ready is not None else None
        if node_ready is None:
            missing.append("node:Ready")
    else:
        phases["node"] = 0.0
    if scheduled is not None:
        phases["scheduling"] = max(0.0, scheduled - (node_ready or created))
    else:
        missing.append("pod:PodScheduled")
    phases["image"] = image_seconds
    if image_state is None:
        missing.append("events:Pulled")
    phases["restore"] = restore_seconds
    if restore_seconds is None:
        missing.append(f"pod:{RESTORE_WAIT_CONTAINER}")
    return _PodSide(created, ready, new_node, image_state, phases, missing)


def _restarted(pod: dict, outcome: str) -> _PodSide:
    """A start of a restarted vLLM container: it begins when the previous run ended (kubelet's back-off
    included); the pod's node, scheduling, image and restore wait were not part of it (None, not missing)."""
    status = container_status(pod, VLLM_CONTAINER) or {}
    began = api_time(status.get("lastState", {}).get("terminated", {}).get("finishedAt")) or api_time(
        status.get("state", {}).get("running", {}).get("startedAt")
    )
    missing = [] if began is not None else ["pod:vllm lastState"]
    created = began if began is not None else api_time(pod["metadata"]["creationTimestamp"])
    assert created is not None
    ready = condition_time(pod, "Ready") if outcome == "ready" else None
    if ready is not None and ready < created:
        ready = None  # a Ready transition from before this run: no figure rather than a wrong one
        missing.append("pod:Ready")
    return _PodSide(created, ready, False, None, dict.fromkeys(TIMELINE_PHASES), missing)
