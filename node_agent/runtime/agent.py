"""What the agent does on its node: restore compile caches on start, tell whether each vLLM pod used one,
publish what the node's pods compiled, keep the weights copies in step with S3, and clean up after
configurations and models that are gone.

Every compile-cache failure ends in a done marker (retried while the disk is full), so an inference pod
never waits longer than its bound because of us; every weights failure leaves the pods streaming from S3.
What is in use is decided from the pods' own entry records and the pod list, never from clocks.
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass

from contracts.agent_settings import (
    COMPILE_MISS_LABEL_DOMAIN,
    COMPILE_USE_LABEL_DOMAIN,
    LABEL_DOMAINS,
    NODE_LABEL_DOMAIN,
    WEIGHTS_LABEL_DOMAIN,
    AgentModel,
    AgentSettings,
)
from contracts.cache_key import CompileCacheKey, ModelFactors, compile_cache_key
from contracts.node_layout import AGENT_STATE_FOLDER
from contracts.pod_labels import vllm_pod_selector
from contracts.pruner_report import PRUNER_REPORT_KEY, REPORT_MAX_BYTES, PrunerReport, parse_report
from node_agent.runtime.compile_cache import Outcome, Status, needs_publish, publish, restore, touch_last_use
from node_agent.runtime.compile_judgement import Observation, judge, with_engine_evidence
from node_agent.runtime.compile_manifest import CacheLimits, local_hash_dirs
from node_agent.runtime.fs import remove_tree, write_atomic
from node_agent.runtime.kube import KubeApi, host_paths, is_ready
from node_agent.runtime.layout import NodeCacheLayout
from node_agent.runtime.liveness import Liveness
from node_agent.runtime.log import EventLog
from node_agent.runtime.metrics import AgentMetrics
from node_agent.runtime.pod_records import PodRecord, PodRecords
from node_agent.runtime.pod_trust import PodTrust, model_of, uid_of
from node_agent.runtime.s3.compile_store import CacheStore
from node_agent.runtime.start_tracker import StartTracker
from node_agent.runtime.untrusted import Refused
from node_agent.runtime.vllm_log import VllmStart
from node_agent.runtime.weights import NodeCopies, WeightsLimits

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
VLLM_POD_SELECTOR = vllm_pod_selector()  # the labels the chart gives every model's pods
WEIGHTS_LABELS = {"ready": "ready", "downloaded": "ready", "refused": "no-nvme"}


@dataclass
class ModelState:
    model: AgentModel
    key: CompileCacheKey | None = None
    last_touch: float | None = None
    last_count: float | None = None  # when this agent last compared the folder's files with its archive's


# How often the agent counts a published or restored folder's files against its archive's (a walk of the folder):
# a folder that keeps growing is archived again at most this often, each fuller archive being a whole upload.
FULLER_ARCHIVE_SECONDS = 600


class NodeAgent:
    def __init__(
        self,
        *,
        settings: AgentSettings,
        node: str,
        store: CacheStore,
        kube: KubeApi,
        layout: NodeCacheLayout,
        clock: Callable[[], float],
        log: EventLog,
        weights: NodeCopies | None = None,
        records: PodRecords | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        metrics: AgentMetrics | None = None,
        starts: StartTracker | None = None,
        liveness: Liveness | None = None,
    ) -> None:
        self.settings = settings
        self.node = node
        self.store = store
        self.kube = kube
        self.layout = layout
        self.clock = clock
        self.monotonic = monotonic
        self.log = log
        self.weights = weights
        self.records = records
        self.metrics = metrics or AgentMetrics()
        self.starts = starts
        self.liveness = liveness or Liveness()
        self.metrics.watch_loops(self.liveness)
        self.metrics.know_models(
            starts=[m.name for m in settings.models],
            compile=[m.name for m in settings.compile_models],
            weights=[m.name for m in settings.weights_models],
        )
        self.limits = CacheLimits(max_archive_bytes=settings.compile_archive_max_bytes)
        self.models = {m.name: ModelState(m) for m in settings.compile_models}
        self._unwritten_markers: dict[str, Outcome] = {}
        self._pod_states: dict[str, str] = {}  # uid -> ready | starting | gone, as of the last pod list
        # uid -> when the agent first saw the pod stream from S3: per pod, not per container start, so a pod
        # that crash-loops holds downloads back once, for the startup bound, not forever.
        self._streaming_since: dict[str, float] = {}
        self.trust = PodTrust(settings=settings, node=node, kube=kube, log=log, metrics=self.metrics, records=records)

    # ---- compile cache ----

    def start(self) -> dict[str, Outcome]:
        """Resolve this node's keys and restore every model's cache; always leaves done markers."""
        outcomes: dict[str, Outcome] = {}
        try:
            instance_type = self.kube.node(self.node)["metadata"]["labels"][INSTANCE_TYPE_LABEL]
            gpu = self.settings.gpus[instance_type]
        except Exception as error:
            reason = f"cannot resolve this node's GPU: {type(error).__name__}: {error}"
            self.log.event("start-failed", node=self.node, reason=reason)
            for state in self.models.values():
                outcomes[state.model.name] = Outcome(Status.FAILED, reason)
                self._finish(state, outcomes[state.model.name])
            return outcomes
        for state in self.models.values():
            compile_settings = state.model.compile_cache
            factors = ModelFactors.from_dict(compile_settings.factors)
            state.key = compile_cache_key(factors, gpu=gpu.gpu, architecture=gpu.architecture)
            outcome = restore(
                store=self.store,
                layout=self.layout,
                key=state.key,
                model=state.model.name,
                fingerprint=compile_settings.fingerprint,
                node=self.node,
                clock=self.clock,
                log=self.log,
                limits=self.limits,
                touch=False,
            )
            outcomes[state.model.name] = outcome
            self.metrics.restored(state.model.name, outcome.status, outcome.bytes)
            self._finish(state, outcome)
            if outcome.status == Status.RESTORED:  # for the pruner, after the marker the pods wait for
                touch_last_use(store=self.store, key=state.key, node=self.node, clock=self.clock, log=self.log)
        return outcomes

    def _finish(self, state: ModelState, outcome: Outcome) -> None:
        """The done marker (pods wait for it) and the node label. A marker that cannot be written (a full
        disk) is retried on every tick; the agent keeps running."""
        name, fingerprint = state.model.name, state.model.compile_cache.fingerprint
        try:
            self.layout.mark_done(name, fingerprint, {"node": self.node, **outcome.as_dict()})
            self._unwritten_markers.pop(name, None)
        except OSError as error:
            self._unwritten_markers[name] = outcome
            self.log.event("marker-failed", model=name, reason=f"{type(error).__name__}: {error}")
        self._label({f"{NODE_LABEL_DOMAIN}/{name}": outcome.status})

    def tick(self) -> dict[str, Outcome]:
        """Judge pods that became Ready, publish what this node compiled, record use of the keys."""
        for name, outcome in list(self._unwritten_markers.items()):
            self._finish(self.models[name], outcome)
        outcomes: dict[str, Outcome] = {}
        records = self.trust.read_records()
        pods = self._vllm_pods()
        if pods is None:
            return outcomes
        records = self.trust.speaking_for_themselves(records, pods)
        self._observe(pods, records)
        self._track_pods(pods, records)
        if self.starts is not None:
            try:
                self.starts.observe(pods, records)
            except Exception as error:  # timing is reporting: the caches go on
                self.log.event("start-timing-failed", reason=f"{type(error).__name__}: {error}")
        for state in self.models.values():
            mine = [pod for pod in pods if self._serves(pod, state)]
            if state.key is None or not any(is_ready(pod) for pod in mine):
                continue
            fingerprint = state.model.compile_cache.fingerprint
            # Publish only once every running pod of this configuration is Ready: one still starting may be
            # compiling into the folder right now.
            settled = all(is_ready(pod) for pod in mine if pod.get("status", {}).get("phase") == "Running")
            count_files = settled and (
                state.last_count is None or abs(self.clock() - state.last_count) >= FULLER_ARCHIVE_SECONDS
            )
            try:
                publishing = settled and needs_publish(
                    self.layout, state.model.name, fingerprint, max_files=self.limits.max_files, count_files=count_files
                )
            except OSError as error:  # an unreadable folder: this model waits, the others go on
                self.log.event("publish-check-failed", model=state.model.name, reason=str(error))
                continue
            if count_files or publishing:  # a publish counts the files too
                state.last_count = self.clock()
            if publishing:
                outcome = publish(
                    store=self.store,
                    layout=self.layout,
                    key=state.key,
                    model=state.model.name,
                    fingerprint=fingerprint,
                    node=self.node,
                    clock=self.clock,
                    log=self.log,
                    limits=self.limits,
                )
                outcomes[state.model.name] = outcome
                self.metrics.published(state.model.name, outcome.status, outcome.bytes)
                if outcome.status in (Status.PUBLISHED, Status.REPUBLISHED, Status.EXISTS, Status.LOST_RACE):
                    value = "published" if outcome.status in (Status.PUBLISHED, Status.REPUBLISHED) else "present"
                    self._label({f"{NODE_LABEL_DOMAIN}/{state.model.name}": value})
                    state.last_touch = self.clock()
                continue
            if state.last_touch is None or abs(self.clock() - state.last_touch) >= self.settings.last_use_touch_seconds:
                touch_last_use(store=self.store, key=state.key, node=self.node, clock=self.clock, log=self.log)
                state.last_touch = self.clock()
        return outcomes

    # ---- what the pods wrote (untrusted: node_agent/runtime/pod_records.py) ----

    def _serves(self, pod: dict, state: ModelState) -> bool:
        """A vLLM pod of this model whose compile-cache volume is this configuration's folder."""
        folder = posixpath.join(state.model.name, state.model.compile_cache.fingerprint)
        return model_of(pod) == state.model.name and any(
            path.rstrip("/").endswith("/" + folder) for path in host_paths(pod)
        )

    # ---- did vLLM use the cache? ----

    def _observe(self, pods: list[dict], records: dict[str, PodRecord]) -> list[Observation]:
        """Each container start of a vLLM pod, judged once when the pod is Ready."""
        observations = []
        ready = {uid_of(pod): pod for pod in pods if is_ready(pod)}
        for uid, record in records.items():
            if uid not in ready or record.phase != "started" or not record.fingerprint:
                continue
            judged = self.layout.observed_dir() / record.start_id
            if judged.exists():
                continue
            try:
                observation = with_engine_evidence(
                    judge(
                        start_dirs=record.hash_dirs,
                        now_dirs=local_hash_dirs(self.layout, record.model, record.fingerprint),
                        origin=self.layout.origin(record.model, record.fingerprint),
                        restore=self._marker(record.model, record.fingerprint),
                        config_dir=self.layout.config_dir(record.model, record.fingerprint),
                    ),
                    self._vllm_said(ready[uid]),
                )
            except Exception as error:  # the pod's folder can hold anything: one start is told, the rest go on
                observation = Observation("none", "none", False, f"not judged: {type(error).__name__}")
            pod = ready[uid]["metadata"]
            self.log.event(
                f"compile-{observation.outcome}",
                model=record.model,
                pod=f"{pod.get('namespace')}/{pod.get('name')}",
                source=observation.source,
                expected_hit=observation.expected_hit,
                cause=observation.cause,
                evidence=observation.evidence,
                reason=observation.reason,
                new_hash_dirs=observation.new_dirs,
                weights_source=record.weights_source,
            )
            self.metrics.judged(record.model, observation.outcome, observation.cause)
            if observation.outcome != "none":
                self._label(
                    {
                        f"{COMPILE_USE_LABEL_DOMAIN}/{record.model}": observation.outcome,
                        # Why the last start missed; a hit removes it.
                        f"{COMPILE_MISS_LABEL_DOMAIN}/{record.model}": (
                            observation.cause if observation.outcome == "miss" else None
                        ),
                    }
                )
            try:
                write_atomic(
                    judged,
                    json.dumps(
                        {"outcome": observation.outcome, "source": observation.source, "reason": observation.reason}
                    ).encode(),
                )
            except OSError as error:
                self.log.event("observation-unsaved", model=record.model, reason=str(error))
            observations.append(observation)
        return observations

    def _vllm_said(self, pod: dict) -> VllmStart | None:
        """vLLM's own lines about this start (kubelet's log of its container); None where the agent reads no logs."""
        if self.starts is None:
            return None
        try:
            return self.starts.vllm_start(pod)
        except Exception as error:  # a log that cannot be read leaves the folders to judge
            self.log.event("vllm-log-unreadable", reason=f"{type(error).__name__}: {error}")
            return None

    def _marker(self, model: str, fingerprint: str) -> dict | None:
        try:
            return json.loads(self.layout.done_marker(model, fingerprint).read_text())
        except (OSError, ValueError):
            return None

    def _track_pods(self, pods: list[dict], records: dict[str, PodRecord]) -> None:
        """Readiness as of this pod list (a pod gone stays known as gone while its record is left), and when
        each pod was first seen streaming from S3."""
        listed = {uid_of(pod): "ready" if is_ready(pod) else "starting" for pod in pods}
        self._pod_states = listed | {uid: "gone" for uid in self._pod_states if uid not in listed and uid in records}
        self._streaming_since = {uid: since for uid, since in self._streaming_since.items() if uid in records}
        self._streaming(records)

    def streaming_from_s3(self) -> set[str]:
        """Pods of this node loading weights from S3 right now: their entry step chose S3 and they are not
        Ready (as of the last pod list; one not listed yet counts), each for at most the startup bound from
        when the agent first saw it. Read from the records at each call, so a pod that just started holds
        downloads back at once."""
        records = self.trust.read_records()
        self.trust.find_strangers({uid for uid in records if self._pod_states.get(uid) not in ("ready", "starting")})
        return self._streaming({uid: r for uid, r in records.items() if not self.trust.is_impostor(uid)})

    def _streaming(self, records: dict[str, PodRecord]) -> set[str]:
        now = self.monotonic()
        streaming = set()
        for uid, record in records.items():
            if (
                record.phase != "started"
                or record.weights_source != "s3"
                or self._pod_states.get(uid) in ("ready", "gone")
            ):
                continue
            since = self._streaming_since.setdefault(uid, now)
            if now - since < self.settings.max_weights_defer_seconds:
                streaming.add(uid)
        return streaming

    # ---- weights cache ----

    def weights_tick(self) -> dict[str, str]:
        """Bring each cached model's node copy in step with S3, then drop copies nothing uses any more."""
        if self.weights is None:
            return {}
        pods = self._vllm_pods()
        if pods is None:
            return {}  # without the pod list nothing can be judged unused: sync nothing, evict nothing
        in_use = self._weights_in_use(pods)
        statuses = {}
        for model in self.settings.weights_models:
            settings = model.weights_cache
            outcome = self.weights.sync(
                model.name,
                settings.s3_uri,
                settings.prefix,
                in_use,
                pause=lambda: bool(self.streaming_from_s3()),
                limits=WeightsLimits(max_bytes=settings.max_bytes, max_objects=settings.max_objects),
                progress=self.liveness.beater("weights_tick"),
            )
            statuses[model.name] = outcome.status
            self.metrics.weights_synced(
                model.name, outcome.status, outcome.bytes if outcome.status == "downloaded" else 0
            )
            self._label({f"{WEIGHTS_LABEL_DOMAIN}/{model.name}": WEIGHTS_LABELS.get(outcome.status)})
        self.weights.evict(in_use, current_models={m.name for m in self.settings.weights_models})
        return statuses

    def weights_confirm_tick(self) -> dict[str, str]:
        """Keeps the pointers of complete copies fresh while another model's copy downloads (minutes)."""
        if self.weights is None:
            return {}
        return {
            m.name: self.weights.confirm(
                m.name,
                m.weights_cache.s3_uri,
                m.weights_cache.prefix,
                WeightsLimits(max_bytes=m.weights_cache.max_bytes, max_objects=m.weights_cache.max_objects),
            ).status
            for m in self.settings.weights_models
        }

    def _weights_in_use(self, pods: list[dict]) -> Callable[[str, str], bool]:
        """A copy is in use while a pod's record names it or says the pod is still choosing. Records are
        read at each question: a pod's entry step records "choosing" before it reads the pointer, and the
        pointer of a copy is gone before that copy can be evicted, so no pod can pick it unseen."""
        current = {m.name for m in self.settings.weights_models}

        def in_use(model: str, key: str) -> bool:
            if model not in current:
                return any(model_of(pod) == model for pod in pods)
            records = self.trust.speaking_for_themselves(self.trust.read_records(), pods)
            return any(record.may_read(model, key) for record in records.values())

        return in_use

    # ---- cleanup after configurations and models that are gone ----

    def pruner_report_tick(self) -> PrunerReport | None:
        """The pruner's report of its last run (contracts/pruner_report.py), into the metrics the alert rules read;
        none before its first run. Written by the pruner's role, read as untrusted: bounded, checked, refused whole."""
        try:
            document = self.store.get_json(PRUNER_REPORT_KEY, max_bytes=REPORT_MAX_BYTES)
        except Refused as error:
            self._refuse_pruner_report(error.reason)
            return None
        except Exception as error:  # S3 unreachable, access denied: no report this round, and the loop goes on
            self.log.event("pruner-report-unreadable", reason=f"{type(error).__name__}: {error}"[:300])
            return None
        if document is None:
            return None
        report = parse_report(document)
        if report is None:
            self._refuse_pruner_report("not a pruner report of a known version, time and outcome")
            return None
        self.metrics.pruner_reported(report)
        return report

    def _refuse_pruner_report(self, reason: str) -> None:
        self.metrics.refused("pruner-report")
        self.log.event("input-refused", source="pruner-report", reason=reason)

    def cleanup(self) -> list[str]:
        """Labels, pointers, compile-cache folders of removed models and of old configurations, pod records
        of pods that are gone; each once no pod uses it."""
        before = self.records.folders() if self.records else set()
        pods = self._vllm_pods()
        if pods is None:
            return []
        configured = {m.name for m in self.settings.models}
        running = {model_of(pod) for pod in pods}
        mounted = {path.rstrip("/") for pod in pods for path in host_paths(pod)}
        removed = []
        try:
            labels = self.kube.node(self.node)["metadata"].get("labels", {})
        except Exception as error:
            self.log.event("cleanup-failed", reason=str(error))
            return []
        stale: dict[str, str | None] = {
            key: None
            for key in labels
            if key.split("/", 1)[0] in LABEL_DOMAINS and key.split("/", 1)[1] not in configured
        }
        if stale:
            self._label(stale)
        current = {m.name: m.compile_cache.fingerprint for m in self.settings.compile_models}
        if self.layout.root.exists():
            for folder in sorted(p for p in self.layout.root.iterdir() if p.is_dir() and p.name != AGENT_STATE_FOLDER):
                if folder.name not in configured:
                    if folder.name not in running:
                        remove_tree(folder)
                        removed.append(folder.name)
                        self.log.event("compile-cache-removed", model=folder.name)
                    continue
                for config_folder in sorted(p for p in folder.iterdir() if p.is_dir()):
                    if config_folder.name == current.get(folder.name):
                        continue
                    if any(path.endswith(f"/{folder.name}/{config_folder.name}") for path in mounted):
                        continue  # a pod of the older configuration still runs on it
                    remove_tree(config_folder)
                    self.layout.forget(folder.name, config_folder.name)
                    removed.append(f"{folder.name}/{config_folder.name}")
                    self.log.event("compile-cache-removed", model=folder.name, fingerprint=config_folder.name)
        if self.weights is not None:
            for model, _ in self.weights.layout.cached_keys():
                if model not in configured:
                    self.weights.forget_model(model)
        if self.records is not None:
            live = {uid_of(pod) for pod in pods}
            self.records.forget_gone(before, live)
            observed = self.layout.observed_dir()
            if observed.exists():
                for judged in observed.iterdir():  # named <pod uid>.<boot>; temporary files start with "."
                    if not judged.name.startswith(".") and judged.name.split(".", 1)[0] not in live:
                        judged.unlink(missing_ok=True)
        return removed

    # ---- Kubernetes helpers ----

    def _vllm_pods(self) -> list[dict] | None:
        """The node's vLLM pods, each in its model's own namespace (node_agent/runtime/pod_trust.py)."""
        try:
            listed = self.kube.pods_on_node(self.node, VLLM_POD_SELECTOR)
        except Exception as error:
            self.log.event("pods-unreadable", reason=str(error))
            return None
        return self.trust.own_pods(listed)

    def _label(self, labels: dict[str, str | None]) -> None:
        try:
            self.kube.label_node(self.node, labels)
        except Exception as error:  # a label is a convenience; markers and pointers are what pods use
            self.log.event("label-failed", labels=labels, reason=str(error))
