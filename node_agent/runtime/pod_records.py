"""What each vLLM container's entry step recorded on this node (written by model_workload/runtime/vllm_entry.py).

A record is written before the entry step reads the weights pointer ("choosing") and again once it has
chosen ("started": the weights key it serves, the compile folders it found). So any pod that could have
picked a copy has a record naming it (or saying it may still pick), and the agent decides what is in use
from these and the pod list alone: no clock is compared with another.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from model_workload.runtime.vllm_entry import RECORD_VERSION


@dataclass(frozen=True)
class PodRecord:
    uid: str
    model: str
    phase: str  # choosing | started
    boot: str
    weights_source: str | None  # node | s3 | None (no weights cache for this model)
    weights_key: str | None
    fingerprint: str | None
    hash_dirs: list[str]

    @property
    def start_id(self) -> str:
        """One container start of one pod."""
        return f"{self.uid}.{self.boot}"

    def may_read(self, model: str, key: str) -> bool:
        if self.model != model:
            return False
        return self.phase != "started" or (self.weights_source == "node" and self.weights_key == key)


def _parse(document: dict) -> PodRecord | None:
    if not isinstance(document, dict) or document.get("version") != RECORD_VERSION:
        return None
    pod, weights, compile_ = document.get("pod") or {}, document.get("weights") or {}, document.get("compile") or {}
    if not pod.get("uid") or not document.get("model"):
        return None
    return PodRecord(
        uid=pod["uid"],
        model=document["model"],
        phase=document.get("phase", "choosing"),
        boot=str(document.get("boot", "")),
        weights_source=weights.get("source"),
        weights_key=weights.get("key"),
        fingerprint=compile_.get("fingerprint"),
        hash_dirs=list(compile_.get("hash_dirs") or []),
    )


class PodRecords:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def read(self) -> dict[str, PodRecord]:
        """uid -> record; unreadable files are skipped (a writer renames complete files into place)."""
        records: dict[str, PodRecord] = {}
        try:
            paths = sorted(self.folder.glob("*.json"))
        except OSError:
            return records
        for path in paths:
            try:
                record = _parse(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
            if record is not None:
                records[record.uid] = record
        return records

    def forget_gone(self, read_before: set[str], live_uids: set[str]) -> list[str]:
        """Deletes the records of pods that no longer exist. `read_before` must have been read before the pod
        list was fetched: a pod writes its record only once it runs, so it is in any list fetched later."""
        gone = sorted(uid for uid in read_before if uid not in live_uids)
        for uid in gone:
            (self.folder / f"{uid}.json").unlink(missing_ok=True)
        return gone
