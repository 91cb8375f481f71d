from __future__ import annotations

import pytest

from tests.synth import SHIPPED_ENVIRONMENTS, Synthesized, synthesize_shipped
from warmstart.catalog import default_catalog

_cache: dict[str, Synthesized] = {}


@pytest.fixture(scope="session")
def synthesized_env(tmp_path_factory):
    """Synthesizes each shipped environment at most once per session."""

    def get(name: str) -> Synthesized:
        if name not in _cache:
            _cache[name] = synthesize_shipped(name, tmp_path_factory.mktemp(f"cdk-{name}"))
        return _cache[name]

    return get


@pytest.fixture(scope="session", params=SHIPPED_ENVIRONMENTS)
def shipped(request, synthesized_env) -> Synthesized:
    return synthesized_env(request.param)


@pytest.fixture(scope="session")
def dev(synthesized_env) -> Synthesized:
    return synthesized_env("dev")


@pytest.fixture(scope="session")
def prod(synthesized_env) -> Synthesized:
    return synthesized_env("prod")


@pytest.fixture(scope="session")
def catalog():
    return default_catalog()
