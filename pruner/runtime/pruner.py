"""One pruning run: read the active sets (fail closed), select, delete manifests first, summarize."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from contracts.active_set_format import active_set_part_name
from contracts.cache_key import KEY_ROOT
from contracts.pruner_report import ACTIVE_SET_UNAVAILABLE, FAILED, PRUNED, PrunerReport
from pruner.runtime.aws import DELETE_BATCH, PrunerAws
from pruner.runtime.selection import Decision, Summary, count_done, parse_active_set_part, select

# Objects held back before a flush: the manifests of a flush fill one DeleteObjects batch, and memory stays
# bounded however large the bucket.
MAX_PENDING_OBJECTS = 10 * DELETE_BATCH
# The lock outlives the longest possible run (Lambda stops a run at 15 minutes).
LOCK_LIFETIME = timedelta(minutes=20)


class ActiveSetUnavailable(RuntimeError):
    """No trustworthy active set: the run deletes nothing."""


@dataclass(frozen=True)
class Settings:
    active_set_parameters: tuple[str, ...]
    retention: timedelta
    orphan_age: timedelta
    max_deletions: int
    dry_run: bool
    prefix: str = f"{KEY_ROOT}/"


def execute(aws: PrunerAws, decisions: Iterable[Decision], summary: Summary, *, dry_run: bool) -> None:
    """Deletes in two phases per flush: every manifest first, then the other objects of the keys whose
    manifests are gone. A run cut short (timeout, failed batch) can leave archives without a manifest,
    which the next run collects, but never a manifest without its archive."""
    pending: list[Decision] = []

    def flush() -> None:
        if dry_run:
            for decision in pending:
                count_done(decision, {o.key for o in decision.objects}, summary)
            return
        first = aws.delete(m for d in pending for m in d.manifests)
        ready = [d for d in pending if all(m.key in first.deleted for m in d.manifests)]
        second = aws.delete(o for d in ready for o in d.rest)
        deleted = first.deleted | second.deleted
        for decision in pending:
            count_done(decision, deleted, summary)

    for decision in decisions:
        pending.append(decision)
        manifests = sum(len(d.manifests) for d in pending)
        if manifests >= DELETE_BATCH or sum(len(d.objects) for d in pending) >= MAX_PENDING_OBJECTS:
            flush()
            pending = []
    if pending:
        flush()


def run(
    aws: PrunerAws, settings: Settings, now: Callable[[], datetime], emit: Callable[[dict], None], run_id: str = ""
) -> Summary:
    run_id = run_id or uuid.uuid4().hex
    started = now()
    taken_over = lambda reason: emit({"event": "pruner-lock-taken-over", "reason": reason})  # noqa: E731
    if not aws.take_lock(run_id, started, started + LOCK_LIFETIME, taken_over):
        emit({"event": "pruner-busy", "reason": "another run holds the lock; this one deletes nothing"})
        return Summary()
    outcome = FAILED
    try:
        summary = _run(aws, settings, now, emit)
        outcome = PRUNED
        return summary
    except ActiveSetUnavailable:
        outcome = ACTIVE_SET_UNAVAILABLE
        raise
    finally:
        _report(aws, PrunerReport(now().timestamp(), outcome), emit)
        aws.release_lock(run_id)


def _report(aws: PrunerAws, report: PrunerReport, emit: Callable[[dict], None]) -> None:
    """The run's report for the agents' metrics (contracts/pruner_report.py); a report that cannot be written is
    logged, never raised over the run's own outcome."""
    try:
        aws.put_report(report.to_dict())
    except Exception as error:
        emit({"event": "report-unwritten", "outcome": report.outcome, "reason": f"{type(error).__name__}: {error}"})


def _run(aws: PrunerAws, settings: Settings, now: Callable[[], datetime], emit: Callable[[dict], None]) -> Summary:
    active: frozenset[str] = frozenset()
    for name in settings.active_set_parameters:
        try:
            keys, parts = parse_active_set_part(aws.parameter(name), name)
            for part in range(2, parts + 1):  # a set too large for one parameter: every part, or nothing
                part_name = active_set_part_name(name, part)
                keys |= parse_active_set_part(aws.parameter(part_name), part_name)[0]
            active |= keys
        except Exception as error:
            emit({"event": "active-set-unavailable", "parameter": name, "reason": f"{type(error).__name__}: {error}"})
            raise ActiveSetUnavailable(f"{name}: {error}") from error
    started = now()
    summary = Summary()
    decisions = select(
        aws.listing(settings.prefix),
        active=active,
        now=started,
        retention=settings.retention,
        orphan_age=settings.orphan_age,
        max_deletions=settings.max_deletions,
        summary=summary,
        read_manifest=lambda manifest: aws.manifest_facts(manifest, summary.unreadable_manifests),
    )
    execute(aws, decisions, summary, dry_run=settings.dry_run)
    if not settings.dry_run:
        for key, upload_id in aws.stale_uploads(settings.prefix, started - settings.orphan_age):
            aws.abort(key, upload_id)
            summary.aborted_uploads += 1
    emit(
        {
            "event": "pruned",
            "dry_run": settings.dry_run,
            "active_keys": len(active),
            **{k: v for k, v in asdict(summary).items() if k not in ("malformed", "unreadable_manifests")},
            "malformed": len(summary.malformed),
            "malformed_examples": summary.malformed[:5],
            # Kept as they are: which archives they name cannot be told (any node can write a manifest).
            "unreadable_manifests": len(summary.unreadable_manifests),
            "unreadable_manifest_examples": summary.unreadable_manifests[:5],
        }
    )
    return summary
