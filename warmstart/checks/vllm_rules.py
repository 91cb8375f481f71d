"""Each model's vLLM: the release its image runs, the PyTorch that follows from it, and the `vllm_env` entries as
that release names and parses them (warmstart/vllm_releases/, recorded from each release's own packages)."""

from __future__ import annotations

import json
import re

from warmstart.checks.fix import Ask, Edit, Fix, removing, setting, together
from warmstart.checks.rule import rule
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import ModelSpec
from warmstart.naming import moving_reference, reference_problem
from warmstart.node_caches import weights_cached
from warmstart.problem import Problem
from warmstart.reserved_vllm_env import NODE_COPY_PLUGIN, RESERVED_VLLM_ENV
from warmstart.vllm_release import (
    DEFAULT_IMAGE,
    NEWEST,
    OLDEST,
    SUPPORTED,
    image_version,
    release,
    releases,
    serving_release,
    serving_version,
    version_key,
)

TORCH_CHECK = "python3 -c 'import torch; print(torch.__version__)' in the image"


@rule()
def _serving_releases(config: EnvironmentConfig) -> list[Problem]:
    problems = []
    for index, model in enumerate(config.models):
        problems += _release(model, f"models[{index}]")
    return problems


def _release(model: ModelSpec, at: str) -> list[Problem]:
    if reference_problem(model.image) or moving_reference(model.image):
        return []  # the image's own refusal comes first (workload_rules), and its fix names a release
    tagged = image_version(model.image)
    if model.vllm_version and tagged and model.vllm_version != tagged:
        return [
            Problem(
                f"{at}.vllm_version",
                f"{model.vllm_version!r} is not the release the image's tag names ({tagged})",
                "remove vllm_version: the tag says which release the image runs",
                (removing(f"{at}.vllm_version"),),
            )
        ]
    version = serving_version(model)
    # Naming a release lets its parser check the vllm_env values, which may then be refused in turn.
    values = (f"{at}.vllm_env",) if model.vllm_env else ()
    then = " (then also any vllm_env value that release refuses)" if values else ""
    if version is None:
        return [
            Problem(
                f"{at}.vllm_version",
                f"the image {model.image!r} names no vLLM release in its tag and vllm_version is not set: warmstart "
                "takes the release's PyTorch, the variables it knows and how it parses them, and its CLI from it",
                f"set vllm_version to the vLLM release inside the image (such as {NEWEST}){then}",
                (
                    Fix(
                        (Edit(f"{at}.vllm_version", Ask("the vLLM release inside the image", NEWEST)),),
                        then_also=values,
                    ),
                ),
            )
        ]
    if version_key(version) < version_key(OLDEST):
        where = f"{at}.vllm_version" if model.vllm_version else f"{at}.image"
        clear = [Edit(f"{at}.{name}") for name in ("vllm_version", "torch_version") if getattr(model, name)]
        return [
            Problem(
                where,
                f"vLLM {version} is older than the oldest release warmstart supports ({OLDEST}): what warmstart relies "
                "on (the streamer's distributed load, AOT compile folders, general plugins, the env names) is read "
                f"from {', '.join(SUPPORTED)}",
                f"serve {DEFAULT_IMAGE}, or another release from {OLDEST} on{then}",
                (together(Edit(f"{at}.image", DEFAULT_IMAGE), *clear, then_also=values),),
            )
        ]
    known = release(version)
    if known is None:
        if model.torch_version is not None:
            return []  # a release newer than the table, or between its releases: a note says so (warmstart/notes.py)
        newest_torch = releases()[NEWEST].torch
        return [
            Problem(
                f"{at}.torch_version",
                f"vLLM {version} is not among the releases warmstart has facts of ({', '.join(SUPPORTED)}), so the "
                "PyTorch in its image (a factor of the compile cache's key) does not follow from it",
                f"set torch_version to the PyTorch inside the image ({TORCH_CHECK}), or record the release's "
                f"facts: python -m tests.real_vllm.record_facts {version}",
                (setting(f"{at}.torch_version", Ask("the PyTorch inside the image", newest_torch)),),
            )
        ]
    if model.torch_version is not None and _public(model.torch_version) != _public(known.torch):
        return [
            Problem(
                f"{at}.torch_version",
                f"{model.torch_version!r} is not the PyTorch vLLM {version} pins ({known.torch}, its wheel's "
                "Requires-Dist): the compile cache would be keyed by a PyTorch the image does not run",
                f"remove torch_version (it follows from the release), or set it to {known.torch}",
                (removing(f"{at}.torch_version"), setting(f"{at}.torch_version", known.torch)),
            )
        ]
    return []


def _public(version: str) -> str:
    """A PyTorch version without its local part (2.14.0+cu130 -> 2.14.0)."""
    return version.split("+", 1)[0]


@rule()
def _vllm_envs(config: EnvironmentConfig) -> list[Problem]:
    problems = []
    for index, model in enumerate(config.models):
        at = f"models[{index}]"
        problems += _vllm_env(model, f"{at}.vllm_env")
        if weights_cached(model, config):
            problems += _plugin_listed(model.vllm_env, f"{at}.vllm_env.VLLM_PLUGINS")
    return problems


def env_path(field: str, name: str) -> str:
    return f"{field}.{name}" if name.isidentifier() else f"{field}[{json.dumps(name)}]"


def _vllm_env(model: ModelSpec, field: str) -> list[Problem]:
    problems = []
    known = serving_release(model)
    for name, value in model.vllm_env.items():
        at = env_path(field, name)
        remove = (removing(at),)
        if not re.fullmatch(r"VLLM_[A-Z0-9_]+", name):
            problems.append(Problem(at, "only VLLM_* variables belong here", "rename or remove it", remove))
        elif name in RESERVED_VLLM_ENV:
            problems.append(Problem(at, f"not allowed here: {RESERVED_VLLM_ENV[name]}", "remove it", remove))
        elif "$(" in value:
            problems.append(
                Problem(
                    at,
                    "warmstart passes values to vLLM literally (no $(...) expansion), the same on every pod, as "
                    "the compile-cache key needs; a pod-specific value would make every pod hash differently",
                    "use a literal value, or remove it",
                    remove,
                )
            )
        elif known is not None and name in known.removed_env:
            problems.append(
                Problem(
                    at,
                    f"vLLM {known.version} removed {name} and stops the engine at start when it is set; it says: "
                    f"{known.removed_env[name]}",
                    "remove it (and follow vLLM's hint where it names another setting)",
                    remove,
                )
            )
        elif known is not None and (refused := known.value_refusal(name, value)) is not None:
            why, words, values = refused
            problems.append(Problem(at, f"{value!r}: {why}", words, (*(setting(at, v) for v in values), *remove)))
    return problems


def _plugin_listed(env: dict[str, str], field: str) -> list[Problem]:
    """A plugin list that leaves out warmstart's would have pods read the node copy through the loopback S3
    endpoint, at a fraction of the NVMe's rate (the streamer's S3 client; docs/upstream-facts.md)."""
    listed = env.get("VLLM_PLUGINS")
    if listed is None or NODE_COPY_PLUGIN in listed.split(","):
        return []
    return [
        Problem(
            field,
            f"vLLM loads only the plugins listed here, and {NODE_COPY_PLUGIN!r} is not among them: with the weights "
            "cache on, pods would read the node's copy through the loopback S3 endpoint instead of as local files",
            f"add {NODE_COPY_PLUGIN} to the list, or remove the variable",
            (setting(field, ",".join([*filter(None, listed.split(",")), NODE_COPY_PLUGIN])), removing(field)),
        )
    ]
