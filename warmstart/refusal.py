"""Why a setting cannot work where it is used, and what to do instead: what the node OS and preload-mode objects
answer, and the checks turn into Problems."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from warmstart.checks.fix import Fix, call_site


@dataclass(frozen=True)
class Refusal:
    field: str
    message: str
    fix: str
    fixes: tuple[Fix, ...] = dataclasses.field(default=(), compare=False)
    # Where in the source the refusal is written (file:line), filled in by its construction.
    site: str = dataclasses.field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.site:
            object.__setattr__(self, "site", call_site(2))  # past this method and the dataclass's __init__
