"""The image preload modes, one object each (warmstart/preload_modes/base.py says what each answers). Adding a
mode is one module here: every module's PreloadMode classes register, and the config accepts their names."""

from __future__ import annotations

from warmstart.discovery import subclasses_in
from warmstart.preload_modes.base import PreloadMode

PRELOAD_MODES: dict[str, PreloadMode] = {mode.name: mode() for mode in subclasses_in(__name__, __path__, PreloadMode)}

__all__ = ["PRELOAD_MODES", "PreloadMode"]
