"""Which compile-cache objects the pruner deletes: table-driven, clock passed in."""

from datetime import datetime, timedelta, timezone

import pytest

from lambdas.compile_cache_pruner.selection import Listed, Summary, parse_active_set, select

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
DAY = timedelta(days=1)
RETENTION = timedelta(days=14)
KEY_A = "compile-cache/qwen/h100-sm_90/tp2-pp1/torch2.11.0/0123456789abcdef0123/"
KEY_B = "compile-cache/qwen/l40s-sm_89/tp1-pp1/torch2.11.0/00000000000000000000/"


def objects(prefix: str, age_days: float, *, manifest=True, last_use_age: float | None = None, archive_age=None):
    when = NOW - timedelta(days=age_days)
    found = [Listed(f"{prefix}archive-{'a' * 64}.tar.zst", 15_000_000, NOW - timedelta(days=archive_age or age_days))]
    if manifest:
        found.append(Listed(f"{prefix}manifest.json", 500, when))
    if last_use_age is not None:
        found.append(Listed(f"{prefix}last-use.json", 60, NOW - timedelta(days=last_use_age)))
    return sorted(found, key=lambda o: o.key)


def run(listing, active=(), max_deletions=10_000):
    summary = Summary()
    deleted = list(select(listing, active=frozenset(active), now=NOW, retention=RETENTION, orphan_age=DAY,
                          max_deletions=max_deletions, summary=summary))
    return [o.key for o in deleted], summary


@pytest.mark.parametrize(
    "case, listing, active, expect_deleted, counter",
    [
        ("active and old: kept", objects(KEY_A, 400, last_use_age=300), {KEY_A}, 0, "kept_active"),
        ("inactive, recently used: kept", objects(KEY_A, 400, last_use_age=2), set(), 0, "kept_recent"),
        ("inactive and old: deleted", objects(KEY_A, 30, last_use_age=20), set(), 3, "deleted_keys"),
        ("inactive, old, no use record: by newest object", objects(KEY_A, 30), set(), 2, "deleted_keys"),
        ("inactive, young, no use record: kept", objects(KEY_A, 3), set(), 0, "kept_recent"),
        ("orphan archive older than a day: deleted", objects(KEY_A, 2, manifest=False, last_use_age=0.5), set(), 1,
         "orphans_deleted"),
        ("orphan archive younger than a day: kept", objects(KEY_A, 0.2, manifest=False), set(), 0, "kept_recent"),
        ("active orphan: kept", objects(KEY_A, 30, manifest=False), {KEY_A}, 0, "kept_active"),
    ],
)
def test_selection(case, listing, active, expect_deleted, counter):
    deleted, summary = run(listing, active)
    assert len(deleted) == expect_deleted, case
    assert getattr(summary, counter) >= 1, case
    if expect_deleted:
        assert summary.bytes_freed == sum(o.size for o in listing if o.key in deleted)


def test_malformed_keys_are_kept_and_reported():
    listing = [
        Listed("compile-cache/readme.txt", 10, NOW - 90 * DAY),
        Listed("compile-cache/qwen/h100/tp2/torch2/notahash/manifest.json", 10, NOW - 90 * DAY),
        *objects(KEY_A, 30, last_use_age=30),
    ]
    deleted, summary = run(sorted(listing, key=lambda o: o.key))
    assert len(deleted) == 3 and all(d.startswith(KEY_A) for d in deleted)
    assert summary.malformed == ["compile-cache/qwen/h100/tp2/torch2/notahash/manifest.json", "compile-cache/readme.txt"]


def test_cap_deletes_whole_keys_only_and_defers_the_rest():
    listing = sorted(objects(KEY_A, 30, last_use_age=30) + objects(KEY_B, 30, last_use_age=30), key=lambda o: o.key)
    deleted, summary = run(listing, max_deletions=4)
    assert len(deleted) == 3 and summary.deleted_keys == 1 and summary.deferred_objects == 3


def test_every_object_is_counted_once():
    listing = sorted(objects(KEY_A, 30, last_use_age=30) + objects(KEY_B, 1, last_use_age=1), key=lambda o: o.key)
    _, summary = run(listing)
    assert summary.scanned == 6 and summary.keys == 2


@pytest.mark.parametrize(
    "raw, message",
    [
        ("not json", "Expecting value"),
        ('{"version": 2, "keys": []}', "version 1"),
        ('{"version": 1}', "version 1"),
        ('{"version": 1, "keys": ["compile-cache/x/"]}', "malformed"),
    ],
)
def test_active_set_must_be_exactly_right(raw, message):
    with pytest.raises(ValueError, match=message):
        parse_active_set(raw, "/warmstart/dev/compile-cache/active-keys")


def test_active_set_parses():
    raw = '{"version": 1, "environment": "dev", "keys": ["%s"]}' % KEY_A
    assert parse_active_set(raw, "p") == frozenset({KEY_A})
