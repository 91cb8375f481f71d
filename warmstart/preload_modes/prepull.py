"""A DaemonSet per serving image pulls it onto every GPU node as the node joins; a new image reaches the existing
nodes before its pods roll."""

from __future__ import annotations

from typing import TYPE_CHECKING

from warmstart.preload_modes.base import PreloadMode, faster, rollout_gate, snapshot_unavailable

if TYPE_CHECKING:
    from warmstart.config.environment import EnvironmentConfig


class Prepull(PreloadMode):
    name = "prepull"
    prepulls = True

    def route(self, config: EnvironmentConfig) -> str:
        return "; ".join(
            [
                f"the pre-pull DaemonSet pulls it{faster(config)} when a new node joins, alongside the first pod "
                "that lands there (that pod still waits for the pull)",
                snapshot_unavailable(config),
                rollout_gate(config),
            ]
        )
