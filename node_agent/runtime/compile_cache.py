"""Restore a node's torch.compile cache from S3, publish what this node's pods compiled, and tell whether a
pod's vLLM used a cache.

Invariants: a configuration's cache folder appears complete or not at all (temp folder on the same
filesystem, checksum verified, atomic no-replace rename into the folder kubelet made), and one that vLLM
created first is never touched; archives and manifests are written once and never replaced or deleted by a
node (the compile-cache bucket's policy enforces it), a manifest after its archive and checked to name one
that exists; a manifest whose archive is gone is skipped (a miss, never a failure forever) until the pruner
removes it; a restored cache always matches the key, and vLLM's own hash still decides whether it is used.
"""

from __future__ import annotations

import hashlib
import math
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import TypeGuard

from contracts.cache_key import MANIFEST_MAX_BYTES, MAX_CACHE_FILES, CompileCacheKey, counts_fit, holds_more
from contracts.node_layout import COMPILE_CACHE_CONTENT
from node_agent.runtime.archive import (
    FACTORS_FILE,
    FACTORS_MAX_BYTES,
    HashingReader,
    UnsafeArchive,
    content_digest,
    pack,
    packable_files,
    unpack,
    unpack_stream,
)
from node_agent.runtime.fs import remove_tree, rename_no_replace
from node_agent.runtime.layout import NodeCacheLayout
from node_agent.runtime.log import EventLog
from node_agent.runtime.s3_store import CacheStore, MissingObject
from node_agent.runtime.untrusted import Refused, beneath_folder_names, read_json_beneath
from node_agent.runtime.vllm_log import VllmStart

MANIFEST_VERSION = 2  # 2: lists vLLM's hash folders, archives carry an upload nonce
VLLM_FOLDER = "vllm"  # VLLM_CACHE_ROOT inside a configuration's cache folder (warmstart.workload.vllm_env)


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


# vLLM makes one or two hash folders per configuration; a pod that makes millions costs the agent at most this many.
MAX_LISTED_HASH_DIRS = 256
_HASH_ROOT = ("torch_compile_cache",)
_AOT_ROOT = ("torch_compile_cache", "torch_aot_compile")


def local_hash_dirs(layout: NodeCacheLayout, model: str, fingerprint: str) -> list[str]:
    """vLLM's hash folders in a configuration's cache, as the entry step lists them (vllm_entry.vllm_hash_dirs),
    but walked from the folder kubelet made without following a link on the way (the folders below it are the
    pod's), and at most MAX_LISTED_HASH_DIRS of them."""
    config = str(layout.config_dir(model, fingerprint))
    found: list[str] = []
    for parts in (_HASH_ROOT, _AOT_ROOT):
        names = beneath_folder_names(config, [COMPILE_CACHE_CONTENT, VLLM_FOLDER, *parts], limit=MAX_LISTED_HASH_DIRS)
        found += [
            "/".join([*parts, name]) for name in names if not (parts == _HASH_ROOT and name == "torch_aot_compile")
        ]
    return sorted(found)[:MAX_LISTED_HASH_DIRS]


def compiled_counts(files: list[str]) -> dict[str, int]:
    """Files per vLLM hash folder (named as local_hash_dirs names them), from a cache folder's file names. What
    makes one archive fuller than another: at least as many files in every hash folder. Files outside them
    (Triton's cache, vLLM's model-info and kernel caches) travel in the archive but grow with traffic, so they
    decide nothing."""
    counts: dict[str, int] = {}
    for name in files:
        parts = name.split("/")
        if parts[:2] != [VLLM_FOLDER, _HASH_ROOT[0]] or len(parts) < 4:
            continue
        if parts[2] == _AOT_ROOT[1]:
            if len(parts) < 5:
                continue
            folder = "/".join(parts[1:4])
        else:
            folder = "/".join(parts[1:3])
        counts[folder] = counts.get(folder, 0) + 1
    return counts


@dataclass(frozen=True)
class CacheLimits:
    """What any node may have written to S3 is bounded before it is used: a manifest is any node's claim (writes
    are create-only, not trusted-writer-only). The archive limit is the NVMe the config reserves for the compile
    cache (caches.compile_cache_reserve_gb); the rest are far above what vLLM writes."""

    max_archive_bytes: int = 10 * 10**9
    max_files: int = MAX_CACHE_FILES
    max_manifest_bytes: int = MANIFEST_MAX_BYTES
    max_manifests: int = 64
    max_listed: int = 4096  # object names under a key's manifest prefix (a few dozen bytes each)
    max_hash_dirs: int = 256


_MANIFEST_NAME = re.compile(r"^[0-9a-f]{16}\.json$")
_HASH_DIR = re.compile(r"^torch_compile_cache/(torch_aot_compile/)?[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_manifest(manifest: object, key: CompileCacheKey, name: str, limits: CacheLimits) -> str | None:
    """Why a manifest cannot be trusted for this key, or None."""
    if not isinstance(manifest, dict):
        return "manifest is not a JSON object"
    if manifest.get("version") != MANIFEST_VERSION or isinstance(manifest.get("version"), bool):
        return f"manifest version is not {MANIFEST_VERSION}"
    if manifest.get("digest") != key.digest or manifest.get("factors") != key.factors:
        return "manifest describes another configuration"
    sha, size, files = manifest.get("sha256"), manifest.get("size"), manifest.get("files", 1)
    if not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha) and _whole(size)):
        return "manifest lacks a valid checksum or size"
    if not 0 < size <= limits.max_archive_bytes:
        return f"manifest claims {size} bytes, outside 1..{limits.max_archive_bytes} (what the compile cache may take)"
    if not _whole(files) or not 0 < files <= limits.max_files:
        return f"manifest claims a file count outside 1..{limits.max_files}"
    if not isinstance(manifest.get("archive"), str) or not key.names_archive(manifest["archive"], sha):
        return "manifest points outside its key"
    hash_dirs = manifest.get("hash_dirs")
    if not isinstance(hash_dirs, list) or not all(isinstance(d, str) and _HASH_DIR.fullmatch(d) for d in hash_dirs):
        return "manifest lists no valid vLLM hash folders"
    if len(hash_dirs) > limits.max_hash_dirs:
        return f"manifest lists more than {limits.max_hash_dirs} hash folders"
    published_at = manifest.get("published_at", 0)
    if isinstance(published_at, bool) or not isinstance(published_at, (int, float)) or not math.isfinite(published_at):
        return "manifest has no valid publication time"
    content = manifest.get("content")
    if content is not None and not (isinstance(content, str) and re.fullmatch(r"[0-9a-f]{16}", content)):
        return "manifest has no valid file digest"
    if not counts_fit(manifest.get("counts", {}), hash_dirs, files):
        return "manifest has no valid file counts per hash folder"
    if not key.names_manifest(name, hash_dirs, content):
        return "manifest is stored under another name than its hash folders and files give"
    return None


@dataclass(frozen=True)
class Published:
    name: str
    manifest: dict

    @property
    def hash_dirs(self) -> set[str]:
        return set(self.manifest["hash_dirs"])

    @property
    def files(self) -> int:
        return int(self.manifest.get("files", 1))

    @property
    def counts(self) -> dict[str, int] | None:
        """Files per hash folder; None for a manifest from before them."""
        return self.manifest.get("counts")

    def covers(self, hash_dirs: list[str], counts: dict[str, int], files: int) -> bool:
        """Holds every one of these hash folders, with at least as many files in each (by its total, for a manifest
        from before counts per folder)."""
        if not set(hash_dirs) <= self.hash_dirs:
            return False
        return not holds_more(counts, self.counts) if self.counts is not None else self.files >= files


def published(
    store: CacheStore, key: CompileCacheKey, log: EventLog, model: str, limits: CacheLimits
) -> list[Published]:
    """Every trustworthy manifest of the key, the most complete first (most hash folders, then most files in them,
    then most files, then newest)."""
    found = []
    # Any node may create objects under the key: only names of the manifest form are read (a junk object named to
    # sort first hides nothing), at most max_manifests of them.
    listed = store.list_keys(key.manifest_prefix, limit=limits.max_listed)
    names = [n for n in listed if _MANIFEST_NAME.fullmatch(n.removeprefix(key.manifest_prefix))]
    if len(names) > limits.max_manifests:
        log.event("manifest-refused", model=model, key=key.prefix, reason=f"more than {limits.max_manifests}")
        names = names[: limits.max_manifests]
    for name in names:
        try:
            manifest = store.get_json(name, max_bytes=limits.max_manifest_bytes)
        except Refused as refusal:
            log.event("manifest-refused", model=model, key=key.prefix, manifest=name, reason=refusal.reason)
            continue
        problem = None if manifest is None else _check_manifest(manifest, key, name, limits)
        if problem:
            log.event("manifest-refused", model=model, key=key.prefix, manifest=name, reason=problem)
        elif manifest is not None:
            found.append(Published(name, manifest))
    return sorted(
        found,
        key=lambda p: (
            -len(p.hash_dirs),
            -(sum(p.counts.values()) if p.counts is not None else 0),
            -p.files,
            -float(p.manifest.get("published_at") or 0),
        ),
    )


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
                rejected = _holds_what_it_claims(manifest, restored_files)
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


def _holds_what_it_claims(manifest: dict, files: list[str]) -> str | None:
    """Why an unpacked archive is not what its manifest says it holds (the count and names of its files, per hash
    folder: what restores rank archives by and publishers compare with), or None."""
    if "content" not in manifest:
        return None  # a manifest from before file digests claims only its checksum, checked already
    if len(files) != manifest["files"] or content_digest(files) != manifest["content"]:
        return f"the archive holds {len(files)} files, not the {manifest['files']} its manifest names"
    if "counts" in manifest and compiled_counts(files) != manifest["counts"]:
        return "the archive's files per hash folder are not those its manifest names"
    return None


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
        counts = compiled_counts(files)
        candidates = published(store, key, log, model, limits)
        covering = next(
            (p for p in candidates if p.covers(local, counts, len(files)) and store.exists(p.manifest["archive"])),
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
                },
            )
            return done(
                Status.EXISTS,
                "a published cache already holds every vLLM hash folder, with as many files in each as this node",
            )
        names = {p.name for p in candidates}
        name = _manifest_name(key, local, content_digest(files), names)
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
        if packed.content != content_digest(files):  # vLLM wrote while the agent packed: name what was packed
            name = _manifest_name(key, local, packed.content, names)
        packed_counts = compiled_counts(packed.names)
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
            },
        )
    except Exception as error:
        return done(Status.FAILED, f"{type(error).__name__}: {error}")
    finally:
        if temp is not None:
            remove_tree(temp)
    touch_last_use(store=store, key=key, node=node, clock=clock, log=log)
    return done(Status.REPUBLISHED if candidates else Status.PUBLISHED, size=packed.size)


def _manifest_name(key: CompileCacheKey, hash_dirs: list[str], content: str, taken: set[str]) -> str:
    """The first manifest of a set of hash folders is named by them alone (agents before file digests read only
    that name); a fuller one of the same folders by its files too."""
    plain = key.manifest_key(hash_dirs)
    return plain if plain not in taken else key.manifest_key(hash_dirs, content)


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
    recorded = origin.get("counts")
    if not count_files or not isinstance(recorded, dict):
        return False  # a record from before file counts: the folders decide
    files = packable_files(layout.model_dir(model, fingerprint), max_files=max_files)
    return files is not None and holds_more(compiled_counts(files), recorded)


def touch_last_use(
    *, store: CacheStore, key: CompileCacheKey, node: str, clock: Callable[[], float], log: EventLog
) -> None:
    """The pruner keeps keys with a recent object; losing one touch only ages a key early."""
    try:
        store.put_json(key.last_use_key, {"node": node, "time": clock()})
    except Exception as error:
        log.event("last-use-failed", key=key.prefix, reason=str(error))


# ---- did vLLM use a cache? ----


class Cause(StrEnum):
    """Why a start hit or missed, in one fixed word (a node label's value, a metric's label); the event carries the
    whole reason."""

    LOADED = "loaded"  # vLLM loaded a compiled graph
    LOAD_FAILURE = "load-failure"  # vLLM found a compiled artifact, could not load it and compiled again
    HASH_CHANGED = "hash-changed"  # a cache was there, vLLM computed another hash and compiled
    NOT_RESTORED = "not-restored"  # nothing was there when vLLM started (no cache published, a late restore)
    COMPILED = "compiled"  # vLLM says it compiled, the folders say nothing more
    NONE = "none"  # torch.compile off, or not judged


@dataclass(frozen=True)
class Observation:
    outcome: str  # hit | miss | none
    source: str  # restored | local | compiled | none
    expected_hit: bool
    reason: str
    new_dirs: list[str] = field(default_factory=list)
    cause: Cause = Cause.NONE
    evidence: str = "folders"  # vllm-log: vLLM's own lines decided; folders: its hash folders did (no log lines)


# vllm/compilation/decorators.py (_verify_source_unchanged, 0.21.0-0.34.0): the load failure of an artifact traced
# from other source files.
STALE_SOURCE = "Source code has changed since the last compilation"


def with_engine_evidence(folders: Observation, vllm: VllmStart | None) -> Observation:
    """The start judged by what vLLM said first, its hash folders only where it said nothing (no log file, or a
    release whose lines the parser does not know). A folder that was there and stayed is not a hit: vLLM may have
    found the artifact and failed to load it (a corrupt file, a torch error, vLLM's CPU backend on every start),
    then compiled again into the same folder, so nothing new appears."""
    if vllm is None or vllm.compile_cache is None:  # a load failure line is a compile line too (a miss)
        return folders
    if vllm.load_failure is not None:
        # vLLM refuses an artifact whose traced sources changed (a patched image of the same version) the same way.
        stale = STALE_SOURCE in vllm.load_failure
        return replace(
            folders,
            outcome="miss",
            source=folders.source if folders.outcome == "hit" else "compiled",
            expected_hit=True,
            reason=f"vLLM could not load the compiled graph and compiled again: {vllm.load_failure}",
            cause=Cause.HASH_CHANGED if stale else Cause.LOAD_FAILURE,
            evidence="vllm-log",
        )
    if vllm.compile_cache == "miss":
        if folders.outcome == "miss":
            return replace(folders, evidence="vllm-log")
        return replace(
            folders,
            outcome="miss",
            source="compiled",
            expected_hit=folders.outcome == "hit",
            reason="vLLM compiled (its log), though it wrote no new hash folder",
            cause=Cause.COMPILED,
            evidence="vllm-log",
        )
    if folders.outcome == "hit":
        return replace(folders, evidence="vllm-log")
    return Observation(
        "hit",
        "local",
        True,
        f"vLLM loaded a compiled graph from the cache (its log), though its hash folders say: {folders.reason}",
        folders.new_dirs,
        Cause.LOADED,
        "vllm-log",
    )


def _factors(config_dir: Path, hash_dir: str) -> dict | None:
    """vLLM's own record of what it hashed, from any rank folder of a hash folder (written by the pod: walked from
    kubelet's folder without following links, capped, and only if it has the shape vLLM writes)."""
    parts = [COMPILE_CACHE_CONTENT, VLLM_FOLDER, *hash_dir.split("/")]
    for rank in (n for n in beneath_folder_names(str(config_dir), parts) if n.startswith("rank_")):
        for prefix in beneath_folder_names(str(config_dir), [*parts, rank]):
            try:
                document = read_json_beneath(
                    str(config_dir), [*parts, rank, prefix, FACTORS_FILE], max_bytes=FACTORS_MAX_BYTES
                )
            except Refused:
                continue
            if (
                isinstance(document, dict)
                and isinstance(document.get("env"), dict)
                and all(isinstance(document.get(k), str) for k in ("config_hash", "code_hash", "compiler_hash"))
            ):
                return document
    return None


def why_hash_differs(config_dir: Path, cached: list[str], new: list[str]) -> str:
    """Which of vLLM's hash parts changed between a cached folder and the one vLLM made (vLLM 0.21.0 hashes
    env factors, the vLLM config, the traced code and the compiler)."""
    ours, theirs = next(((f, d) for d in cached if (f := _factors(config_dir, d))), (None, None))
    fresh = next((f for d in new if (f := _factors(config_dir, d))), None)
    if ours is None or fresh is None:
        return "vLLM computed another compile hash than the cached one (no factor record to compare)"
    parts = []
    if ours.get("config_hash") != fresh.get("config_hash"):
        parts.append("vLLM config (a setting, the model's config.json, the model path or its weights URI)")
    if ours.get("code_hash") != fresh.get("code_hash"):
        parts.append("traced model code (another vLLM build or install path)")
    if ours.get("compiler_hash") != fresh.get("compiler_hash"):
        parts.append("compiler (PyTorch/Triton version, GPU or Inductor settings)")
    env_old, env_new = ours.get("env") or {}, fresh.get("env") or {}
    changed_env = sorted(k for k in set(env_old) | set(env_new) if env_old.get(k) != env_new.get(k))
    if changed_env:
        parts.append("environment " + ", ".join(changed_env[:5]))
    return "vLLM's compile hash changed in: " + ("; ".join(parts) or f"nothing it recorded (folder {theirs})")


def judge(
    *, start_dirs: list[str], now_dirs: list[str], origin: dict | None, restore: dict | None, config_dir: Path
) -> Observation:
    """One pod start, judged once the pod is Ready: the hash folders present when its entry step ran
    against those present now. No new folder: vLLM loaded one that was there (a hit). A new one: it compiled."""
    new = sorted(set(now_dirs) - set(start_dirs))
    restored_dirs = set(origin.get("hash_dirs", [])) if origin and origin.get("origin") == "restored" else set()
    if not start_dirs and new and set(new) <= restored_dirs:
        # The restore landed after the entry step looked (past the wait bound) but before vLLM did: the
        # folders are new to the record, yet vLLM loaded them.
        return Observation(
            "hit", "restored", True, "loaded the restored cache (restored after the pod started)", cause=Cause.LOADED
        )
    if not new:
        if not start_dirs:
            return Observation("none", "none", False, "vLLM wrote no compile cache (torch.compile off?)")
        restored = bool(restored_dirs) and set(start_dirs) <= restored_dirs
        return Observation(
            "hit",
            "restored" if restored else "local",
            True,
            "loaded the restored cache" if restored else "loaded a cache compiled on this node",
            cause=Cause.LOADED,
        )
    if start_dirs:
        return Observation(
            "miss", "compiled", True, why_hash_differs(config_dir, start_dirs, new), new, Cause.HASH_CHANGED
        )
    status = (restore or {}).get("status")
    reasons = {
        "miss": (False, "no cache was published for this key yet (first pod of this configuration)"),
        "busy": (True, "folder busy: the pod started before the restore finished"),
        "present": (
            True,
            "folder busy: vLLM had created the cache folder before the agent restored it (a pod "
            "started before the agent), so it was left to it",
        ),
        "failed": (True, f"the restore failed: {(restore or {}).get('reason', '')}"),
        None: (True, "the pod started before the agent's restore (no done marker)"),
    }
    expected, reason = reasons.get(status, (True, f"the restore ended as {status!r}"))
    return Observation("miss", "compiled", expected, reason, new, Cause.NOT_RESTORED)
