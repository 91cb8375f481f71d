"""What each vLLM container's entry step recorded on this node (written by model_workload/runtime/vllm_entry.py).

A record is written before the entry step reads the weights pointer ("choosing") and again once it has chosen
("started": the weights key it serves, the compile folders it found). So any pod that could have picked a copy
has a record naming it (or saying it may still pick), and the agent decides what is in use from these and the
pod list alone: no clock is compared with another.

A pod speaks only for itself. Each pod's container mounts `<records root>/<its pod UID>` (a subPathExpr kubelet
expands from the downward API; the admission policy allows no other mount of the root), so the folder name, not
anything the pod wrote, says whose record it is. The file is read as untrusted input (node_agent/runtime/
untrusted.py) and validated against a strict schema; a bad one is refused, logged and counted, and the loop goes
on. Nothing a pod wrote is ever used to build a path: folder names are checked against the UID form, and the
boot id and weights key against theirs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.pod_record import RECORD_FILE, RECORD_VERSION
from node_agent.runtime.fs import remove_tree
from node_agent.runtime.untrusted import POD_UID, Refused, open_folder, parse_json, read_capped

# A record is a few hundred bytes; a pod that writes more is refused before the agent reads it.
MAX_RECORD_BYTES = 64 * 1024
MAX_HASH_DIRS = 256
_HEX16 = r"^[0-9a-f]{16}$"
HashDir = Annotated[str, Field(pattern=r"^torch_compile_cache/(torch_aot_compile/)?[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")]


class _Schema(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class _Weights(_Schema):
    source: Literal["node", "s3"]
    key: Annotated[str, Field(pattern=_HEX16)] | None
    reason: Annotated[str, Field(max_length=2000)]


class _Compile(_Schema):
    fingerprint: Annotated[str, Field(pattern=_HEX16)] | None
    hash_dirs: Annotated[list[HashDir], Field(max_length=MAX_HASH_DIRS)]


class RecordDocument(_Schema):
    version: Literal[2]
    model: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")]
    phase: Literal["choosing", "started"]
    started_at: Annotated[float, Field(allow_inf_nan=False)]
    boot: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    weights: _Weights | None = None
    compile: _Compile | None = None


assert RECORD_VERSION == 2, "the schema above describes record version 2"


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
        """One container start of one pod (both parts checked: a safe file name)."""
        return f"{self.uid}.{self.boot}"

    def may_read(self, model: str, key: str) -> bool:
        if self.model != model:
            return False
        return self.phase != "started" or (self.weights_source == "node" and self.weights_key == key)


def parse_record(uid: str, data: bytes) -> PodRecord:
    """The record of pod `uid` (the folder's name) from its bytes; Refused unless it fits the schema."""
    try:
        document = RecordDocument.model_validate(parse_json(data))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "<root>"
        raise Refused(f"schema: {where}: {first['type']}") from None
    weights, compile_ = document.weights, document.compile
    return PodRecord(
        uid=uid,
        model=document.model,
        phase=document.phase,
        boot=document.boot,
        weights_source=weights.source if weights else None,
        weights_key=weights.key if weights else None,
        fingerprint=compile_.fingerprint if compile_ else None,
        hash_dirs=list(compile_.hash_dirs) if compile_ else [],
    )


@dataclass
class RecordsRead:
    records: dict[str, PodRecord] = field(default_factory=dict)
    # (folder name or "<root>", reason): what was refused this read, for the log and the metric.
    refused: list[tuple[str, str]] = field(default_factory=list)


class PodRecords:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def scan(self) -> RecordsRead:
        """Every pod folder's record; anything else in the root, or any record that is not a well-formed record,
        is refused (and reported), never fatal."""
        read = RecordsRead()
        try:
            root = open_folder(str(self.folder))
        except Refused:
            return read  # no pod has run on this node yet
        try:
            with os.scandir(root) as entries:
                names = sorted(entry.name for entry in entries)
            for name in names:
                if not POD_UID.fullmatch(name):
                    read.refused.append(("<root>", "an entry that is no pod's folder"))
                    continue
                try:
                    folder = open_folder(name, dir_fd=root)
                except Refused as refusal:
                    read.refused.append((name, refusal.reason))
                    continue
                try:
                    data = read_capped(RECORD_FILE, dir_fd=folder, max_bytes=MAX_RECORD_BYTES)
                    read.records[name] = parse_record(name, data)
                except Refused as refusal:
                    if refusal.reason != "cannot open: No such file or directory":  # not written yet
                        read.refused.append((name, refusal.reason))
                finally:
                    os.close(folder)
        except OSError:
            pass  # the root vanished mid-scan: what was read stands
        finally:
            os.close(root)
        return read

    def read(self) -> dict[str, PodRecord]:
        return self.scan().records

    def folders(self) -> set[str]:
        """Names of the pod folders present (UIDs only)."""
        try:
            return {name for name in os.listdir(self.folder) if POD_UID.fullmatch(name)}
        except OSError:
            return set()

    def forget_gone(self, read_before: set[str], live_uids: set[str]) -> list[str]:
        """Deletes the folders of pods that no longer exist. `read_before` must have been read before the pod
        list was fetched: a pod's folder exists only once kubelet started it, so it is in any list fetched later.
        Only UID-named folders of the root are removed (no link followed, any depth: fs.remove_tree)."""
        gone = sorted(uid for uid in read_before if uid not in live_uids and POD_UID.fullmatch(uid))
        for uid in gone:
            remove_tree(self.folder / uid)
        return gone
