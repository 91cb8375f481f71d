"""Which of the engine's caches a pod start used: what vLLM printed, then what its files show.

The files are the pod's (untrusted): walked from the configuration's content folder without following a link, at
most MAX_FILES of them, each judged by its own modification time against the container's start. A cache with a
file written since then was filled by this start (the engine compiled, tuned or profiled: a miss for that cache,
or its first fill); one whose files are all older was there and needed nothing new (the engine loaded what it
needed, or needed none of it). vLLM's own lines decide where it prints them (vllm_log.engine_cache_lines).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from contracts.engine_caches import (
    TORCH_COMPILE_CACHE,
    UNLISTED,
    USE_WORDS,
    VLLM_ROOT_FOLDER,
    Scope,
    cache_of,
    named,
    not_an_entry,
)

MAX_FILES = 50_000  # a compile cache holds a few thousand; past this the walk stops and says so
LOADED, WRITTEN, PRESENT, REFUSED = USE_WORDS


@dataclass(frozen=True)
class CacheFiles:
    files: int = 0
    written: int = 0  # files modified at or after the container's start


def cache_files(content: Path, since: float, *, max_files: int = MAX_FILES) -> tuple[dict[str, CacheFiles], bool]:
    """Files per inventory cache (UNLISTED for the rest) and whether the walk stopped at `max_files`."""
    counts: dict[str, CacheFiles] = {}
    seen = 0
    try:
        walk = os.fwalk(content, follow_symlinks=False)
        for folder, subfolders, names, folder_fd in walk:
            relative = Path(folder).relative_to(content)
            if str(relative) == VLLM_ROOT_FOLDER and TORCH_COMPILE_CACHE in subfolders:
                subfolders.remove(TORCH_COMPILE_CACHE)  # torch.compile's, judged apart: not walked
            for name in names:
                seen += 1
                if seen > max_files:
                    return counts, True
                try:
                    info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
                except OSError:
                    continue
                if not stat.S_ISREG(info.st_mode) or not_an_entry(str(relative / name)):
                    continue
                cache = cache_of(str(relative / name))
                key = cache.name if cache is not None else UNLISTED
                was = counts.get(key, CacheFiles())
                counts[key] = CacheFiles(was.files + 1, was.written + (info.st_mtime >= since))
    except OSError:
        pass  # the folder went away mid-walk (a cleanup): what was counted stands
    return counts, False


def engine_cache_use(files: dict[str, CacheFiles], said: dict[str, str]) -> dict[str, str]:
    """One word per cache the start had or touched: vLLM's lines first, then the files. torch.compile has its own
    judgement (compile_judgement.py) and is left out; so are the caches that are never read back."""
    use: dict[str, str] = {}
    for name, counted in files.items():
        cache = named(name)
        if cache is not None and (cache.scope is Scope.UNUSED or name == TORCH_COMPILE_CACHE):
            continue
        use[name] = WRITTEN if counted.written else PRESENT
    for name, word in said.items():
        if word in USE_WORDS:
            use[name] = word
    return dict(sorted(use.items()))
