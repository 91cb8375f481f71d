"""What the hostile tests share: a node's files as a comparable state, and the peak memory an action takes."""

from __future__ import annotations

import hashlib
import os
import stat
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from tests.admission_policy import pod, policy, roots  # noqa: F401 - fixtures of the admission tests
from tests.agent.weights_world import model_bucket  # noqa: F401 - a fixture


def tree_state(root: Path) -> dict[str, tuple]:
    """Every entry under `root` as (kind, size, content digest), links not followed: to show nothing changed."""
    state = {}
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(folder) / name
            info = path.lstat()
            digest = ""
            if stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            state[str(path.relative_to(root))] = (stat.S_IFMT(info.st_mode), info.st_size, digest)
    return state


def peak_memory(action: Callable[[], object]) -> int:
    """Bytes Python allocated at the peak while `action` ran."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
