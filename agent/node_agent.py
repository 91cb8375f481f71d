"""What the agent does on its node: restore compile caches on start, publish once a pod is Ready, keep
the weights copies in step with S3, and clean up after models that left the config.

Every compile-cache failure ends in a done marker, so an inference pod never waits longer than its bound
because of us; every weights failure leaves the pods streaming from S3.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from agent.compile_cache import Outcome, publish, restore, touch_last_use
from agent.fs import remove_tree
from agent.kube import KubeApi, host_paths, is_ready
from agent.layout import NodeCacheLayout
from agent.log import EventLog
from agent.s3_store import CacheStore
from agent.weights import WeightsCache
from warmstart.agent_settings import NODE_LABEL_DOMAIN, WEIGHTS_LABEL_DOMAIN, AgentModel, AgentSettings
from warmstart.cache_key import CompileCacheKey, ModelFactors, compile_cache_key
from warmstart.workload import AGENT_STATE_FOLDER

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
VLLM_POD_SELECTOR = "app.kubernetes.io/name=vllm,app.kubernetes.io/part-of=warmstart"
MODEL_LABEL = "app.kubernetes.io/instance"


@dataclass
class ModelState:
    model: AgentModel
    key: CompileCacheKey | None = None
    last_touch: float | None = None


def _started_at(pod: dict) -> float:
    stamp = pod.get("status", {}).get("startTime")
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() if stamp else float("inf")


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
        weights: WeightsCache | None = None,
    ) -> None:
        self.settings = settings
        self.node = node
        self.store = store
        self.kube = kube
        self.layout = layout
        self.clock = clock
        self.log = log
        self.weights = weights
        self.models = {m.name: ModelState(m) for m in settings.compile_models}

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
                outcomes[state.model.name] = Outcome("failed", reason)
                self._finish(state, outcomes[state.model.name])
            return outcomes
        for state in self.models.values():
            compile_settings = state.model.compile
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
            )
            outcomes[state.model.name] = outcome
            self._finish(state, outcome)
        return outcomes

    def _finish(self, state: ModelState, outcome: Outcome) -> None:
        fingerprint = state.model.compile.fingerprint
        self.layout.mark_done(state.model.name, fingerprint, {"node": self.node, **outcome.as_dict()})
        self._label({f"{NODE_LABEL_DOMAIN}/{state.model.name}": outcome.status})

    def tick(self) -> dict[str, Outcome]:
        """Publish for models with a Ready pod using this configuration's folder; record their use."""
        outcomes: dict[str, Outcome] = {}
        pods = self._vllm_pods()
        if pods is None:
            return outcomes
        for state in self.models.values():
            if state.key is None or not any(self._serves(pod, state) for pod in pods):
                continue
            fingerprint = state.model.compile.fingerprint
            if self.layout.origin(state.model.name, fingerprint) is None:
                outcome = publish(
                    store=self.store,
                    layout=self.layout,
                    key=state.key,
                    model=state.model.name,
                    fingerprint=fingerprint,
                    node=self.node,
                    clock=self.clock,
                    log=self.log,
                )
                outcomes[state.model.name] = outcome
                if outcome.status in ("published", "exists", "lost-race"):
                    value = "published" if outcome.status == "published" else "present"
                    self._label({f"{NODE_LABEL_DOMAIN}/{state.model.name}": value})
                    state.last_touch = self.clock()
                continue
            if state.last_touch is None or self.clock() - state.last_touch >= self.settings.last_use_touch_seconds:
                touch_last_use(store=self.store, key=state.key, node=self.node, clock=self.clock, log=self.log)
                state.last_touch = self.clock()
        return outcomes

    def _serves(self, pod: dict, state: ModelState) -> bool:
        """A Ready vLLM pod of this model whose compile-cache volume is this configuration's folder."""
        folder = posixpath.join(state.model.name, state.model.compile.fingerprint)
        return (
            pod.get("metadata", {}).get("labels", {}).get(MODEL_LABEL) == state.model.name
            and is_ready(pod)
            and any(path.rstrip("/").endswith("/" + folder) for path in host_paths(pod))
        )

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
            outcome = self.weights.sync(model.name, model.weights.s3_uri, model.weights.prefix, in_use)
            statuses[model.name] = outcome.status
            ready = outcome.status in ("ready", "downloaded")
            self._label({f"{WEIGHTS_LABEL_DOMAIN}/{model.name}": "ready" if ready else None})
        self.weights.evict(in_use, current_models={m.name for m in self.settings.weights_models})
        return statuses

    def _weights_in_use(self, pods: list[dict]) -> Callable[[str, str], bool]:
        """A copy may be read by a pod of its model that started before the copy stopped being current."""
        current = {m.name for m in self.settings.weights_models}

        def in_use(model: str, key: str) -> bool:
            model_pods = [p for p in pods if p.get("metadata", {}).get("labels", {}).get(MODEL_LABEL) == model]
            if model not in current:
                return bool(model_pods)
            retired_at = self.weights.retired_at(model, key)
            return retired_at is not None and any(_started_at(p) <= retired_at for p in model_pods)

        return in_use

    # ---- cleanup after models that left the config ----

    def cleanup(self) -> list[str]:
        """Labels, pointers and compile-cache folders of models no longer configured (once no pod uses them)."""
        pods = self._vllm_pods()
        if pods is None:
            return []
        configured = {m.name for m in self.settings.models}
        running = {p.get("metadata", {}).get("labels", {}).get(MODEL_LABEL) for p in pods}
        removed = []
        try:
            labels = self.kube.node(self.node)["metadata"].get("labels", {})
        except Exception as error:
            self.log.event("cleanup-failed", reason=str(error))
            return []
        stale = {
            key: None
            for key in labels
            if key.split("/", 1)[0] in (NODE_LABEL_DOMAIN, WEIGHTS_LABEL_DOMAIN) and key.split("/", 1)[1] not in configured
        }
        if stale:
            self._label(stale)
        if self.layout.root.exists():
            for folder in sorted(p for p in self.layout.root.iterdir() if p.is_dir() and p.name != AGENT_STATE_FOLDER):
                if folder.name not in configured and folder.name not in running:
                    remove_tree(folder)
                    removed.append(folder.name)
                    self.log.event("compile-cache-removed", model=folder.name)
        if self.weights is not None:
            for model, _ in self.weights.layout.cached_keys():
                if model not in configured:
                    self.weights.forget_model(model)
        return removed

    # ---- Kubernetes helpers ----

    def _vllm_pods(self) -> list[dict] | None:
        try:
            return self.kube.pods_on_node(self.node, VLLM_POD_SELECTOR)
        except Exception as error:
            self.log.event("pods-unreadable", reason=str(error))
            return None

    def _label(self, labels: dict[str, str | None]) -> None:
        try:
            self.kube.label_node(self.node, labels)
        except Exception as error:  # a label is a convenience; markers and pointers are what pods use
            self.log.event("label-failed", labels=labels, reason=str(error))
