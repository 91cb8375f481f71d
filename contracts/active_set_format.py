"""The active set's format: the compile-cache keys the pruner keeps, written by synth (warmstart/active_set.py)
into SSM parameters and read by the pruner Lambda."""

from __future__ import annotations

# The active set (the keys the pruner keeps) may need several SSM parameters: the first names how many parts
# there are, the others are <name>-2, <name>-3, ... (warmstart.active_set writes them, the pruner reads them).
MAX_ACTIVE_SET_PARTS = 20


def active_set_part_name(name: str, part: int) -> str:
    return name if part == 1 else f"{name}-{part}"
