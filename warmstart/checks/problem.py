"""One thing wrong with a config: where (the field's path), what, and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    field: str
    message: str
    fix: str

    def __str__(self) -> str:
        # A problem with no fix that would work says so by having none.
        return f"{self.field}: {self.message}" + (f"\n    fix: {self.fix}" if self.fix else "")
