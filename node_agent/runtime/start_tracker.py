"""Times every vLLM pod start on this node once: when the pod is Ready, or when the start ends without it (the
pod went away, or its container restarted). Each timeline goes to the metrics, the agent's log, and the node's
ConfigMap of recent starts, which `warmstart status --starts` reads."""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from contracts.agent_settings import AGENT_NAMESPACE
from contracts.pod_labels import VLLM_CONTAINER
from contracts.start_record import STARTS_KEPT, STARTS_KEY, STARTS_LABEL, StartTimeline, starts_config_map_name
from node_agent.runtime.engine_cache_use import MAX_FILES, cache_files, engine_cache_use
from node_agent.runtime.kube import KubeApi, KubeError, is_ready
from node_agent.runtime.layout import NodeCacheLayout
from node_agent.runtime.log import EventLog
from node_agent.runtime.metrics import AgentMetrics
from node_agent.runtime.pod_records import PodRecord
from node_agent.runtime.timeline import api_time, assemble, condition_time, container_status, vllm_restarts
from node_agent.runtime.vllm_log import VllmStart, container_log_path, parse_start, read_container_log


def start_id(pod: dict) -> str:
    return f"{pod['metadata'].get('uid', '')}.{vllm_restarts(pod)}"


def ended_without_ready(pod: dict) -> bool:
    """A pod that will not become Ready: finished (Failed, Succeeded: the ReplicaSet keeps it listed) or deleted."""
    return pod.get("status", {}).get("phase") in ("Failed", "Succeeded") or bool(
        pod["metadata"].get("deletionTimestamp")
    )


class StartTracker:
    def __init__(
        self,
        *,
        kube: KubeApi,
        node: str,
        pod_logs: Path,
        layout: NodeCacheLayout | None,
        metrics: AgentMetrics,
        log: EventLog,
        kept: int = STARTS_KEPT,
        read_log: Callable[[Path], list[tuple[float, str]] | None] = read_container_log,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube, self.node, self.pod_logs, self.layout = kube, node, pod_logs, layout
        self.metrics, self.log, self.read_log = metrics, log, read_log
        # Pods already Ready when this agent started were timed by its predecessor (or too long ago for their
        # events and logs to be whole): not timed again.
        self.since = clock()
        self._node_uid: str | None = None
        self.recent: deque[StartTimeline] = deque(maxlen=kept)
        self._timed: set[str] = set()  # start ids already timed, pruned to the pods still listed
        self._open: dict[str, dict] = {}  # start id -> the pod as last seen, not Ready yet
        self._loaded = False

    def observe(self, pods: list[dict], records: dict[str, PodRecord]) -> list[StartTimeline]:
        if not self._loaded:
            self._load()
        listed = {start_id(pod): pod for pod in pods}
        timed = []
        for sid, pod in listed.items():
            if sid in self._timed:
                continue
            if is_ready(pod):
                self._open.pop(sid, None)
                if (condition_time(pod, "Ready") or 0.0) < self.since:
                    self._timed.add(sid)
                    continue
                timed.append(self._time(sid, pod, records, "ready"))
            elif ended_without_ready(pod):
                self._open.pop(sid, None)
                timed.append(self._time(sid, pod, records, "not-ready"))
            else:
                self._open[sid] = pod
        for sid in [sid for sid in self._open if sid not in listed]:  # gone, or its container restarted
            timed.append(self._time(sid, self._open.pop(sid), records, "not-ready"))
        self._timed = {sid for sid in self._timed if sid in listed}
        if timed:
            self._publish()
        return timed

    def _time(self, sid: str, pod: dict, records: dict[str, PodRecord], outcome: str) -> StartTimeline:
        metadata = pod["metadata"]
        uid, namespace = metadata.get("uid", ""), metadata.get("namespace", "")
        try:
            events = self.kube.pod_events(namespace, uid)
        except Exception as error:  # a timeline without image facts beats none
            self.log.event("start-events-unreadable", pod=f"{namespace}/{metadata.get('name')}", reason=str(error))
            events = []
        try:
            node = self.kube.node(self.node)
            self._node_uid = self._node_uid or node["metadata"].get("uid")  # for the publish's owner reference
        except Exception as error:
            self.log.event("start-node-unreadable", reason=str(error))
            node = {"metadata": {"name": self.node}}
        record = records.get(uid)
        vllm = self.vllm_start(pod)
        timeline = assemble(
            pod=pod,
            node=node,
            events=events,
            vllm=vllm,
            weights_source=record.weights_source if record else None,
            restore_outcome=self._restore_outcome(record),
            outcome=outcome,
        )
        timeline = replace(timeline, engine_caches=self._engine_caches(pod, record, vllm, timeline.created))
        self._timed.add(sid)
        if outcome == "not-ready":  # a crash loop keeps one record, its latest start, not one per restart
            kept = [t for t in self.recent if not (t.uid == timeline.uid and t.outcome == "not-ready")]
            self.recent.clear()
            self.recent.extend(kept)
        self.recent.append(timeline)
        self.metrics.observe_start(timeline)
        self.log.event(
            "pod-start",
            model=timeline.model,
            pod=f"{namespace}/{timeline.pod}",
            outcome=outcome,
            total_s=None if timeline.total is None else round(timeline.total, 1),
            phases=timeline.phases,
            missing=list(timeline.missing),
            engine_caches=timeline.engine_caches,
        )
        return timeline

    def _engine_caches(self, pod: dict, record: PodRecord | None, vllm: VllmStart | None, created: float) -> dict:
        """Which of the engine's caches this start had or filled (engine_cache_use.py), judged from the vLLM
        container's start: its API start time, else its first log line, else the pod's creation."""
        said = vllm.engine_caches if vllm else {}
        if record is None or not record.fingerprint or self.layout is None:
            return engine_cache_use({}, said)
        running = (container_status(pod, VLLM_CONTAINER) or {}).get("state", {}).get("running") or {}
        since = api_time(running.get("startedAt")) or (vllm.first_line if vllm else None) or created
        files, stopped = cache_files(self.layout.model_dir(record.model, record.fingerprint), since)
        if stopped:
            self.log.event("engine-caches-uncounted", model=record.model, reason=f"over {MAX_FILES} files")
        return engine_cache_use(files, said)

    def vllm_start(self, pod: dict) -> VllmStart | None:
        """What the pod's current vLLM container said about its start; None without its log file."""
        metadata = pod["metadata"]
        lines = self.read_log(
            container_log_path(
                self.pod_logs,
                metadata.get("namespace", ""),
                metadata.get("name", ""),
                metadata.get("uid", ""),
                VLLM_CONTAINER,
                vllm_restarts(pod),
            )
        )
        return parse_start(lines) if lines is not None else None

    def _restore_outcome(self, record: PodRecord | None) -> str | None:
        if record is None or not record.fingerprint or self.layout is None:
            return None
        try:
            return json.loads(self.layout.done_marker(record.model, record.fingerprint).read_text()).get("status")
        except (OSError, ValueError):
            return None

    def _load(self) -> None:
        """The starts published before this agent (re)started: kept, and not timed again."""
        self._loaded = True
        try:
            data = self.kube.config_map(AGENT_NAMESPACE, starts_config_map_name(self.node)).get("data", {})
        except KubeError as error:
            if error.status != 404:
                self.log.event("starts-unreadable", reason=str(error))
            return
        except Exception as error:
            self.log.event("starts-unreadable", reason=str(error))
            return
        for document in json.loads(data.get(STARTS_KEY, "[]")):
            timeline = StartTimeline.from_dict(document)
            if timeline is not None:
                self.recent.append(timeline)
                self._timed.add(f"{timeline.uid}.{timeline.start}")

    def _publish(self) -> None:
        """Applied with the node as owner, so it goes with the node; until the node's uid is known (it never
        changes) nothing is applied, since an apply without the owner would remove it."""
        if self._node_uid is None:
            try:
                self._node_uid = self.kube.node(self.node)["metadata"]["uid"]
            except Exception as error:
                self.log.event("starts-unpublished", reason=f"node unreadable: {error}")
                return
        owner = [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self._node_uid}]
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": starts_config_map_name(self.node),
                "namespace": AGENT_NAMESPACE,
                "labels": {STARTS_LABEL[0]: STARTS_LABEL[1], "app.kubernetes.io/part-of": "warmstart"},
                # Deleted with its node (a namespaced object may have a cluster-scoped owner).
                "ownerReferences": owner,
            },
            "data": {STARTS_KEY: json.dumps([t.to_dict() for t in self.recent], separators=(",", ":"))},
        }
        try:
            self.kube.apply_config_map(AGENT_NAMESPACE, body)
        except Exception as error:  # the metrics and the log have the starts; the next start retries
            self.log.event("starts-unpublished", reason=str(error))
