"""Whether a pod's vLLM used the compile cache: the hash folders before and after its start, and vLLM's own log
lines (loaded, load failure, compiled), which decide first."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path

from contracts.node_layout import COMPILE_CACHE_CONTENT
from node_agent.runtime.archive import (
    FACTORS_FILE,
    FACTORS_MAX_BYTES,
)
from node_agent.runtime.compile_manifest import VLLM_FOLDER
from node_agent.runtime.untrusted import Refused, beneath_folder_names, read_json_beneath
from node_agent.runtime.vllm_log import VllmStart

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
