"""What the agent does on its node: restore on start, publish once a pod is Ready, record use.

Every failure ends in a done marker, so an inference pod never waits longer than its bound because of us.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Callable

from agent.compile_cache import Outcome, publish, restore, touch_last_use
from agent.kube import KubeApi, host_paths, is_ready
from agent.layout import NodeCacheLayout
from agent.log import EventLog
from agent.s3_store import CacheStore
from warmstart.agent_settings import NODE_LABEL_DOMAIN, AgentModel, AgentSettings
from warmstart.cache_key import CompileCacheKey, ModelFactors, compile_cache_key

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
VLLM_POD_SELECTOR = "app.kubernetes.io/name=vllm,app.kubernetes.io/part-of=warmstart"


@dataclass
class ModelState:
    model: AgentModel
    key: CompileCacheKey | None = None
    last_touch: float | None = None


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
    ) -> None:
        self.settings = settings
        self.node = node
        self.store = store
        self.kube = kube
        self.layout = layout
        self.clock = clock
        self.log = log
        self.models = {m.name: ModelState(m) for m in settings.models}

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
            factors = ModelFactors.from_dict(state.model.factors)
            state.key = compile_cache_key(factors, gpu=gpu.gpu, architecture=gpu.architecture)
            outcome = restore(
                store=self.store,
                layout=self.layout,
                key=state.key,
                model=state.model.name,
                fingerprint=state.model.fingerprint,
                node=self.node,
                clock=self.clock,
                log=self.log,
            )
            outcomes[state.model.name] = outcome
            self._finish(state, outcome)
        return outcomes

    def _finish(self, state: ModelState, outcome: Outcome) -> None:
        self.layout.mark_done(state.model.name, state.model.fingerprint, {"node": self.node, **outcome.as_dict()})
        try:
            self.kube.label_node(self.node, {f"{NODE_LABEL_DOMAIN}/{state.model.name}": outcome.status})
        except Exception as error:  # a label is a convenience; the marker is what pods wait for
            self.log.event("label-failed", model=state.model.name, reason=str(error))

    def tick(self) -> dict[str, Outcome]:
        """Publish for models with a Ready pod using this configuration's folder; record their use."""
        outcomes: dict[str, Outcome] = {}
        try:
            pods = self.kube.pods_on_node(self.node, VLLM_POD_SELECTOR)
        except Exception as error:
            self.log.event("pods-unreadable", reason=str(error))
            return outcomes
        for state in self.models.values():
            if state.key is None or not any(self._serves(pod, state) for pod in pods):
                continue
            if self.layout.origin(state.model.name, state.model.fingerprint) is None:
                outcome = publish(
                    store=self.store,
                    layout=self.layout,
                    key=state.key,
                    model=state.model.name,
                    fingerprint=state.model.fingerprint,
                    node=self.node,
                    clock=self.clock,
                    log=self.log,
                )
                outcomes[state.model.name] = outcome
                if outcome.status in ("published", "exists", "lost-race"):
                    self._label(state, "published" if outcome.status == "published" else "present")
                    state.last_touch = self.clock()
                continue
            if state.last_touch is None or self.clock() - state.last_touch >= self.settings.last_use_touch_seconds:
                touch_last_use(store=self.store, key=state.key, node=self.node, clock=self.clock, log=self.log)
                state.last_touch = self.clock()
        return outcomes

    def _serves(self, pod: dict, state: ModelState) -> bool:
        """A Ready vLLM pod of this model whose compile-cache volume is this configuration's folder."""
        labels = pod.get("metadata", {}).get("labels", {})
        folder = posixpath.join(state.model.name, state.model.fingerprint)
        return (
            labels.get("app.kubernetes.io/instance") == state.model.name
            and is_ready(pod)
            and any(path.rstrip("/").endswith("/" + folder) for path in host_paths(pod))
        )

    def _label(self, state: ModelState, value: str) -> None:
        try:
            self.kube.label_node(self.node, {f"{NODE_LABEL_DOMAIN}/{state.model.name}": value})
        except Exception as error:
            self.log.event("label-failed", model=state.model.name, reason=str(error))
