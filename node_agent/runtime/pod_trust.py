"""Which pods may speak through the files they write on the node (untrusted: node_agent/runtime/pod_records.py).

A record counts only for the model the API server says its pod serves; a pod on the node that is not a vLLM pod of
a model's namespace is an impostor, and what it writes is refused from then on. Each refusal is counted, and
logged once per (source, item, reason); both memories stay bounded.
"""

from __future__ import annotations

import threading

from contracts.agent_settings import AgentSettings
from contracts.pod_labels import MODEL_LABEL
from node_agent.runtime.kube import KubeApi
from node_agent.runtime.log import EventLog
from node_agent.runtime.metrics import AgentMetrics
from node_agent.runtime.pod_records import PodRecord, PodRecords

# How many refusals and impostors are remembered: pods come and go, the memory stays bounded.
REMEMBERED = 10_000


def uid_of(pod: dict) -> str:
    return pod.get("metadata", {}).get("uid", "")


def model_of(pod: dict) -> str | None:
    return pod.get("metadata", {}).get("labels", {}).get(MODEL_LABEL)


class PodTrust:
    def __init__(
        self,
        *,
        settings: AgentSettings,
        node: str,
        kube: KubeApi,
        log: EventLog,
        metrics: AgentMetrics,
        records: PodRecords | None,
    ) -> None:
        self.settings = settings
        self.node = node
        self.kube = kube
        self.log = log
        self.metrics = metrics
        self.records = records
        self._refusals_logged: set[tuple[str, str, str]] = set()
        # UIDs of pods that are not warmstart's workloads: a model's labels outside its namespace, or no vLLM pod
        # at all (a pod elsewhere that mounted its own record folder). What they write is refused.
        self._impostors: set[str] = set()
        self._checked_unlisted: set[str] = set()  # record UIDs looked up since the last pod list
        self._lock = threading.Lock()  # the compile loop and the weights loop both list and look up

    def read_records(self) -> dict[str, PodRecord]:
        """The pods' records; each refused file is logged once (per folder and reason) and counted each time."""
        if self.records is None:
            return {}
        read = self.records.scan()
        for folder, reason in read.refused:
            self.refused("pod-record", folder, reason)
        return read.records

    def refused(self, source: str, item: str, reason: str) -> None:
        self.metrics.refused(source)
        if len(self._refusals_logged) > REMEMBERED:
            self._refusals_logged.clear()
        if (source, item, reason) not in self._refusals_logged:
            self._refusals_logged.add((source, item, reason))
            self.log.event("input-refused", source=source, item=item, reason=reason)

    def is_impostor(self, uid: str) -> bool:
        return uid in self._impostors

    def speaking_for_themselves(self, records: dict[str, PodRecord], pods: list[dict]) -> dict[str, PodRecord]:
        """A listed pod's record counts only for the model the API server says the pod serves (its folder says
        which pod it is; the record may not speak for another model). A record of a pod that is on the node but
        is not a vLLM pod of a model's namespace is refused. A record of a pod not listed at all (one that
        started after the list) counts as it is: it can only keep copies in use, never remove or plant one."""
        models = {uid_of(pod): model_of(pod) for pod in pods}
        self.find_strangers(set(records) - set(models))
        trusted = {}
        for uid, record in records.items():
            if uid in self._impostors:
                self.refused("pod-record", uid, "its pod is not a vLLM pod of its model's namespace")
                continue
            if uid in models and models[uid] != record.model:
                self.refused("pod-record", uid, "names another model than its pod serves")
                continue
            trusted[uid] = record
        return trusted

    def find_strangers(self, uids: set[str]) -> None:
        """Records whose pod the vLLM list lacks: a pod of the node outside every model's namespace is not a
        warmstart workload (a team's pod may mount its own record folder where Pod Security lets it), and its
        records are refused from then on. A pod of a model's namespace keeps its say even without the vLLM labels
        (relabelled out of a Service, it may still read a copy). Looked up once per UID between two pod lists; a
        pod that is not on the node at all started after the list (or is gone) and keeps the benefit of the doubt."""
        with self._lock:
            unknown = uids - self._impostors - self._checked_unlisted
            if not unknown:
                return
            self._checked_unlisted |= unknown
        namespaces = {m.name for m in self.settings.models}
        try:
            on_node = self.kube.pods_on_node(self.node)
        except Exception as error:
            self.log.event("pods-unreadable", reason=str(error))
            return
        others = {uid_of(pod) for pod in on_node if pod.get("metadata", {}).get("namespace") not in namespaces}
        for uid in sorted(unknown & others):
            self.mark_impostor(uid, "mounts a record folder outside every model's namespace")

    def mark_impostor(self, uid: str, reason: str) -> None:
        """A pod that is not warmstart's workload: what it writes is refused from now on."""
        with self._lock:
            if len(self._impostors) > REMEMBERED:
                self._impostors.clear()
            self._impostors.add(uid)
        self.refused("pod", uid, reason)

    def own_pods(self, listed: list[dict]) -> list[dict]:
        """The node's vLLM pods, each in its model's own namespace (a model's namespace is its name), from a new
        pod list. A pod that carries a model's labels in another namespace is nobody's: it is left out of every
        decision (use, publish, cleanup), and what it writes is refused."""
        with self._lock:
            self._checked_unlisted.clear()
        pods = []
        for pod in listed:
            if pod.get("metadata", {}).get("namespace") == model_of(pod):
                pods.append(pod)
            else:
                self.mark_impostor(uid_of(pod), "carries a model's labels outside that model's namespace")
        return pods
