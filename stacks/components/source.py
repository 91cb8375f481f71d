"""The repository's own source as asset content: the Lambda code and the agent image's build context."""

from __future__ import annotations

from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def only(*folders: str) -> list[str]:
    """Docker-style exclude patterns that keep just these top-level folders (no bytecode caches)."""
    return ["*", *(f"!{folder}" for folder in folders), "**/__pycache__"]
