"""One thing wrong with a config: where (the field's path), what, how to fix it in words, and the same fix as data
(warmstart/checks/fix.py) that a program can apply."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from warmstart.checks.fix import Fix, call_site


@dataclass(frozen=True)
class Problem:
    field: str
    message: str
    fix: str
    # The alternatives the words offer, each applicable on its own; none where no change of settings would do.
    fixes: tuple[Fix, ...] = dataclasses.field(default=(), compare=False)
    # Where in the source the refusal is written (file:line), filled in by its construction.
    site: str = dataclasses.field(default="", compare=False)
    # The rule (module.function) or the model's own check that found it.
    rule: str = dataclasses.field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.site:
            object.__setattr__(self, "site", call_site(2))  # past this method and the dataclass's __init__

    def __str__(self) -> str:
        # A problem with no fix that would work says so by having none.
        return f"{self.field}: {self.message}" + (f"\n    fix: {self.fix}" if self.fix else "")
