"""Why a setting cannot work where it is used, and what to do instead: what the node OS and preload-mode objects
answer, and the checks turn into Problems."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Refusal:
    field: str
    message: str
    fix: str
