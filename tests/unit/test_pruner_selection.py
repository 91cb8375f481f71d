"""Which compile-cache objects the pruner deletes: table-driven, clock and manifest reader passed in."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from pruner.runtime.selection import Listed, ManifestFacts, Summary, count_done, parse_active_set_part, select

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
RETENTION = timedelta(days=14)
KEY_A = "compile-cache/qwen/h100-sm_90/tp2-pp1/torch2.11.0/0123456789abcdef0123/"
KEY_B = "compile-cache/qwen/l40s-sm_89/tp1-pp1/torch2.11.0/00000000000000000000/"
ARCHIVE = f"archive-{'a' * 64}-0001.tar.zst"


def objects(
    prefix: str,
    age_days: float,
    *,
    manifest=True,
    last_use_age: float | None = None,
    archive_age=None,
    archives=(ARCHIVE,),
):
    when = NOW - timedelta(days=age_days)
    found = [
        Listed(f"{prefix}{name}", 15_000_000, NOW - timedelta(days=archive_age or age_days), f'"{name}"')
        for name in archives
    ]
    if manifest:
        found.append(Listed(f"{prefix}manifest-0123456789abcdef.json", 500, when, '"m"'))
    if last_use_age is not None:
        found.append(Listed(f"{prefix}last-use.json", 60, NOW - timedelta(days=last_use_age), '"l"'))
    return sorted(found, key=lambda o: o.key)


def no_reads(manifest):
    raise AssertionError(f"the manifest {manifest.key} should not need reading")


def run(listing, active=(), max_deletions=10_000, read_manifest=no_reads):
    summary = Summary()
    decisions = list(
        select(
            listing,
            active=frozenset(active),
            now=NOW,
            retention=RETENTION,
            orphan_age=DAY,
            max_deletions=max_deletions,
            summary=summary,
            read_manifest=read_manifest,
        )
    )
    for decision in decisions:
        count_done(decision, {o.key for o in decision.objects}, summary)
    return decisions, summary


def deleted_keys(decisions):
    return [o.key for d in decisions for o in d.objects]


@pytest.mark.parametrize(
    "case, listing, active, expect_deleted, counter",
    [
        ("active and old: kept", objects(KEY_A, 400, last_use_age=300), {KEY_A}, 0, "kept_active"),
        ("inactive, recently used: kept", objects(KEY_A, 400, last_use_age=2), set(), 0, "kept_recent"),
        ("inactive and old: deleted", objects(KEY_A, 30, last_use_age=20), set(), 3, "deleted_keys"),
        ("inactive, old, no use record: by newest object", objects(KEY_A, 30), set(), 2, "deleted_keys"),
        ("inactive, young, no use record: kept", objects(KEY_A, 3), set(), 0, "kept_recent"),
        # A publish in flight: only an old use record, and an archive uploaded a moment ago.
        (
            "inactive, old use record, fresh archive: kept",
            objects(KEY_A, 0, manifest=False, last_use_age=40, archive_age=0.001),
            set(),
            0,
            "kept_recent",
        ),
        (
            "orphan archive older than a day: deleted",
            objects(KEY_A, 2, manifest=False, last_use_age=0.5),
            set(),
            1,
            "orphans_deleted",
        ),
        ("orphan archive younger than a day: kept", objects(KEY_A, 0.2, manifest=False), set(), 0, "kept_recent"),
        ("active key's orphan archive: deleted", objects(KEY_A, 30, manifest=False), {KEY_A}, 1, "orphans_deleted"),
        (
            "manifest whose archive is gone, old: repaired",
            objects(KEY_A, 2, archives=(), last_use_age=0.5),
            set(),
            1,
            "repaired_manifests",
        ),
        (
            "manifest whose archive is gone, active: repaired",
            objects(KEY_A, 2, archives=()),
            {KEY_A},
            1,
            "repaired_manifests",
        ),
        (
            "manifest whose archive is not listed yet, young: kept",
            objects(KEY_A, 0.1, archives=()),
            set(),
            0,
            "kept_recent",
        ),
    ],
)
def test_selection(case, listing, active, expect_deleted, counter):
    decisions, summary = run(listing, active)
    assert len(deleted_keys(decisions)) == expect_deleted, case
    assert getattr(summary, counter) >= 1, case
    if expect_deleted:
        assert summary.bytes_freed == sum(o.size for o in listing if o.key in deleted_keys(decisions))


def test_a_stale_key_lists_its_manifest_apart_so_it_goes_first():
    (decision,) = run(objects(KEY_A, 30, last_use_age=20))[0]
    assert [o.key for o in decision.manifests] == [KEY_A + "manifest-0123456789abcdef.json"]
    assert sorted(o.key for o in decision.rest) == [KEY_A + ARCHIVE, KEY_A + "last-use.json"]


def test_unnamed_archives_under_a_manifest_go_and_the_named_one_stays():
    second = f"archive-{'b' * 64}-0002.tar.zst"
    listing = objects(KEY_A, 3, archives=(ARCHIVE, second), last_use_age=0.1)
    reads = []

    def read(manifest):
        reads.append(manifest.key)
        return ManifestFacts(KEY_A + ARCHIVE)

    for active in (set(), {KEY_A}):
        decisions, summary = run(listing, active, read_manifest=read)
        assert deleted_keys(decisions) == [KEY_A + second] and summary.orphans_deleted == 1
    assert reads == [KEY_A + "manifest-0123456789abcdef.json"] * 2


def test_a_manifest_naming_an_archive_that_is_not_there_is_removed_with_the_unnamed_ones():
    listing = objects(KEY_A, 3, archives=(ARCHIVE, f"archive-{'b' * 64}-0002.tar.zst"))
    (decision,), summary = run(
        listing, read_manifest=lambda m: ManifestFacts(KEY_A + f"archive-{'c' * 64}-0003.tar.zst")
    )
    assert decision.reason == "broken manifest"
    assert [o.key for o in decision.manifests] == [KEY_A + "manifest-0123456789abcdef.json"] and len(decision.rest) == 2


def test_an_unreadable_or_changed_manifest_leaves_the_key_alone():
    listing = objects(KEY_A, 3, archives=(ARCHIVE, f"archive-{'b' * 64}-0002.tar.zst"))
    decisions, summary = run(listing, read_manifest=lambda m: None)
    assert decisions == [] and summary.kept_recent == 1


def test_malformed_keys_are_kept_and_reported():
    listing = [
        Listed("compile-cache/readme.txt", 10, NOW - 90 * DAY),
        Listed("compile-cache/qwen/h100/tp2/torch2/notahash/manifest-0123456789abcdef.json", 10, NOW - 90 * DAY),
        *objects(KEY_A, 30, last_use_age=30),
    ]
    decisions, summary = run(sorted(listing, key=lambda o: o.key))
    assert len(deleted_keys(decisions)) == 3 and all(d.startswith(KEY_A) for d in deleted_keys(decisions))
    assert summary.malformed == [
        "compile-cache/qwen/h100/tp2/torch2/notahash/manifest-0123456789abcdef.json",
        "compile-cache/readme.txt",
    ]


def test_cap_deletes_whole_keys_only_and_defers_the_rest():
    listing = sorted(objects(KEY_A, 30, last_use_age=30) + objects(KEY_B, 30, last_use_age=30), key=lambda o: o.key)
    decisions, summary = run(listing, max_deletions=4)
    assert len(deleted_keys(decisions)) == 3 and summary.deleted_keys == 1 and summary.deferred_objects == 3


def test_every_object_is_counted_once():
    listing = sorted(objects(KEY_A, 30, last_use_age=30) + objects(KEY_B, 1, last_use_age=1), key=lambda o: o.key)
    _, summary = run(listing)
    assert summary.scanned == 6 and summary.keys == 2


def test_objects_changed_since_listing_are_counted_as_kept():
    (decision,), _ = run(objects(KEY_A, 30, last_use_age=20))
    summary = Summary()
    count_done(decision, {KEY_A + "manifest-0123456789abcdef.json", KEY_A + ARCHIVE}, summary)
    assert summary.deleted_objects == 2 and summary.changed_since_listing == 1 and summary.deleted_keys == 0


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
        parse_active_set_part(raw, "/warmstart/dev/compile-cache/active-keys")


def test_active_set_parses():
    raw = json.dumps({"version": 1, "environment": "dev", "keys": [KEY_A]})
    assert parse_active_set_part(raw, "p") == (frozenset({KEY_A}), 1)


def test_several_manifests_keep_every_archive_they_name_and_a_broken_one_goes():
    """One manifest per set of vLLM hash folders (nodes add, never replace): each names its own archive."""
    first, second, unnamed = (f"archive-{c * 64}-0001.tar.zst" for c in "abc")
    listing = sorted(
        [
            Listed(f"{KEY_A}manifest-1111111111111111.json", 500, NOW - 3 * DAY, '"m1"'),
            Listed(f"{KEY_A}manifest-2222222222222222.json", 500, NOW - 3 * DAY, '"m2"'),
            Listed(f"{KEY_A}manifest-3333333333333333.json", 500, NOW - 3 * DAY, '"m3"'),
            Listed(KEY_A + first, 1000, NOW - 3 * DAY, '"a"'),
            Listed(KEY_A + second, 1000, NOW - 3 * DAY, '"b"'),
            Listed(KEY_A + unnamed, 1000, NOW - 3 * DAY, '"c"'),
        ],
        key=lambda o: o.key,
    )
    names = {"1111111111111111": first, "2222222222222222": second, "3333333333333333": f"archive-{'d' * 64}-1.tar.zst"}

    def read(manifest):
        return ManifestFacts(KEY_A + names[manifest.key.rsplit("-", 1)[-1].removesuffix(".json")])

    (decision,), summary = run(listing, {KEY_A}, read_manifest=read)
    assert decision.reason == "broken manifest"
    assert [o.key for o in decision.manifests] == [f"{KEY_A}manifest-3333333333333333.json"]
    assert [o.key for o in decision.rest] == [KEY_A + unnamed]


# ---- a key keeps its fullest archive ----

FIRST, FULLER = f"archive-{'a' * 64}-0001.tar.zst", f"archive-{'b' * 64}-0002.tar.zst"
HASH = frozenset({"torch_compile_cache/torch_aot_compile/abc"})


def settled(archive: str, files: int, *, hash_dirs=HASH, counts=None, size=1000, verified=True) -> ManifestFacts:
    """A manifest's facts as the reader gives them (`size`: what it names; both archives are listed at 1000)."""
    return ManifestFacts(KEY_A + archive, hash_dirs, files, counts, size, verified)


def _two_manifests(fuller_age_days: float, fuller_facts: ManifestFacts):
    listing = sorted(
        [
            Listed(f"{KEY_A}manifest-1111111111111111.json", 500, NOW - 5 * DAY, '"m1"'),
            Listed(f"{KEY_A}manifest-2222222222222222.json", 500, NOW - fuller_age_days * DAY, '"m2"'),
            Listed(KEY_A + FIRST, 1000, NOW - 5 * DAY, '"a"'),
            Listed(KEY_A + FULLER, 1000, NOW - fuller_age_days * DAY, '"b"'),
            Listed(f"{KEY_A}last-use.json", 60, NOW - 0.1 * DAY, '"l"'),
        ],
        key=lambda o: o.key,
    )
    facts = {"1111111111111111": settled(FIRST, 40), "2222222222222222": fuller_facts}
    return listing, lambda manifest: facts[manifest.key.rsplit("-", 1)[-1].removesuffix(".json")]


def test_a_manifest_a_fuller_one_covers_goes_with_its_archive_once_the_fuller_one_has_settled():
    listing, read = _two_manifests(2, settled(FULLER, 57))
    (decision,), _ = run(listing, {KEY_A}, read_manifest=read)
    assert decision.reason == "superseded manifest"
    assert [o.key for o in decision.manifests] == [f"{KEY_A}manifest-1111111111111111.json"]
    assert [o.key for o in decision.rest] == [KEY_A + FIRST]


@pytest.mark.parametrize(
    "case, age_days, fuller",
    [
        ("the fuller one is newer than the orphan age", 0.5, settled(FULLER, 57)),
        ("as many files", 2, settled(FULLER, 40)),
        ("fewer files", 2, settled(FULLER, 39)),
        ("another hash folder, more files", 2, settled(FULLER, 99, hash_dirs=frozenset({"other"}))),
        ("not consistent with its key or name", 2, settled(FULLER, 57, verified=False)),
        ("its archive is not the size it names", 2, settled(FULLER, 57, size=999)),
    ],
)
def test_a_manifest_no_settled_fuller_one_covers_stays(case, age_days, fuller):
    listing, read = _two_manifests(age_days, fuller)
    decisions, _ = run(listing, {KEY_A}, read_manifest=read)
    assert deleted_keys(decisions) == [] or case == "fewer files"
    if case == "fewer files":  # then the first one is the fuller: the lesser (newer, settled) one goes
        (decision,) = decisions
        assert [o.key for o in decision.rest] == [KEY_A + FULLER]


def test_with_counts_per_hash_folder_more_files_elsewhere_cover_nothing():
    """An archive with more files in total but fewer in one hash folder (a rank missing) is not fuller."""
    lesser = settled(FIRST, 40, counts={"torch_compile_cache/torch_aot_compile/abc": 30})
    more_but_short = settled(FULLER, 57, counts={"torch_compile_cache/torch_aot_compile/abc": 29})
    really_fuller = settled(FULLER, 41, counts={"torch_compile_cache/torch_aot_compile/abc": 31})
    assert not lesser.covered_by(more_but_short) and lesser.covered_by(really_fuller)
    assert not really_fuller.covered_by(lesser)


def test_only_a_manifest_consistent_with_its_key_and_name_may_supersede_another():
    """Any node can write a manifest: the pruner reads hash folders, counts and size, and takes them as a fuller
    archive's only where the manifest is what an agent would trust by its key and name."""
    from pruner.runtime.aws import manifest_facts
    from tests.agent.compile_world import H100_KEY

    folders = ["torch_compile_cache/torch_aot_compile/abc"]
    document = {
        "archive": H100_KEY.prefix + FULLER,
        "digest": H100_KEY.digest,
        "hash_dirs": folders,
        "files": 57,
        "size": 1000,
        "content": "0123456789abcdef",
        "counts": {folders[0]: 50},
    }
    assert manifest_facts(H100_KEY.manifest_key(folders), document).verified
    assert manifest_facts(H100_KEY.manifest_key(folders, "0123456789abcdef"), document).verified
    forged = [
        (H100_KEY.manifest_key(["other"]), document),  # stored under another set's name
        (H100_KEY.manifest_key(folders), {**document, "digest": "0" * 20}),  # another configuration's
        (H100_KEY.manifest_key(folders), {**document, "files": 10**9}),  # beyond what agents accept
        (H100_KEY.manifest_key(folders), {**document, "counts": {folders[0]: 58}}),  # more than its files
        (H100_KEY.manifest_key(folders), {**document, "counts": {"elsewhere": 1}}),  # a folder it does not hold
        (H100_KEY.manifest_key(folders), {**document, "size": True}),
    ]
    assert [manifest_facts(name, doc).verified for name, doc in forged] == [False] * len(forged)


@pytest.mark.parametrize(
    "listed",
    ["deep_gemm", {"deep_gemm": 1}, [1], [""], ["x" * 65], [f"cache{i}" for i in range(33)], None],
)
def test_a_manifests_engine_caches_of_another_shape_count_as_none(listed):
    """Any node writes manifests: a list of engine caches that is not a short list of short names counts as none,
    so such a manifest never supersedes one that holds a cache (and is itself superseded as holding none)."""
    from pruner.runtime.aws import manifest_facts
    from tests.agent.compile_world import H100_KEY

    document = {"archive": H100_KEY.prefix + FULLER, "hash_dirs": ["a"], "files": 2, "engine_caches": listed}
    assert manifest_facts(H100_KEY.manifest_key(["a"]), document).engine_caches == frozenset()
    assert manifest_facts(
        H100_KEY.manifest_key(["a"]), {**document, "engine_caches": ["deep_gemm", "startup_plan"]}
    ).engine_caches == frozenset({"deep_gemm", "startup_plan"})


def test_an_archive_holding_an_engine_cache_is_not_superseded_by_one_without_it():
    with_kernels = ManifestFacts("a", frozenset({"d"}), 5, {"d": 5}, 10, True, frozenset({"deep_gemm"}))
    more_files = ManifestFacts("b", frozenset({"d"}), 9, {"d": 9}, 10, True, frozenset())
    both = ManifestFacts("c", frozenset({"d"}), 9, {"d": 9}, 10, True, frozenset({"deep_gemm"}))
    assert not with_kernels.covered_by(more_files)
    assert with_kernels.covered_by(both)
