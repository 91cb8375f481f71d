"""Restore a node's torch.compile cache from S3, and publish what the first pod compiled.

Invariants: a model folder appears complete or not at all (temp folder on the same filesystem, checksum
verified, atomic no-replace rename); a key's manifest is written last and only if absent, so the first
publisher wins and concurrent nodes never mix their bytes; a restored cache always matches the key.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from agent.archive import UnsafeArchive, pack, unpack
from agent.fs import is_non_empty_dir, remove_tree, rename_no_replace
from agent.layout import NodeCacheLayout
from agent.log import EventLog
from agent.s3_store import CacheStore
from warmstart.cache_key import CompileCacheKey

MANIFEST_VERSION = 1


@dataclass(frozen=True)
class Outcome:
    status: str  # restore: restored | present | miss | failed; publish: published | exists | lost-race | empty | failed
    reason: str = ""
    bytes: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"status": self.status, "reason": self.reason, "bytes": self.bytes, "seconds": round(self.seconds, 3)}


def _reporter(event: str, model: str, key: CompileCacheKey, clock: Callable[[], float], log: EventLog):
    """Ends a restore or publish: the outcome, timed from now, logged as one event."""
    started = clock()

    def done(status: str, reason: str = "", size: int = 0) -> Outcome:
        outcome = Outcome(status, reason, size, clock() - started)
        log.event(event, model=model, key=key.prefix, **outcome.as_dict())
        return outcome

    return done


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_manifest(manifest: dict, key: CompileCacheKey) -> str | None:
    """Why a manifest cannot be trusted for this key, or None."""
    if manifest.get("version") != MANIFEST_VERSION:
        return f"manifest version {manifest.get('version')!r} is not {MANIFEST_VERSION}"
    if manifest.get("digest") != key.digest or manifest.get("factors") != key.factors:
        return "manifest describes another configuration"
    sha, size = manifest.get("sha256"), manifest.get("size")
    if not (isinstance(sha, str) and len(sha) == 64 and isinstance(size, int) and size > 0):
        return "manifest lacks a valid checksum or size"
    if manifest.get("archive") != key.archive_key(sha):
        return "manifest points outside its key"
    return None


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
) -> Outcome:
    done = _reporter("restore", model, key, clock, log)
    target = layout.model_dir(model, fingerprint)

    if is_non_empty_dir(target):
        return done("present", "the node already has a compile cache for this configuration")
    try:
        manifest = store.get_json(key.manifest_key)
    except Exception as error:  # S3 unreachable, access denied: the pod compiles as usual
        return done("failed", f"manifest unreadable: {error}")
    if manifest is None:
        return done("miss", "no cache published for this key yet")
    problem = _check_manifest(manifest, key)
    if problem:
        return done("failed", problem)
    temp = None
    try:
        temp = layout.new_temp_dir()
        archive = temp / "archive.tar.zst"
        store.download(manifest["archive"], archive, manifest["size"])
        actual = sha256_of(archive)
        if actual != manifest["sha256"]:
            return done("failed", f"checksum mismatch: expected {manifest['sha256']}, got {actual}")
        staged = temp / "cache"
        unpack(archive, staged)
        archive.unlink()
        target.parent.mkdir(parents=True, exist_ok=True)
        if not rename_no_replace(staged, target):
            return done("present", "a pod created the folder while the archive was downloading")
        layout.record_origin(model, fingerprint, {"origin": "restored", "key": key.prefix, "time": clock()})
    except UnsafeArchive as error:
        return done("failed", f"unsafe archive: {error}")
    except Exception as error:  # server gone mid-download, disk full, corrupt stream
        return done("failed", f"{type(error).__name__}: {error}")
    finally:
        if temp is not None:
            remove_tree(temp)
    touch_last_use(store=store, key=key, node=node, clock=clock, log=log)
    return done("restored", size=manifest["size"])


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
) -> Outcome:
    done = _reporter("publish", model, key, clock, log)
    source = layout.model_dir(model, fingerprint)

    if not is_non_empty_dir(source):
        return done("empty", "nothing compiled on this node yet")
    try:
        if store.exists(key.manifest_key):
            layout.record_origin(model, fingerprint, {"origin": "already-published", "key": key.prefix})
            return done("exists", "another node published this key")
    except Exception as error:
        return done("failed", f"manifest check failed: {error}")
    temp = layout.new_temp_dir()
    uploaded = None
    try:
        packed = pack(source, temp / "archive.tar.zst")
        if packed.files == 0:
            return done("empty", "the cache folder holds no files")
        uploaded = key.archive_key(packed.sha256)
        store.upload_file(packed.path, uploaded)
        manifest = {
            "version": MANIFEST_VERSION,
            "digest": key.digest,
            "factors": key.factors,
            "archive": uploaded,
            "sha256": packed.sha256,
            "size": packed.size,
            "files": packed.files,
            "published_by": node,
            "published_at": clock(),
        }
        if not store.put_json_if_absent(key.manifest_key, manifest):
            if uploaded != _winning_archive(store, key):
                store.delete(uploaded)  # ours lost: leave no orphan behind
            layout.record_origin(model, fingerprint, {"origin": "already-published", "key": key.prefix})
            return done("lost-race", "another node published this key first")
        layout.record_origin(model, fingerprint, {"origin": "published", "key": key.prefix, "time": clock()})
    except Exception as error:
        return done("failed", f"{type(error).__name__}: {error}")
    finally:
        remove_tree(temp)
    touch_last_use(store=store, key=key, node=node, clock=clock, log=log)
    return done("published", size=packed.size)


def _winning_archive(store: CacheStore, key: CompileCacheKey) -> str | None:
    manifest = store.get_json(key.manifest_key)
    return manifest.get("archive") if manifest else None


def touch_last_use(*, store: CacheStore, key: CompileCacheKey, node: str, clock: Callable[[], float], log: EventLog) -> None:
    """The pruner keeps keys whose last-use record is recent; losing one touch only ages a key early."""
    try:
        store.put_json(key.last_use_key, {"node": node, "time": clock()})
    except Exception as error:
        log.event("last-use-failed", key=key.prefix, reason=str(error))

