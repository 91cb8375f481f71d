"""How serving images reach GPU nodes before the pods that need them (`image_preload.mode`): one object per mode
answers what the mode runs (prepull DaemonSets, an image snapshot build) and how an image reaches a new node, in
words. Nothing outside warmstart/preload_modes/ compares the mode's name."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol

from warmstart.node_os.base import NodeOs, Preload


# What a mode reads of the environment's config, as the shapes it needs: the config model (warmstart/config/) lists
# the modes, so the modes name no config class (no import circle, not even for types).
class _Pool(Protocol):
    @property
    def instance_types(self) -> Sequence[str]: ...


class _Compute(Protocol):
    @property
    def node_os(self) -> NodeOs: ...
    @property
    def gpu_pool(self) -> _Pool: ...


class _Preload(Preload, Protocol):
    @property
    def rollout_wait_minutes(self) -> int: ...


class Environment(Protocol):
    """An environment's config as the modes read it (warmstart.config.environment.EnvironmentConfig)."""

    @property
    def compute(self) -> _Compute: ...
    @property
    def image_preload(self) -> _Preload: ...


class PreloadMode(ABC):
    name: str
    # A DaemonSet per serving image pulls it onto every GPU node (and a new image reaches the running nodes, through
    # its gate, before its pods roll).
    prepulls: bool
    # New nodes boot with the images on disk: the stack builds an image snapshot their data volumes start from.
    boots_with_images: bool = False

    @abstractmethod
    def route(self, config: Environment) -> str:
        """How a model's image reaches a new GPU node, in words (warmstart plan)."""


def faster(config: Environment) -> str:
    """How the GPU nodes pull, as their OS does it (Auto Mode in parallel whatever the setting)."""
    return " with SOCI parallel pull and unpack" if pulls_in_parallel(config) else ""


def pulls_in_parallel(config: Environment) -> bool:
    """Whether the pool's nodes pull with SOCI parallel pull (every instance type of the pool)."""
    node_os, preload = config.compute.node_os, config.image_preload
    return all(node_os.pulls_in_parallel(preload, t) for t in config.compute.gpu_pool.instance_types)


def rollout_gate(config: Environment) -> str:
    return (
        f"a new image reaches the running GPU nodes before its pods roll (the deploy waits up to "
        f"{config.image_preload.rollout_wait_minutes} min for its prepull DaemonSet)"
    )


def snapshot_unavailable(config: Environment) -> str:
    """Whether new nodes could boot with the image on disk in this compute mode / OS, and how."""
    obstacle = config.compute.node_os.snapshot_obstacle()
    if obstacle is None:
        return "image_preload.mode: snapshot would boot new nodes with it on disk"
    alternative = f"; {obstacle.alternative}" if obstacle.alternative else ""
    return f"no way to boot new nodes with it on disk {obstacle.where} ({obstacle.why}){alternative}"
