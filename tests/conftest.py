from __future__ import annotations

import pytest

from tests.s3_server import SeaweedS3
from tests.synth import (
    CREATED_CLUSTER_ENVIRONMENTS,
    EVERY_ENVIRONMENT,
    EXISTING_CLUSTER_ENVIRONMENTS,
    SHIPPED_ENVIRONMENTS,
    Synthesized,
    synthesize_any,
)
from warmstart.catalog import default_catalog

_cache: dict[str, Synthesized] = {}


@pytest.fixture(scope="session")
def synthesized_env(tmp_path_factory):
    """Synthesizes each shipped environment at most once per session."""

    def get(name: str) -> Synthesized:
        if name not in _cache:
            _cache[name] = synthesize_any(name, tmp_path_factory.mktemp(f"cdk-{name}"))
        return _cache[name]

    return get


@pytest.fixture(scope="session", params=SHIPPED_ENVIRONMENTS)
def shipped(request, synthesized_env) -> Synthesized:
    return synthesized_env(request.param)


@pytest.fixture(scope="session", params=CREATED_CLUSTER_ENVIRONMENTS)
def created(request, synthesized_env) -> Synthesized:
    """The shipped environments whose VPC and cluster warmstart creates."""
    return synthesized_env(request.param)


@pytest.fixture(scope="session", params=EXISTING_CLUSTER_ENVIRONMENTS)
def existing(request, synthesized_env) -> Synthesized:
    """Every environment that adds warmstart to a cluster and VPC it did not create (shipped and variants)."""
    return synthesized_env(request.param)


@pytest.fixture(scope="session", params=EVERY_ENVIRONMENT)
def every_env(request, synthesized_env) -> Synthesized:
    """The shipped environments and the variants of tests/synth.py, for checks that hold for any environment."""
    return synthesized_env(request.param)


@pytest.fixture(scope="session")
def snapshot_env(synthesized_env) -> Synthesized:
    return synthesized_env("prod-bottlerocket-snapshot")


@pytest.fixture(scope="session")
def dev(synthesized_env) -> Synthesized:
    return synthesized_env("dev")


@pytest.fixture(scope="session")
def prod(synthesized_env) -> Synthesized:
    return synthesized_env("prod")


@pytest.fixture(scope="session")
def catalog():
    return default_catalog()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One real S3-compatible server (SeaweedFS) for the whole session."""
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs")).start()
    yield server
    server.stop()


@pytest.fixture
def bucket(s3_server) -> str:
    return s3_server.new_bucket()
