"""What is wrong, and its fix: the one type every part of warmstart uses to say so.

A `Problem` is where (the config field's path; empty for what is about no single field, as a preflight's findings
in the account or an existing cluster), what, how to fix it in words, and the same fix as data (`checks/fix.py`)
that a program can apply. The config model's validators raise it as `Refused` (pydantic takes only exceptions),
the node OS objects return it, the synth-time checks and both preflights (warmstart_cli/) report it.
"""

from __future__ import annotations

import dataclasses
import sys
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
        # A problem with no fix that would work says so by having none; one about no single field (a preflight's:
        # credentials, the account, an existing cluster's objects) has no field to name.
        where = f"{self.field}: " if self.field else ""
        return f"{where}{self.message}" + (f"\n    fix: {self.fix}" if self.fix else "")


class Refused(ValueError):
    """A validator's refusal in the config model: its words and its fix as data, with paths relative to the
    validated field ("" is the field itself; a path starting with "/" is from the file's top)."""

    def __init__(self, message: str, fix: str, *fixes: Fix) -> None:
        super().__init__(f"{message}; fix: {fix}")
        self.fixes = fixes
        # Which validator refused, and where (tests check that each refusal's fix is applied somewhere).
        self.origin = sys._getframe(1).f_code.co_qualname
        self.site = call_site(1)
