"""Where the agent keeps things under the node's compile-cache root (the same layout the pods mount)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path

from contracts.node_layout import (
    AGENT_STATE_FOLDER,
    COMPILE_CACHE_CONTENT,
    DONE_MARKERS,
    done_marker_name,
    model_cache_folder,
)
from node_agent.runtime.fs import write_atomic


@dataclass(frozen=True)
class NodeCacheLayout:
    root: Path

    def config_dir(self, model: str, fingerprint: str) -> Path:
        """The folder a pod of this configuration mounts (kubelet creates it, empty, before the pod starts)."""
        return self.root / model_cache_folder(model, fingerprint)

    def model_dir(self, model: str, fingerprint: str) -> Path:
        """The cache itself: appears complete (the agent's rename) or is created by vLLM, never half-made."""
        return self.config_dir(model, fingerprint) / COMPILE_CACHE_CONTENT

    @property
    def state(self) -> Path:
        return self.root / AGENT_STATE_FOLDER

    def done_marker(self, model: str, fingerprint: str) -> Path:
        """Pods wait (bounded) for this file before they start compiling."""
        return self.state / DONE_MARKERS / done_marker_name(model, fingerprint)

    def origin_record(self, model: str, fingerprint: str) -> Path:
        """How this node's copy came to be: restored from S3 or published to it (no need to publish)."""
        return self.state / "origin" / done_marker_name(model, fingerprint)

    def observed_dir(self) -> Path:
        """One file per judged pod start: the outcome is told once, also across agent restarts."""
        return self.state / "observed"

    def new_temp_dir(self) -> Path:
        """On the same filesystem as the model folders, so the final rename is atomic."""
        path = self.state / "tmp" / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def mark_done(self, model: str, fingerprint: str, outcome: dict) -> None:
        write_atomic(self.done_marker(model, fingerprint), json.dumps(outcome, sort_keys=True).encode())

    def record_origin(self, model: str, fingerprint: str, origin: dict) -> None:
        write_atomic(self.origin_record(model, fingerprint), json.dumps(origin, sort_keys=True).encode())

    def origin(self, model: str, fingerprint: str) -> dict | None:
        """The agent's own record (strict: a JSON object with a list of hash folders, else none)."""
        try:
            origin = json.loads(self.origin_record(model, fingerprint).read_text())
        except (OSError, ValueError, RecursionError):
            return None
        if not isinstance(origin, dict) or not isinstance(origin.get("hash_dirs", []), list):
            return None
        return origin

    def forget(self, model: str, fingerprint: str) -> None:
        """Markers of a configuration whose folder is gone."""
        self.done_marker(model, fingerprint).unlink(missing_ok=True)
        self.origin_record(model, fingerprint).unlink(missing_ok=True)
