"""Every pod pulls its image itself."""

from __future__ import annotations

from warmstart.preload_modes.base import Environment, PreloadMode, faster, snapshot_unavailable


class Off(PreloadMode):
    name = "off"
    prepulls = False

    def route(self, config: Environment) -> str:
        return f"pulled by each pod on its node{faster(config)} (image_preload off); " + snapshot_unavailable(config)
