"""Every pod pulls its image itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from warmstart.preload_modes.base import PreloadMode, faster, snapshot_unavailable

if TYPE_CHECKING:
    from warmstart.config.environment import EnvironmentConfig


class Off(PreloadMode):
    name = "off"
    prepulls = False

    def route(self, config: EnvironmentConfig) -> str:
        return f"pulled by each pod on its node{faster(config)} (image_preload off); " + snapshot_unavailable(config)
