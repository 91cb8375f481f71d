"""A compile archive's manifest: what vLLM's hash folders hold on this node, the checks a manifest read from S3 must
pass before it is believed, and the manifests published for a key."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TypeGuard

from contracts.cache_key import MANIFEST_MAX_BYTES, MAX_CACHE_FILES, CompileCacheKey, counts_fit, holds_more
from contracts.engine_caches import (
    MAX_LISTED_CACHES,
    TORCH_COMPILE_CACHE,
    VLLM_ROOT_FOLDER,
    Scope,
    cache_name_ok,
    cache_of,
)
from contracts.node_layout import COMPILE_CACHE_CONTENT
from node_agent.runtime.archive import (
    content_digest,
)
from node_agent.runtime.layout import NodeCacheLayout
from node_agent.runtime.log import EventLog
from node_agent.runtime.s3.compile_store import CacheStore
from node_agent.runtime.untrusted import Refused, beneath_folder_names

MANIFEST_VERSION = 2  # 2: lists vLLM's hash folders, archives carry an upload nonce
VLLM_FOLDER = VLLM_ROOT_FOLDER  # VLLM_CACHE_ROOT inside a configuration's cache folder (warmstart.workload.vllm_env)


# vLLM makes one or two hash folders per configuration; a pod that makes millions costs the agent at most this many.
MAX_LISTED_HASH_DIRS = 256
_HASH_ROOT = (TORCH_COMPILE_CACHE,)
_AOT_ROOT = (TORCH_COMPILE_CACHE, "torch_aot_compile")


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


def engine_caches_held(files: list[str]) -> list[str]:
    """The engine's portable caches besides torch.compile's (contracts/engine_caches.py: DeepGEMM's kernels, the
    startup plan, FlashInfer's workspace, ...) that a cache folder's files hold any of. An archive lacking one this
    node has is worth a fuller one, once: their files grow with traffic, so only whether a cache is there counts."""
    held = set()
    for name in files:
        cache = cache_of(name)
        if cache is not None and cache.scope is Scope.ARCHIVED and cache.name != TORCH_COMPILE_CACHE:
            held.add(cache.name)
    return sorted(held)


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

    @property
    def engine_caches(self) -> set[str]:
        """The engine's other caches the archive holds, as its manifest names them (none for a manifest from before
        them, or one whose list is not a short list of names)."""
        listed = self.manifest.get("engine_caches")
        if not isinstance(listed, list) or len(listed) > MAX_LISTED_CACHES:
            return set()
        return {name for name in listed if cache_name_ok(name)}

    def covers(
        self, hash_dirs: list[str], counts: dict[str, int], files: int, engine_caches: list[str], content: str
    ) -> bool:
        """Holds every one of these hash folders, with at least as many files in each (by its total, for a manifest
        from before counts per folder), and every one of these engine caches; or exactly these files (its content
        digest: a manifest from before engine caches were listed holds them if it holds the same files)."""
        if not set(hash_dirs) <= self.hash_dirs:
            return False
        if self.manifest.get("content") == content:
            return True
        if not set(engine_caches) <= self.engine_caches:
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


def holds_what_it_claims(manifest: dict, files: list[str]) -> str | None:
    """Why an unpacked archive is not what its manifest says it holds (the count and names of its files, per hash
    folder: what restores rank archives by and publishers compare with), or None."""
    if "content" not in manifest:
        return None  # a manifest from before file digests claims only its checksum, checked already
    if len(files) != manifest["files"] or content_digest(files) != manifest["content"]:
        return f"the archive holds {len(files)} files, not the {manifest['files']} its manifest names"
    if "counts" in manifest and compiled_counts(files) != manifest["counts"]:
        return "the archive's files per hash folder are not those its manifest names"
    if "engine_caches" in manifest and engine_caches_held(files) != manifest["engine_caches"]:
        return "the archive's engine caches are not those its manifest names"
    return None


def new_manifest_name(key: CompileCacheKey, hash_dirs: list[str], content: str, taken: set[str]) -> str:
    """The first manifest of a set of hash folders is named by them alone (agents before file digests read only
    that name); a fuller one of the same folders by its files too."""
    plain = key.manifest_key(hash_dirs)
    return plain if plain not in taken else key.manifest_key(hash_dirs, content)
