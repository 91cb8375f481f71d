"""A DaemonSet per serving image pulls it onto every GPU node as the node joins; a new image reaches the existing
nodes before its pods roll."""

from __future__ import annotations

from warmstart.preload_modes.base import Environment, PreloadMode, faster, rollout_gate, snapshot_unavailable


class Prepull(PreloadMode):
    name = "prepull"
    prepulls = True

    def route(self, config: Environment) -> str:
        return "; ".join(
            [
                f"the prepull DaemonSet pulls it{faster(config)} when a new node joins, alongside the first pod "
                "that lands there (that pod still waits for the pull)",
                snapshot_unavailable(config),
                rollout_gate(config),
            ]
        )
