"""Fixtures the construct tests share."""

from tests.admission_policy import pod, policy, roots  # noqa: F401 - the admission policy's fixtures
