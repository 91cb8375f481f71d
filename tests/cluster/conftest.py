"""Fixtures of the control-plane tier (make test-cluster): a real kube-apiserver, etcd, kube-scheduler and
kube-controller-manager of the shipped configs' Kubernetes version (tests/cluster/control_plane.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.cluster.api import Api
from tests.cluster.control_plane import ControlPlane, build_dir, built


@pytest.fixture(scope="session")
def control_plane_built() -> None:
    if not built():
        pytest.fail(f"the control plane is not built: run `make control-plane` (builds into {build_dir()})")


def _starter(tmp_path_factory) -> Iterator[Callable[..., ControlPlane]]:
    planes: list[ControlPlane] = []

    def start(**options) -> ControlPlane:
        plane = ControlPlane(tmp_path_factory.mktemp("control-plane")).start(**options)
        planes.append(plane)
        return plane

    yield start
    for plane in planes:
        plane.stop()


@pytest.fixture
def start_plane(control_plane_built, tmp_path_factory) -> Iterator[Callable[..., ControlPlane]]:
    """Starts fresh control planes (each test its own etcd); every one is stopped at the end."""
    yield from _starter(tmp_path_factory)


@pytest.fixture(scope="module")
def start_module_plane(control_plane_built, tmp_path_factory) -> Iterator[Callable[..., ControlPlane]]:
    """The same, for the planes a module's tests share."""
    yield from _starter(tmp_path_factory)


@pytest.fixture
def api(start_plane) -> Api:
    return Api(start_plane())
