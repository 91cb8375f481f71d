"""Model weights on the node's NVMe: one folder per (model, weights key), complete or absent.

The key is derived from the S3 listing (key, size, ETag of every object), so new files at the same S3
path make a new key: the update is detected and served, unlike a cache keyed by path. A pointer per model
names the current complete copy and when the agent last confirmed it against S3; the pods' entry script
uses the local copy only while that pointer is fresh, and streams from S3 otherwise.

A copy is published as soon as every byte is verified in the page cache, before the disk has it: a pod reads
what the page cache holds, so it need not wait for the disk's write rate. The marker says so (`durable` false,
with the boot id), and a copy not yet durable is trusted in that boot only: after a crash or a reboot, when
unsynced bytes may be lost, it is no copy at all (the next fill replaces it). The agent then syncs the filesystem
and marks the copy durable; if the sync fails, the copy is withdrawn.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from node_agent.runtime.fs import current_boot_id, remove_tree, rename_no_replace, sync_filesystem, write_atomic
from node_agent.runtime.log import EventLog
from node_agent.runtime.s3_store import ListedObject, WeightsSource
from node_agent.runtime.untrusted import Refused, finite, parse_json, read_capped

STATE = ".warmstart"
POINTER_MAX_BYTES = 64 * 1024
_KEY = re.compile(r"^[0-9a-f]{16}$")


@dataclass(frozen=True)
class WeightsLimits:
    """What one model's S3 prefix may hold (contracts.agent_settings.WeightsSettings)."""

    max_bytes: int
    max_objects: int


NO_LIMITS = WeightsLimits(max_bytes=2**62, max_objects=10**9)


def weights_key(listing: list[ListedObject], prefix: str) -> str:
    entries = [[o.key[len(prefix) :], o.size, o.etag] for o in sorted(listing, key=lambda o: o.key)]
    return hashlib.sha256(json.dumps(entries, separators=(",", ":")).encode()).hexdigest()[:16]


def marker_trusted(marker: dict, boot_id: str) -> bool:
    """A completion marker vouches for its copy when the copy is on disk (`durable` true; a marker without the
    field was written by an agent that synced before it marked), or when it was written in this boot: until the
    machine restarts, the page cache holds every byte the agent verified. Mirrored by the pods' plugin
    (model_workload/runtime/node_copy_loader.py)."""
    durable = marker.get("durable", True)
    return durable is True or (durable is False and isinstance(boot_id, str) and marker.get("boot_id") == boot_id)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True)
class WeightsLayout:
    root: Path
    # The boot this agent runs in (what a copy not yet on disk is good for).
    boot_id: str = field(default_factory=current_boot_id)

    def key_dir(self, model: str, key: str) -> Path:
        return self.root / model / key

    def complete_marker(self, model: str, key: str) -> Path:
        """Written only after every file is verified and the folder renamed into place."""
        return self.root / model / f"{key}.complete"

    def pointer(self, model: str) -> Path:
        return self.root / STATE / "current" / model

    def retired(self, model: str, key: str) -> Path:
        return self.root / STATE / "retired" / f"{model}.{key}"

    def temp_root(self) -> Path:
        return self.root / STATE / "tmp"

    def new_temp_dir(self) -> Path:
        path = self.temp_root() / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def read_marker(self, model: str, key: str) -> dict | None:
        try:
            marker = parse_json(read_capped(str(self.complete_marker(model, key)), max_bytes=POINTER_MAX_BYTES))
        except Refused:
            return None
        return marker if isinstance(marker, dict) else None

    def is_complete(self, model: str, key: str) -> bool:
        """Marked complete by a marker this boot may trust (marker_trusted), its folder in place."""
        marker = self.read_marker(model, key)
        return marker is not None and marker_trusted(marker, self.boot_id) and self.key_dir(model, key).is_dir()

    def read_pointer(self, model: str) -> dict | None:
        """The agent's own pointer, parsed strictly: a key of the weights-key form, a finite check time."""
        try:
            pointer = parse_json(read_capped(str(self.pointer(model)), max_bytes=POINTER_MAX_BYTES))
        except Refused:
            return None
        if (
            not isinstance(pointer, dict)
            or not isinstance(pointer.get("key"), str)
            or not _KEY.fullmatch(pointer["key"])
            or finite(pointer.get("checked_at")) is None
        ):
            return None
        return pointer

    def cached_keys(self) -> list[tuple[str, str]]:
        """(model, key) of every folder on disk, complete or not."""
        found = []
        if self.root.exists():
            for model_dir in sorted(p for p in self.root.iterdir() if p.is_dir() and p.name != STATE):
                found += [(model_dir.name, key.name) for key in sorted(model_dir.iterdir()) if key.is_dir()]
        return found


@dataclass(frozen=True)
class SyncOutcome:
    status: str  # ready | downloaded | refused | busy | stale | failed
    key: str = ""
    reason: str = ""
    bytes: int = 0
    seconds: float = 0.0
    # From the start of the sync to the copy's publication (what a pod waits for); `seconds` runs on to the end,
    # the copy on disk.
    published_seconds: float | None = None


class WeightsCache:
    def __init__(
        self,
        *,
        source: WeightsSource,
        layout: WeightsLayout,
        clock: Callable[[], float],
        log: EventLog,
        free_bytes: Callable[[Path], int] = lambda path: shutil.disk_usage(path).free,
        reserve_bytes: int = 2 * 10**9,
        storage_problem: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.source = source
        self.layout = layout
        self.clock = clock
        self.log = log
        self.free_bytes = free_bytes
        self.reserve_bytes = reserve_bytes
        # Why this node must not be filled (no instance store under the weights root), or None.
        self.storage_problem = storage_problem
        # One writer per model: the fill (minutes), the quick confirmation and an eviction never overlap on
        # one model (re-entrant: a fill evicts its own model's old copies to make room).
        self._locks: dict[str, threading.RLock] = defaultdict(threading.RLock)

    def _reporter(self, model: str, event: str = "weights-sync"):
        started = self.clock()

        def done(
            status: str, key: str = "", reason: str = "", size: int = 0, published_at: float | None = None
        ) -> SyncOutcome:
            published = None if published_at is None else published_at - started
            outcome = SyncOutcome(status, key, reason, size, self.clock() - started, published)
            extra = {} if published is None else {"published_seconds": round(published, 3)}
            self.log.event(
                event,
                model=model,
                key=key,
                status=status,
                reason=reason,
                bytes=size,
                seconds=round(outcome.seconds, 3),
                **extra,
            )
            return outcome

        return done

    def _listing(self, prefix: str, limits: WeightsLimits) -> list[ListedObject]:
        """The prefix's objects, Refused when they hold more than the config allows for this model."""
        listing = self.source.list(prefix, max_objects=limits.max_objects)
        size = sum(o.size for o in listing)
        if size > limits.max_bytes:
            raise Refused(
                f"s3://{self.source.bucket}/{prefix} holds {size} bytes, more than the {limits.max_bytes} its "
                "configured size_gb allows: fix size_gb (or the prefix)"
            )
        return listing

    def confirm(self, model: str, s3_uri: str, prefix: str, limits: WeightsLimits = NO_LIMITS) -> SyncOutcome:
        """Cheap (one listing): refresh the pointer of a complete copy, or retire it when S3 moved on. Skips a
        model whose copy is being filled, so a long download of one model never lets the others' pointers age."""
        lock = self._locks[model]
        if not lock.acquire(blocking=False):
            return SyncOutcome("busy", reason="being filled")
        try:
            done = self._reporter(model, "weights-confirm")
            try:
                listing = self._listing(prefix, limits)
            except Exception as error:
                return done("failed", reason=f"listing failed: {error}")
            key = weights_key(listing, prefix) if listing else ""
            if key and self.layout.is_complete(model, key):
                self._point(model, key, s3_uri)
                return done("ready", key)
            if self.layout.read_pointer(model) is not None:
                self._retire_current(model)  # S3 changed: new pods stream until the fill catches up
            return done("stale", key, "S3 holds another version than the node's copy")
        finally:
            lock.release()

    def sync(
        self,
        model: str,
        s3_uri: str,
        prefix: str,
        in_use: Callable[[str, str], bool],
        pause: Callable[[], bool] | None = None,
        limits: WeightsLimits = NO_LIMITS,
        progress: Callable[[int], None] | None = None,
    ) -> SyncOutcome:
        """Make the node's copy of `model` match S3 now; the pointer is current only when it does.
        `pause()` true holds the download back between parts (a pod of the node is streaming from S3);
        `progress(bytes)` is told of every buffer written (the agent's liveness)."""
        with self._locks[model]:
            return self._sync(model, s3_uri, prefix, in_use, pause, limits, progress)

    def _sync(self, model, s3_uri, prefix, in_use, pause, limits, progress) -> SyncOutcome:
        done = self._reporter(model)
        try:
            listing = self._listing(prefix, limits)
        except Exception as error:  # the pointer is not refreshed, so pods fall back to S3 once it ages
            if self.layout.read_pointer(model) is not None and isinstance(error, Refused):
                self._retire_current(model)  # what S3 holds now cannot be checked against the copy
            return done("failed", reason=f"listing failed: {error}")
        if not listing:
            self._retire_current(model)
            return done("failed", reason=f"no objects under s3://{self.source.bucket}/{prefix}")
        key = weights_key(listing, prefix)
        size = sum(o.size for o in listing)
        if self.layout.is_complete(model, key):
            problem = self._make_durable(model, key)  # published in this boot by an agent that did not get to sync
            if problem:
                return done("failed", key, problem)
            self._point(model, key, s3_uri)
            return done("ready", key, size=size)
        self._retire_current(model)  # new pods stream the new version from S3 meanwhile
        problem = self.storage_problem()
        if problem:
            return done("refused", key, problem)
        self.layout.root.mkdir(parents=True, exist_ok=True)
        shortfall = size + self.reserve_bytes - self.free_bytes(self.layout.root)
        if shortfall > 0:
            self.evict(in_use, needed_bytes=shortfall)
            shortfall = size + self.reserve_bytes - self.free_bytes(self.layout.root)
            if shortfall > 0:
                return done("failed", key, f"needs {size} bytes plus reserve; {shortfall} bytes short after eviction")
        temp = None
        try:
            temp = self.layout.new_temp_dir()
            staged = temp / "weights"
            staged.mkdir()
            self.source.download_all(listing, staged, prefix, on_bytes=progress, pause=pause)
            target = self.layout.key_dir(model, key)
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():  # an incomplete folder left by a crash: never trusted, replaced
                remove_tree(target)
            if not rename_no_replace(staged, target):
                return done("failed", key, "the key folder appeared during the download")
            self._write_marker(model, key, files=len(listing), size=size, durable=False)
        except Exception as error:
            return done("failed", key, f"{type(error).__name__}: {error}")
        finally:
            if temp is not None:
                remove_tree(temp)
        self._point(model, key, s3_uri)
        published_at = self.clock()
        problem = self._make_durable(model, key)
        if problem:
            return done("failed", key, problem, published_at=published_at)
        return done("downloaded", key, size=size, published_at=published_at)

    def _write_marker(self, model: str, key: str, *, files: int, size: int, durable: bool) -> None:
        """The copy's marker: what it holds (the pods' plugin checks it before streaming), and whether it is on
        disk; one not on disk names this boot, and needs no fsync of its own (after a crash it is void anyway)."""
        document = {
            "key": key,
            "files": files,
            "bytes": size,
            "time": self.clock(),
            "boot_id": self.layout.boot_id,
            "durable": durable,
        }
        write_atomic(self.layout.complete_marker(model, key), json.dumps(document).encode(), durable=durable)

    def _make_durable(self, model: str, key: str) -> str | None:
        """Puts a copy published from the page cache on disk (one syncfs: every file, one journal commit) and marks
        it durable; None when done. A failed sync (a disk error: some bytes may never reach the disk) withdraws the
        copy: no marker and no pointer, so no new pod chooses it, and the next fill replaces it."""
        marker = self.layout.read_marker(model, key)
        if marker is None or marker.get("durable", True) is True:
            return None
        files, size = marker.get("files"), marker.get("bytes")
        try:
            if not isinstance(files, int) or not isinstance(size, int) or not _count(files) or not _count(size):
                raise OSError(f"its marker counts no files and bytes: {marker!r:.200}")
            sync_filesystem(self.layout.key_dir(model, key))
            self._write_marker(model, key, files=files, size=size, durable=True)
        except OSError as error:
            self.layout.complete_marker(model, key).unlink(missing_ok=True)
            pointer = self.layout.read_pointer(model)
            if pointer is not None and pointer["key"] == key:
                self._retire_current(model)
            return f"the copy could not be written to disk ({error}): withdrawn"
        return None

    def _point(self, model: str, key: str, s3_uri: str) -> None:
        current = self.layout.read_pointer(model)
        if current and current.get("key") != key:
            self._write_retired(model, current["key"])  # before the pointer moves: never unrecorded
        write_atomic(
            self.layout.pointer(model),
            json.dumps({"key": key, "s3_uri": s3_uri, "checked_at": self.clock()}, sort_keys=True).encode(),
        )
        self.layout.retired(model, key).unlink(missing_ok=True)  # current again

    def _write_retired(self, model: str, key: str) -> None:
        write_atomic(self.layout.retired(model, key), json.dumps({"retired_at": self.clock()}).encode())

    def _retire_current(self, model: str) -> None:
        """The retired record first, then the pointer goes: a crash in between leaves both, never neither."""
        current = self.layout.read_pointer(model)
        if current:
            self._write_retired(model, current["key"])
        self.layout.pointer(model).unlink(missing_ok=True)

    def retired_at(self, model: str, key: str) -> float | None:
        try:
            document = parse_json(read_capped(str(self.layout.retired(model, key)), max_bytes=POINTER_MAX_BYTES))
        except Refused:
            return None
        return finite(document.get("retired_at")) if isinstance(document, dict) else None

    def evict(
        self,
        in_use: Callable[[str, str], bool],
        *,
        needed_bytes: int | None = None,
        current_models: set[str] | None = None,
    ) -> list[tuple[str, str]]:
        """Delete folders no current model uses, least recently used first; never one a pod may be reading.

        `in_use(model, key)` says whether a pod on this node may read that copy. With `needed_bytes`, stops
        once that much is freed; otherwise removes every unused non-current copy (and incomplete folders).
        """

        def evictable(model: str, key: str) -> bool:
            pointer = self.layout.read_pointer(model)
            is_current = (
                pointer is not None and pointer["key"] == key and (current_models is None or model in current_models)
            )
            return not is_current and not in_use(model, key)

        candidates = []
        for model, key in self.layout.cached_keys():
            if evictable(model, key):
                marker = self.layout.complete_marker(model, key)
                last_used = self.retired_at(model, key) or (marker.stat().st_mtime if marker.exists() else 0.0)
                candidates.append((last_used, model, key))
        evicted, freed = [], 0
        for _, model, key in sorted(candidates):
            if needed_bytes is not None and freed >= needed_bytes:
                break
            lock = self._locks[model]
            if not lock.acquire(blocking=False):
                continue  # being filled or confirmed right now: next round
            try:
                # Under the model's lock nothing can point at the copy again; checked once more, then made
                # invisible (no complete marker: no pointer, no pod picks it) before it goes.
                if not evictable(model, key):
                    continue
                self.layout.complete_marker(model, key).unlink(missing_ok=True)
            finally:
                lock.release()
            folder = self.layout.key_dir(model, key)
            size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            remove_tree(folder)
            self.layout.retired(model, key).unlink(missing_ok=True)
            freed += size
            evicted.append((model, key))
            self.log.event("weights-evicted", model=model, key=key, bytes=size)
        return evicted

    def forget_model(self, model: str) -> None:
        """A model removed from the config: no pointer, so no pod will choose its local copy again."""
        self.layout.pointer(model).unlink(missing_ok=True)

    def clean_temp(self) -> None:
        remove_tree(self.layout.temp_root())
