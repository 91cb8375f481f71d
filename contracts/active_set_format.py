"""The active set's format: the compile-cache keys the pruner keeps, written by synth (warmstart/active_set.py)
into SSM parameters and read by the pruner Lambda (pruner/runtime/selection.py). Both use this module: its version,
its keys, how it is split into parts, how one part is written and how it is read."""

from __future__ import annotations

import json
from collections.abc import Callable

ACTIVE_SET_VERSION = 1
# The active set may need several SSM parameters: the first names how many parts there are, the others are
# <name>-2, <name>-3, ...; the pruner reads them all or deletes nothing.
MAX_ACTIVE_SET_PARTS = 20
# SSM parameter limits: Standard holds 4 KB, Advanced 8 KB.
STANDARD_LIMIT, ADVANCED_LIMIT = 4096, 8192


def active_set_part_name(name: str, part: int) -> str:
    return name if part == 1 else f"{name}-{part}"


def render_part(environment: str, keys: list[str], *, parts: int | None, part: int = 1) -> str:
    """One parameter's value: the version, the environment, its keys; the first part says how many there are."""
    document: dict = {"version": ACTIVE_SET_VERSION, "environment": environment, "keys": keys}
    if parts is not None and parts > 1:
        document["parts"] = parts
    if part > 1:
        document["part"] = part
    return json.dumps(document, separators=(",", ":"))


def render_parts(environment: str, keys: list[str]) -> list[str]:
    """The set as parameter values of at most ADVANCED_LIMIT bytes each; the first names the number of parts."""
    groups: list[list[str]] = [[]]
    for key in keys:
        # Room for the envelope with the largest part count written in: the size test is conservative.
        fuller = render_part(environment, groups[-1] + [key], parts=MAX_ACTIVE_SET_PARTS)
        if groups[-1] and len(fuller.encode()) > ADVANCED_LIMIT:
            groups.append([])
        groups[-1].append(key)
    count = len(groups)
    return [
        render_part(environment, group, parts=count if index == 0 else None, part=index + 1)
        for index, group in enumerate(groups)
    ]


def parse_part(raw: str, parameter: str, is_key: Callable[[str], bool]) -> tuple[frozenset[str], int]:
    """One parameter of a published set: its keys (each one `is_key` accepts), and how many parts the whole set has
    (the first part says so). Anything unexpected raises (the pruner's run then deletes nothing)."""
    document = json.loads(raw)
    version = document.get("version") if isinstance(document, dict) else None
    if isinstance(version, bool) or version != ACTIVE_SET_VERSION or not isinstance(document.get("keys"), list):
        raise ValueError(f"{parameter}: not an active set of version {ACTIVE_SET_VERSION}")
    parts = document.get("parts", 1)
    if isinstance(parts, bool) or not isinstance(parts, int) or not 1 <= parts <= MAX_ACTIVE_SET_PARTS:
        raise ValueError(f"{parameter}: malformed part count {parts!r}")
    keys = document["keys"]
    bad = [k for k in keys if not isinstance(k, str) or not is_key(k)]
    if bad:
        raise ValueError(f"{parameter}: malformed keys {bad[:3]}")
    return frozenset(keys), parts
