"""Model weights on the node's NVMe: one folder per (model, weights key), complete or absent.

The key is derived from the S3 listing (key, size, ETag of every object), so new files at the same S3
path make a new key: the update is detected and served, unlike a cache keyed by path. A pointer per model
names the current complete copy and when the agent last confirmed it against S3; the pods' entry script
uses the local copy only while that pointer is fresh, and streams from S3 otherwise.

A copy is published as soon as every byte is verified, before the disk has all of it (whole blocks go to the disk
as they arrive, direct_io.FileWriter; files' tails and the folder's metadata are still in the page cache), so a
pod need not wait for the sync. Its marker is then `<key>.published`, naming the boot: trusted in that boot
only (a crash or a reboot may lose unsynced bytes), and unknown to agents and entry steps of earlier versions, which
read `<key>.complete` alone. The agent then syncs the filesystem through a descriptor opened before the first
write (so a writeback error during the download is reported to it, whoever else synced meanwhile), writes
`<key>.complete` and removes the published marker; if the sync fails, the copy is withdrawn. A published copy left
by an agent that died before its sync is withdrawn and filled again: no sync could vouch for it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from contracts.file_identity import identities, record_identities
from node_agent.runtime.fs import current_boot_id, remove_tree, rename_no_replace, syncfs, write_atomic
from node_agent.runtime.log import EventLog
from node_agent.runtime.s3.weights_download import ListedObject, WeightsSource
from node_agent.runtime.untrusted import Refused, finite, parse_json, read_capped

STATE = ".warmstart"
POINTER_MAX_BYTES = 64 * 1024
# A marker lists every file's identity (contracts/file_identity.py): its path and at most 100 bytes more a file.
MARKER_MAX_BYTES = 4 * 2**20
IDENTITY_BYTES_PER_FILE = 100
WITHDRAWN_IN_USE = "the withdrawn copy is read by a pod: filled again once it is not"
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


@dataclass(frozen=True)
class WeightsLayout:
    root: Path
    # The boot this agent runs in (what a copy not yet on disk is good for); None where it cannot be read.
    boot_id: str | None = field(default_factory=current_boot_id)

    def key_dir(self, model: str, key: str) -> Path:
        return self.root / model / key

    def complete_marker(self, model: str, key: str) -> Path:
        """Written only after every file is verified, the folder renamed into place and synced to disk."""
        return self.root / model / f"{key}.complete"

    def published_marker(self, model: str, key: str) -> Path:
        """Every file verified and the folder in place, not yet synced: good in the boot it names only."""
        return self.root / model / f"{key}.published"

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

    def _read_object(self, path: Path, max_bytes: int = POINTER_MAX_BYTES) -> dict | None:
        try:
            document = parse_json(read_capped(str(path), max_bytes=max_bytes))
        except Refused:
            return None
        return document if isinstance(document, dict) else None

    def read_marker(self, model: str, key: str) -> dict | None:
        """The marker that vouches for the copy: its completion marker, or its published marker of this boot.
        The pods' plugin reads them by the same rule (model_workload/runtime/node_copy_loader.py copy_marker).
        A marker without the files' identities (an earlier version's) vouches for nothing: the pods would not serve
        its copy, so it is filled again once no pod reads it.
        """
        durable = self._read_object(self.complete_marker(model, key), MARKER_MAX_BYTES)
        if durable is not None:
            return durable if identities(durable) is not None else None
        published = self._read_object(self.published_marker(model, key), MARKER_MAX_BYTES)
        if published is not None and self.boot_id is not None and published.get("boot_id") == self.boot_id:
            return published if identities(published) is not None else None
        return None

    def is_durable(self, model: str, key: str) -> bool:
        return self._read_object(self.complete_marker(model, key), MARKER_MAX_BYTES) is not None

    def is_complete(self, model: str, key: str) -> bool:
        """Vouched for by a marker (read_marker), its folder in place."""
        return self.read_marker(model, key) is not None and self.key_dir(model, key).is_dir()

    def unmark(self, model: str, key: str) -> None:
        self.complete_marker(model, key).unlink(missing_ok=True)
        self.published_marker(model, key).unlink(missing_ok=True)

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


class NodeCopies:
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
            status: str,
            key: str = "",
            reason: str = "",
            size: int = 0,
            published_at: float | None = None,
            page_cache_bytes: int | None = None,
        ) -> SyncOutcome:
            published = None if published_at is None else published_at - started
            outcome = SyncOutcome(status, key, reason, size, self.clock() - started, published)
            extra: dict = {} if published is None else {"published_seconds": round(published, 3)}
            if page_cache_bytes is not None:
                extra["page_cache_bytes"] = page_cache_bytes
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
        self._upgrade_marker(model, key)
        if self.layout.is_complete(model, key) and not self.layout.is_durable(model, key):
            # Published by an agent that died before its sync: nothing can say its bytes reached the disk.
            self._withdraw(model, key)
            self.log.event("weights-withdrawn", model=model, key=key, reason="published, never synced")
        if self.layout.is_complete(model, key):
            try:
                self._point(model, key, s3_uri)
            except OSError as error:  # a full disk: the copy stays verified, the pointer is written next round
                return done("failed", key, f"the pointer could not be written ({error}); the copy is kept")
            return done("ready", key, size=size)
        self._retire_current(model)  # new pods stream the new version from S3 meanwhile
        marker_bytes = sum(len(o.key) - len(prefix) + IDENTITY_BYTES_PER_FILE for o in listing) + 1024
        if marker_bytes > MARKER_MAX_BYTES:  # no marker could vouch for the copy: it would be downloaded each round
            return done(
                "failed",
                key,
                f"{len(listing)} files: their identities would take {marker_bytes} bytes, more than a marker holds "
                f"({MARKER_MAX_BYTES}); pods stream this model from S3",
            )
        if self.layout.key_dir(model, key).exists() and in_use(model, key):
            # Withdrawn (never synced, or vouched for by an older marker) while a pod of this boot reads it: the
            # folder stays as it is until no pod does; pods that start meanwhile stream from S3 (no pointer).
            return done("busy", key, WITHDRAWN_IN_USE)
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
        self.layout.unmark(model, key)  # a marker left without its folder must never vouch for the new one
        temp, errors = None, None
        try:
            try:
                temp = self.layout.new_temp_dir()
                # Opened before the first write: its syncfs reports every writeback error of the filesystem from
                # now on, even one that another process's sync saw first (the error is sampled at open).
                errors = os.open(temp, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                staged = temp / "weights"
                staged.mkdir()
                page_cache_bytes = self.source.download_all(listing, staged, prefix, on_bytes=progress, pause=pause)
                target = self.layout.key_dir(model, key)
                target.parent.mkdir(parents=True, exist_ok=True)
                if target.exists():  # an incomplete or withdrawn folder: never trusted, replaced once no pod reads it
                    if in_use(model, key):
                        return done("busy", key, WITHDRAWN_IN_USE)
                    remove_tree(target)
                if not rename_no_replace(staged, target):
                    return done("failed", key, "the key folder appeared during the download")
                document = {
                    "key": key,
                    "files": len(listing),
                    "bytes": size,
                    "boot_id": self.layout.boot_id,
                    # What the pods serve and stream, file by file: what was verified, never what is there later.
                    "identity": record_identities(str(target)),
                }
                # No fsync of its own: after a crash it is void anyway (another boot).
                write_atomic(self.layout.published_marker(model, key), json.dumps(document).encode(), durable=False)
            except Exception as error:
                return done("failed", key, f"{type(error).__name__}: {error}")
            finally:
                if temp is not None:
                    remove_tree(temp)
            try:
                self._point(model, key, s3_uri)
            except OSError as error:  # a full disk: pods stream from S3 until the next round points at the copy
                self.log.event(
                    "weights-pointer-failed", model=model, key=key, reason=f"{type(error).__name__}: {error}"
                )
            published_at = self.clock()
            try:
                syncfs(errors)
                write_atomic(self.layout.complete_marker(model, key), json.dumps(document).encode())
            except OSError as error:
                self._withdraw(model, key)
                reason = f"the copy could not be written to disk ({error}): withdrawn"
                return done("failed", key, reason, published_at=published_at)
            self.layout.published_marker(model, key).unlink(missing_ok=True)
            # Bytes not written straight to the disk: near the whole size, the filesystem refused O_DIRECT.
            return done("downloaded", key, size=size, published_at=published_at, page_cache_bytes=page_cache_bytes)
        finally:
            if errors is not None:
                os.close(errors)

    def _upgrade_marker(self, model: str, key: str) -> None:
        """A completion marker an earlier agent wrote counts the files and bytes it verified but lists no
        identities, so no pod would serve its copy. The copy gets them once, if it still holds exactly the regular
        files and bytes that marker counted (what that agent's pods checked before they served it); otherwise it is
        filled again once no pod reads it."""
        path = self.layout.complete_marker(model, key)
        document = self.layout._read_object(path, MARKER_MAX_BYTES)
        if document is None or "identity" in document:
            return
        try:
            table = record_identities(str(self.layout.key_dir(model, key)))
        except OSError:
            return  # a link or another kind of file in the copy: not what that agent left
        if (document.get("files"), document.get("bytes")) != (len(table), sum(v[1] for v in table.values())):
            return
        write_atomic(path, json.dumps({**document, "identity": table}).encode())
        self.log.event("weights-marker-upgraded", model=model, key=key, files=len(table))

    def _withdraw(self, model: str, key: str) -> None:
        """No marker and no pointer: no new pod chooses the copy, and the next fill replaces it."""
        self.layout.unmark(model, key)
        pointer = self.layout.read_pointer(model)
        if pointer is not None and pointer["key"] == key:
            self._retire_current(model)

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
                marked = (self.layout.complete_marker(model, key), self.layout.published_marker(model, key))
                marked_at = max((m.stat().st_mtime for m in marked if m.exists()), default=0.0)
                last_used = self.retired_at(model, key) or marked_at
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
                self.layout.unmark(model, key)
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
