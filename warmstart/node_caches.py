"""What GPU nodes cache for the models: their compile caches and weights (the node agent runs where any model uses
one) and their serving images. The DaemonSets that follow take a share of every GPU node (warmstart/node_model.py),
and each model's plan reads the same answers."""

from __future__ import annotations

from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import ModelSpec


def compile_cached(model: ModelSpec, config: EnvironmentConfig) -> bool:
    """enforce_eager runs no torch.compile: nothing to cache."""
    return config.caches.compile and not model.enforce_eager


def weights_cached(model: ModelSpec, config: EnvironmentConfig) -> bool:
    return config.caches.weights if model.weights_cache is None else model.weights_cache


def runs_node_agent(config: EnvironmentConfig) -> bool:
    return any(compile_cached(m, config) or weights_cached(m, config) for m in config.models)


def serving_images(config: EnvironmentConfig) -> list[str]:
    return sorted({m.image for m in config.models})
