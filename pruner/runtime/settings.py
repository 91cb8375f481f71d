"""The pruner function's settings: one definition the construct writes into the function's environment and the
handler reads back (standard library only: it runs in the Lambda runtime)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class PrunerEnvironment:
    bucket: str
    active_set_parameters: tuple[str, ...]
    retention_days: float
    orphan_age_hours: float
    max_deletions: int
    dry_run: bool
    environment: str

    def variables(self) -> dict[str, str]:
        """The function's environment variables."""
        return {
            "BUCKET": self.bucket,
            "ACTIVE_SET_PARAMETERS": ",".join(self.active_set_parameters),
            "RETENTION_DAYS": f"{self.retention_days:g}",
            "ORPHAN_AGE_HOURS": f"{self.orphan_age_hours:g}",
            "MAX_DELETIONS": str(self.max_deletions),
            "DRY_RUN": "true" if self.dry_run else "false",
            "WARMSTART_ENVIRONMENT": self.environment,
        }

    @classmethod
    def read(cls, variables: Mapping[str, str]) -> PrunerEnvironment:
        """Back from the environment; a missing variable raises KeyError naming it."""
        return cls(
            bucket=variables["BUCKET"],
            active_set_parameters=tuple(variables["ACTIVE_SET_PARAMETERS"].split(",")),
            retention_days=float(variables["RETENTION_DAYS"]),
            orphan_age_hours=float(variables["ORPHAN_AGE_HOURS"]),
            max_deletions=int(variables["MAX_DELETIONS"]),
            dry_run=variables["DRY_RUN"] == "true",
            environment=variables["WARMSTART_ENVIRONMENT"],
        )

    @property
    def retention(self) -> timedelta:
        return timedelta(days=self.retention_days)

    @property
    def orphan_age(self) -> timedelta:
        return timedelta(hours=self.orphan_age_hours)
