"""Restore a node's torch.compile cache from S3, and publish what this node's pods compiled.

Invariants: a configuration's cache folder appears complete or not at all (temp folder on the same
filesystem, checksum verified, atomic no-replace rename into the folder kubelet made), and one that vLLM
created first is never touched; archives and manifests are written once and never replaced or deleted by a
node (the compile-cache bucket's policy enforces it), a manifest after its archive and checked to name one
that exists; a manifest whose archive is gone is skipped (a miss, never a failure forever) until the pruner
removes it; a restored cache always matches the key, and vLLM's own hash still decides whether it is used.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from contracts.cache_key import CompileCacheKey, holds_more
from node_agent.runtime.archive import (
    HashingReader,
    UnsafeArchive,
    content_digest,
    pack,
    packable_files,
    unpack,
    unpack_stream,
)
from node_agent.runtime.compile_manifest import (
    MANIFEST_VERSION,
    CacheLimits,
    compiled_counts,
    engine_caches_held,
    holds_what_it_claims,
    local_hash_dirs,
    new_manifest_name,
    published,
)
from node_agent.runtime.fs import remove_tree, rename_no_replace
from node_agent.runtime.layout import NodeCacheLayout
from node_agent.runtime.log import EventLog
from node_agent.runtime.s3.client import MissingObject
from node_agent.runtime.s3.compile_store import CacheStore


class Status(StrEnum):
    """How a restore or a publish ended (a str: logs and node labels carry the value)."""

    # restore
    RESTORED = "restored"
    PRESENT = "present"  # vLLM's cache folder was there already
    BUSY = "busy"  # vLLM created the folder while the archive downloaded: left to it
    MISS = "miss"
    # publish
    PUBLISHED = "published"
    REPUBLISHED = "republished"
    EXISTS = "exists"
    LOST_RACE = "lost-race"  # another node created the manifest first
    EMPTY = "empty"
    # either
    FAILED = "failed"


@dataclass(frozen=True)
class Outcome:
    status: Status
    reason: str = ""
    bytes: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason, "bytes": self.bytes, "seconds": round(self.seconds, 3)}


def _reporter(event: str, model: str, key: CompileCacheKey, clock: Callable[[], float], log: EventLog):
    """Ends a restore or publish: the outcome, timed from now, logged as one event."""
    started = clock()

    def done(status: Status, reason: str = "", size: int = 0) -> Outcome:
        outcome = Outcome(status, reason, size, clock() - started)
        log.event(event, model=model, key=key.prefix, **outcome.as_dict())
        return outcome

    return done


def restore(
    *,
    store: CacheStore,
    layout: NodeCacheLayout,
    key: CompileCacheKey,
    model: str,
    fingerprint: str,
    node: str,
    clock: Callable[[], float],
    log: EventLog,
    limits: CacheLimits = CacheLimits(),
    progress: Callable[[], None] = lambda: None,
    touch: bool = True,
) -> Outcome:
    """The key's cache restored into the node's folder, or why not. `touch`: record the key's last use for the
    pruner here (the agent does it after writing the marker its pods wait for)."""
    done = _reporter("restore", model, key, clock, log)
    target = layout.model_dir(model, fingerprint)

    # kubelet's empty mount folder is the parent: only the cache folder itself means "present".
    if target.exists():
        return done(Status.PRESENT, "the node already has this configuration's cache (restored or compiled here)")
    try:
        candidates = published(store, key, log, model, limits)
    except Exception as error:  # S3 unreachable, access denied: the pod compiles as usual
        return done(Status.FAILED, f"manifests unreadable: {error}")
    if not candidates:
        return done(Status.MISS, "no cache published for this key yet")
    temp = None
    rejected = None  # why the last archive tried was not used (the next manifest may do)
    try:
        for candidate in candidates:
            manifest = candidate.manifest
            if temp is not None:
                remove_tree(temp)
            temp = layout.new_temp_dir()
            staged = temp / "cache"
            try:
                actual = _fetch_and_unpack(store, manifest, temp, staged, limits, progress)
            except MissingObject:  # written once, removed only by the pruner: the next manifest may do
                log.event("archive-missing", model=model, key=key.prefix, manifest=candidate.name)
                continue
            # A rejected folder is never used: it goes with the temp folder, and the next manifest may do.
            if actual != manifest["sha256"]:
                rejected = f"checksum mismatch: expected {manifest['sha256']}, got {actual}"
            else:
                restored_files = packable_files(staged, max_files=limits.max_files) or []
                rejected = holds_what_it_claims(manifest, restored_files)
            if rejected:
                log.event("archive-rejected", model=model, key=key.prefix, manifest=candidate.name, reason=rejected)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if not rename_no_replace(staged, target):
                return done(
                    Status.BUSY,
                    "vLLM created the cache folder while the archive was downloading (the pod "
                    "started before the restore finished): left to it",
                )
            layout.record_origin(
                model,
                fingerprint,
                {
                    "origin": "restored",
                    "key": key.prefix,
                    "time": clock(),
                    "manifest": candidate.name,
                    "hash_dirs": manifest["hash_dirs"],
                    # What the archive held: a start that compiles files it lacked makes this node's cache fuller.
                    "files": len(restored_files),
                    "counts": compiled_counts(restored_files),
                    "engine_caches": engine_caches_held(restored_files),
                },
            )
            break
        else:
            if rejected:
                return done(Status.FAILED, rejected)
            return done(
                Status.MISS,
                "every published manifest names an archive that is gone (the pruner removes them; "
                "the next Ready pod publishes again)",
            )
    except UnsafeArchive as error:
        return done(Status.FAILED, f"unsafe archive: {error}")
    except Exception as error:  # server gone mid-download, disk full, corrupt stream
        return done(Status.FAILED, f"{type(error).__name__}: {error}")
    finally:
        if temp is not None:
            remove_tree(temp)
    if touch:
        touch_last_use(store=store, key=key, node=node, clock=clock, log=log)
    return done(Status.RESTORED, size=manifest["size"])


def _fetch_and_unpack(store: CacheStore, manifest: dict, temp: Path, staged: Path, limits, progress) -> str:
    """The archive unpacked into `staged`; returns the SHA-256 of the bytes that arrived (the caller compares it
    with the manifest's before using the folder). An archive of one part is unpacked as it streams in (no file
    written and read back: a small restore is then no slower than a plain download and untar); a larger one is
    fetched in parallel ranges to a file first."""
    if manifest["size"] <= store.part_bytes:
        body = store.open_object(manifest["archive"], manifest["size"])
        with body:
            reader = HashingReader(body)
            unpack_stream(reader, staged, max_bytes=limits.max_archive_bytes, max_files=limits.max_files)
            # What the unpacker left (the end of the frame) counts too, up to one byte past the manifest's size.
            while reader.size <= manifest["size"] and reader.read(min(1 << 20, manifest["size"] + 1 - reader.size)):
                pass
        progress()
        return reader.sha256.hexdigest() if reader.size == manifest["size"] else f"{reader.size} bytes"
    archive = temp / "archive.tar.zst"
    digest = hashlib.sha256()
    store.download(manifest["archive"], archive, manifest["size"], on_part=lambda _: progress(), digest=digest)
    actual = digest.hexdigest()
    if actual == manifest["sha256"]:
        unpack(archive, staged, max_bytes=limits.max_archive_bytes, max_files=limits.max_files)
    archive.unlink()
    return actual


def publish(
    *,
    store: CacheStore,
    layout: NodeCacheLayout,
    key: CompileCacheKey,
    model: str,
    fingerprint: str,
    node: str,
    clock: Callable[[], float],
    log: EventLog,
    limits: CacheLimits = CacheLimits(),
) -> Outcome:
    """Publishes this node's cache unless a published one already holds every vLLM hash folder it has, with as
    many files in each.

    Everything is written once (If-None-Match; the bucket policy refuses anything else): the archive under a
    name no one else uses, then a manifest named by the set of hash folders it holds (and, for a fuller one of
    the same folders, by its files). A node whose vLLM made a folder or files the published cache lacks adds a
    manifest; restores take the fullest. Nothing is ever replaced or deleted by a node: a lost race or a broken
    manifest is the pruner's to collect."""
    done = _reporter("publish", model, key, clock, log)
    source = layout.model_dir(model, fingerprint)
    local = local_hash_dirs(layout, model, fingerprint)
    if not local:
        return done(Status.EMPTY, "vLLM has not written a compile cache on this node yet")
    try:
        files = packable_files(source, max_files=limits.max_files)
        if files is None:
            return done(Status.FAILED, f"the cache folder holds more than {limits.max_files} files")
        counts, held, content = compiled_counts(files), engine_caches_held(files), content_digest(files)
        candidates = published(store, key, log, model, limits)
        covering = next(
            (
                p
                for p in candidates
                if p.covers(local, counts, len(files), held, content) and store.exists(p.manifest["archive"])
            ),
            None,
        )
        if covering is not None:
            layout.record_origin(
                model,
                fingerprint,
                {
                    "origin": "already-published",
                    "key": key.prefix,
                    "hash_dirs": sorted(covering.hash_dirs),
                    "seen": local,
                    "files": len(files),
                    "counts": counts,
                    "engine_caches": held,
                },
            )
            return done(
                Status.EXISTS,
                "a published cache already holds every vLLM hash folder, with as many files in each as this node",
            )
        names = {p.name for p in candidates}
        name = new_manifest_name(key, local, content, names)
        if name in names:
            return done(
                Status.FAILED,
                "the manifest for this node's hash folders and files names an archive that is gone; "
                "manifests are never replaced, the pruner removes it",
            )
    except Exception as error:
        return done(Status.FAILED, f"manifest check failed: {error}")
    temp = None
    try:
        temp = layout.new_temp_dir()  # inside: a full disk ends this publish, not the agent's tick
        packed = pack(source, temp / "archive.tar.zst", max_bytes=limits.max_archive_bytes, max_files=limits.max_files)
        if packed.files == 0:
            return done(Status.EMPTY, "the cache folder holds no files")
        if packed.content != content:  # vLLM wrote while the agent packed: name what was packed
            name = new_manifest_name(key, local, packed.content, names)
        packed_counts, packed_held = compiled_counts(packed.names), engine_caches_held(packed.names)
        uploaded = key.archive_key(packed.sha256, uuid.uuid4().hex[:16])
        store.upload_file_if_absent(packed.path, uploaded)
        document = {
            "version": MANIFEST_VERSION,
            "digest": key.digest,
            "factors": key.factors,
            "archive": uploaded,
            "sha256": packed.sha256,
            "size": packed.size,
            "files": packed.files,
            "content": packed.content,
            "counts": packed_counts,
            "engine_caches": packed_held,
            "hash_dirs": local,
            "published_by": node,
            "published_at": clock(),
        }
        if not store.put_json_if_absent(name, document):
            # Another node published the same hash folders first; our archive is the pruner's to collect.
            layout.record_origin(
                model,
                fingerprint,
                {
                    "origin": "already-published",
                    "key": key.prefix,
                    "hash_dirs": local,
                    "seen": local,
                    "files": packed.files,
                    "counts": packed_counts,
                    "engine_caches": packed_held,
                },
            )
            return done(Status.LOST_RACE, "another node published these hash folders and files first")
        if not store.exists(uploaded):  # removed between upload and manifest (a pruner run): put it back
            store.upload_file_if_absent(packed.path, uploaded)
            log.event("archive-restored-after-manifest", model=model, key=key.prefix)
        layout.record_origin(
            model,
            fingerprint,
            {
                "origin": "published",
                "key": key.prefix,
                "time": clock(),
                "manifest": name,
                "hash_dirs": local,
                "seen": local,
                "files": packed.files,
                "counts": packed_counts,
                "engine_caches": packed_held,
            },
        )
    except Exception as error:
        return done(Status.FAILED, f"{type(error).__name__}: {error}")
    finally:
        if temp is not None:
            remove_tree(temp)
    touch_last_use(store=store, key=key, node=node, clock=clock, log=log)
    return done(Status.REPUBLISHED if candidates else Status.PUBLISHED, size=packed.size)


def needs_publish(
    layout: NodeCacheLayout, model: str, fingerprint: str, *, max_files: int, count_files: bool = True
) -> bool:
    """Nothing recorded yet, vLLM wrote hash folders the record has not seen, or (with `count_files`) a hash
    folder holds more files than in the archive it came from or went into (vLLM wrote more after the archive was
    taken, or compiled what a restored archive lacked): a fuller archive is worth publishing. Files, not folder
    names: an archive taken before vLLM finished has every folder and not every file."""
    origin = layout.origin(model, fingerprint)
    if origin is None:
        return True
    local = local_hash_dirs(layout, model, fingerprint)
    if set(local) - set(origin.get("hash_dirs", [])) and origin.get("seen") != local:
        return True
    if not count_files:
        return False
    files = packable_files(layout.model_dir(model, fingerprint), max_files=max_files)
    if files is None:
        return False
    recorded = origin.get("counts")
    if isinstance(recorded, dict) and holds_more(compiled_counts(files), recorded):
        return True
    # An engine cache the archive lacked (DeepGEMM's kernels, the startup plan; or a record from before them).
    return not set(engine_caches_held(files)) <= set(origin.get("engine_caches") or [])


def touch_last_use(
    *, store: CacheStore, key: CompileCacheKey, node: str, clock: Callable[[], float], log: EventLog
) -> None:
    """The pruner keeps keys with a recent object; losing one touch only ages a key early."""
    try:
        store.put_json(key.last_use_key, {"node": node, "time": clock()})
    except Exception as error:
        log.event("last-use-failed", key=key.prefix, reason=str(error))
