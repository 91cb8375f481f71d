"""Which objects of the compile-cache prefix go: pure logic, the clock and the listing passed in.

A key (compile-cache/<model>/<gpu>/tp<N>-pp<M>/torch<v>/<digest>/) is deleted, all its objects, only when
it is in no active set AND its last use is older than the retention. Within a kept, inactive key, archives
without a manifest (a publisher that never finished) older than the orphan age go. Active keys are never
touched. Objects outside any well-formed key are kept and reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import groupby
from typing import Iterable, Iterator

from warmstart.cache_key import parse_key_prefix

MANIFEST = "manifest.json"
LAST_USE = "last-use.json"


@dataclass(frozen=True)
class Listed:
    key: str
    size: int
    last_modified: datetime


@dataclass
class Decision:
    prefix: str
    delete: list[Listed]
    reason: str


@dataclass
class Summary:
    scanned: int = 0
    keys: int = 0
    kept_active: int = 0
    kept_recent: int = 0
    deleted_keys: int = 0
    deleted_objects: int = 0
    orphans_deleted: int = 0
    bytes_freed: int = 0
    deferred_objects: int = 0
    malformed: list[str] = field(default_factory=list)
    aborted_uploads: int = 0


def last_use(objects: list[Listed]) -> datetime:
    """The agent rewrites last-use.json whenever it restores, publishes or serves the key."""
    records = [o.last_modified for o in objects if o.key.endswith("/" + LAST_USE)]
    return max(records) if records else max(o.last_modified for o in objects)


def decide(
    prefix: str, objects: list[Listed], *, active: frozenset[str], now: datetime, retention: timedelta,
    orphan_age: timedelta,
) -> Decision:
    if prefix in active:
        return Decision(prefix, [], "active")
    if now - last_use(objects) > retention:
        return Decision(prefix, list(objects), "stale")
    if not any(o.key.endswith("/" + MANIFEST) for o in objects):
        orphans = [o for o in objects if "/archive-" in o.key and now - o.last_modified > orphan_age]
        if orphans:
            return Decision(prefix, orphans, "orphaned archives")
    return Decision(prefix, [], "recent")


def group_by_key(listing: Iterable[Listed], summary: Summary) -> Iterator[tuple[str, list[Listed]]]:
    """Consecutive objects of one key (S3 lists in key order); malformed objects are reported, not grouped."""

    def prefix_of(item: Listed) -> str | None:
        return parse_key_prefix(item.key)

    for prefix, items in groupby(listing, key=prefix_of):
        items = list(items)
        summary.scanned += len(items)
        if prefix is None:
            summary.malformed += [item.key for item in items]
            continue
        yield prefix, items


def select(
    listing: Iterable[Listed], *, active: frozenset[str], now: datetime, retention: timedelta, orphan_age: timedelta,
    max_deletions: int, summary: Summary,
) -> Iterator[Listed]:
    """Yields the objects to delete, in listing order, never more than `max_deletions`."""
    budget = max_deletions
    for prefix, items in group_by_key(listing, summary):
        summary.keys += 1
        decision = decide(prefix, items, active=active, now=now, retention=retention, orphan_age=orphan_age)
        if decision.reason == "active":
            summary.kept_active += 1
            continue
        if not decision.delete:
            summary.kept_recent += 1
            continue
        if len(decision.delete) > budget:  # a key is deleted whole or left for the next run
            summary.deferred_objects += len(decision.delete)
            budget = 0
            continue
        budget -= len(decision.delete)
        if decision.reason == "stale":
            summary.deleted_keys += 1
        else:
            summary.orphans_deleted += len(decision.delete)
        summary.deleted_objects += len(decision.delete)
        summary.bytes_freed += sum(item.size for item in decision.delete)
        yield from decision.delete


def parse_active_set(raw: str, parameter: str) -> frozenset[str]:
    """The stack's published set of keys; anything unexpected raises (the run then deletes nothing)."""
    import json

    document = json.loads(raw)
    if not isinstance(document, dict) or document.get("version") != 1 or not isinstance(document.get("keys"), list):
        raise ValueError(f"{parameter}: not an active set of version 1")
    keys = document["keys"]
    bad = [k for k in keys if not isinstance(k, str) or parse_key_prefix(k) != k]
    if bad:
        raise ValueError(f"{parameter}: malformed keys {bad[:3]}")
    return frozenset(keys)
