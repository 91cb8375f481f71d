"""One pruning run: read the active sets (fail closed), select, delete, summarize."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Callable

from lambdas.compile_cache_pruner.aws import PrunerAws
from lambdas.compile_cache_pruner.selection import Summary, parse_active_set, select
from warmstart.cache_key import KEY_ROOT


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


def run(aws: PrunerAws, settings: Settings, now: Callable[[], datetime], emit: Callable[[dict], None]) -> Summary:
    active: frozenset[str] = frozenset()
    for name in settings.active_set_parameters:
        try:
            active |= parse_active_set(aws.parameter(name), name)
        except Exception as error:
            emit({"event": "active-set-unavailable", "parameter": name, "reason": f"{type(error).__name__}: {error}"})
            raise ActiveSetUnavailable(f"{name}: {error}") from error
    started = now()
    summary = Summary()
    chosen = select(
        aws.listing(settings.prefix),
        active=active,
        now=started,
        retention=settings.retention,
        orphan_age=settings.orphan_age,
        max_deletions=settings.max_deletions,
        summary=summary,
    )
    if settings.dry_run:
        for _ in chosen:  # count only
            pass
    else:
        aws.delete(chosen)
        for key, upload_id in aws.stale_uploads(settings.prefix, started - settings.orphan_age):
            aws.abort(key, upload_id)
            summary.aborted_uploads += 1
    emit({"event": "pruned", "dry_run": settings.dry_run, "active_keys": len(active),
          **{k: v for k, v in asdict(summary).items() if k != "malformed"},
          "malformed": len(summary.malformed), "malformed_examples": summary.malformed[:5]})
    return summary
