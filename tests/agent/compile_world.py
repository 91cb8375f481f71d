"""The model and key factors the compile-cache tests share with the pruner's end-to-end tests."""

from __future__ import annotations

from tests.agent.conftest import (
    FACTORS,
)

FINGERPRINT = FACTORS.fingerprint()
MODEL = FACTORS.model
