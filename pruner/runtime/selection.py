"""Which compile-cache objects the pruner deletes: pure logic, the clock, the listing and a manifest reader
passed in.

A key (compile-cache/<model>/<gpu>/tp<N>-pp<M>/torch<v>/<digest>/) is deleted, all its objects, only when
it is in no active set AND its newest object (the agent rewrites last-use.json on every use; a publish in
flight writes a fresh archive) is older than the retention. In every key that stays, active or not:
archives no manifest names (a publisher that crashed, the loser of a race: nodes never delete) go once
older than the orphan age, and a manifest whose archive is gone is removed (nodes never replace a manifest;
the next Ready pod publishes again), so no manifest ever points at nothing for long. A key may hold several
manifests, one per set of vLLM hash folders and files (`manifest-<digest>.json`, written once); one that a
fuller manifest covers (every hash folder, more files) goes with its archive once the fuller one is older than
the orphan age, so a key keeps its fullest archive. Objects outside any well-formed key are kept and reported.

Each decision lists the manifest to delete apart from the other objects: the caller deletes manifests
first and the rest only once they are gone, so a run cut short never leaves a manifest without its archive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import groupby

from contracts.active_set_format import parse_part
from contracts.cache_key import ARCHIVE_STEM, MANIFEST_STEM, holds_more, parse_key_prefix


@dataclass(frozen=True)
class Listed:
    key: str
    size: int
    last_modified: datetime
    etag: str = ""  # as listed: deletes are conditional on it, so an object rewritten since is kept

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def is_manifest(self) -> bool:
        return self.name.startswith(MANIFEST_STEM) and self.name.endswith(".json")

    @property
    def is_archive(self) -> bool:
        return self.name.startswith(ARCHIVE_STEM)


@dataclass(frozen=True)
class ManifestFacts:
    """What the pruner reads of a manifest: the archive it names, and how complete that archive is. `verified`:
    the manifest is consistent with its key and its name (what agents check before they trust one), so its
    claims may decide that another manifest is superseded."""

    archive: str
    hash_dirs: frozenset[str] = frozenset()
    files: int = 0
    counts: dict[str, int] | None = None  # files per hash folder (None: a manifest from before them)
    size: int = 0
    verified: bool = False
    # The engine's other caches the archive holds (DeepGEMM's kernels, the startup plan, ...; none before them).
    engine_caches: frozenset[str] = frozenset()

    def covered_by(self, other: ManifestFacts) -> bool:
        """`other`, a verified manifest, holds every hash folder and engine cache of this one, with at least as many
        files in each folder and more in one (by the totals where either has no counts): restores take it
        instead."""
        if not (other.verified and self.hash_dirs <= other.hash_dirs and self.engine_caches <= other.engine_caches):
            return False
        if self.counts is None or other.counts is None:
            return other.files > self.files
        return not holds_more(self.counts, other.counts) and holds_more(other.counts, self.counts)


# Reads a listed manifest (only if unchanged since listing) and returns what it names, or None when it is gone,
# changed or unreadable.
ManifestReader = Callable[[Listed], "ManifestFacts | None"]


@dataclass
class Decision:
    prefix: str
    reason: str  # active | recent | stale | orphaned archives | broken manifest | superseded manifest
    manifests: list[Listed] = field(default_factory=list)  # deleted first
    rest: list[Listed] = field(default_factory=list)  # deleted once the key's manifests are gone

    @property
    def objects(self) -> list[Listed]:
        return self.manifests + self.rest


@dataclass
class Summary:
    scanned: int = 0
    keys: int = 0
    kept_active: int = 0
    kept_recent: int = 0
    deleted_keys: int = 0
    deleted_objects: int = 0
    orphans_deleted: int = 0
    repaired_manifests: int = 0
    bytes_freed: int = 0
    deferred_objects: int = 0
    changed_since_listing: int = 0
    malformed: list[str] = field(default_factory=list)
    unreadable_manifests: list[str] = field(default_factory=list)
    aborted_uploads: int = 0


def newest(objects: list[Listed]) -> datetime:
    return max(o.last_modified for o in objects)


def decide(
    prefix: str,
    objects: list[Listed],
    *,
    active: frozenset[str],
    now: datetime,
    retention: timedelta,
    orphan_age: timedelta,
    read_manifest: ManifestReader,
) -> Decision:
    is_active = prefix in active
    if not is_active and now - newest(objects) > retention:
        manifests = [o for o in objects if o.is_manifest]
        return Decision(prefix, "stale", manifests, [o for o in objects if not o.is_manifest])
    kept = "active" if is_active else "recent"
    manifests = [o for o in objects if o.is_manifest]
    archives = [o for o in objects if o.is_archive]
    listed = {a.key for a in archives}
    old = lambda o: now - o.last_modified > orphan_age  # noqa: E731
    names: dict[str, str | None] = {}
    facts: dict[str, ManifestFacts] = {}
    if len(manifests) == 1 and len(archives) == 1:
        # One archive beside one manifest is the one it names (only a crash between two publishers' steps could
        # leave it otherwise, and restores skip such a manifest); read only when there is a choice to make.
        names = {manifests[0].key: archives[0].key}
    elif archives:
        for manifest in manifests:
            read = read_manifest(manifest)
            if read is None:
                return Decision(prefix, kept)  # cannot tell which archives are in use: touch nothing
            facts[manifest.key], names[manifest.key] = read, read.archive
    # Publishers upload the archive before the manifest, so an old manifest whose archive is gone is broken.
    broken = [m for m in manifests if names.get(m.key) not in listed and old(m)]
    named = {names[m.key] for m in manifests if m not in broken and names.get(m.key) in listed}
    orphans = [a for a in archives if a.key not in named and old(a)]
    if broken:
        return Decision(prefix, "broken manifest", broken, orphans)
    if orphans:
        return Decision(prefix, "orphaned archives", [], orphans)
    sizes = {a.key: a.size for a in archives}
    superseded = _superseded(
        [m for m in manifests if m.key in facts],
        facts,
        lambda m: old(m) and sizes.get(facts[m.key].archive) == facts[m.key].size,
    )
    if superseded:
        still_named = {facts[m.key].archive for m in manifests if m.key in facts and m not in superseded}
        gone = {facts[m.key].archive for m in superseded} - still_named
        return Decision(prefix, "superseded manifest", superseded, [a for a in archives if a.key in gone])
    return Decision(prefix, kept)


def _superseded(
    manifests: list[Listed], facts: dict[str, ManifestFacts], settled: Callable[[Listed], bool]
) -> list[Listed]:
    """Manifests a fuller one covers (every hash folder, as many files in each and more in one) that has itself
    been there past the orphan age with its archive listed at the size it names (`settled`): restores have taken
    the fuller one since, so the lesser one and its archive are in no one's use. A restore still reading the
    lesser archive fails cleanly and takes the next manifest."""
    return [
        m
        for m in manifests
        if any(n is not m and settled(n) and facts[m.key].covered_by(facts[n.key]) for n in manifests)
    ]


def group_by_key(listing: Iterable[Listed], summary: Summary) -> Iterator[tuple[str, list[Listed]]]:
    """Consecutive objects of one key (S3 lists in key order); malformed objects are reported, not grouped."""
    for prefix, group in groupby(listing, key=lambda item: parse_key_prefix(item.key)):
        items = list(group)
        summary.scanned += len(items)
        if prefix is None:
            summary.malformed += [item.key for item in items]
            continue
        yield prefix, items


def select(
    listing: Iterable[Listed],
    *,
    active: frozenset[str],
    now: datetime,
    retention: timedelta,
    orphan_age: timedelta,
    max_deletions: int,
    summary: Summary,
    read_manifest: ManifestReader,
) -> Iterator[Decision]:
    """Yields the decisions that delete something, in listing order, never more than `max_deletions` objects."""
    budget = max_deletions
    for prefix, items in group_by_key(listing, summary):
        summary.keys += 1
        decision = decide(
            prefix,
            items,
            active=active,
            now=now,
            retention=retention,
            orphan_age=orphan_age,
            read_manifest=read_manifest,
        )
        if not decision.objects:
            if decision.reason == "active":
                summary.kept_active += 1
            else:
                summary.kept_recent += 1
            continue
        if len(decision.objects) > budget:  # a decision is carried out whole or left for the next run
            summary.deferred_objects += len(decision.objects)
            budget = 0
            continue
        budget -= len(decision.objects)
        yield decision


def count_done(decision: Decision, deleted: set[str], summary: Summary) -> None:
    """Adds what was really deleted of one decision to the summary."""
    gone = [o for o in decision.objects if o.key in deleted]
    summary.changed_since_listing += len(decision.objects) - len(gone)
    summary.deleted_objects += len(gone)
    summary.bytes_freed += sum(o.size for o in gone)
    if decision.reason == "stale" and len(gone) == len(decision.objects):
        summary.deleted_keys += 1
    summary.orphans_deleted += sum(1 for o in decision.rest if o.key in deleted and decision.reason != "stale")
    summary.repaired_manifests += sum(1 for o in decision.manifests if o.key in deleted and decision.reason != "stale")


def parse_active_set_part(raw: str, parameter: str) -> tuple[frozenset[str], int]:
    """One parameter of the stack's published set (contracts/active_set_format.py), each key a whole key prefix."""
    return parse_part(raw, parameter, lambda key: parse_key_prefix(key) == key)
