"""What a valid config leaves unchecked because a table of facts does not reach that far: a vLLM release or a node OS
release newer than (or between) the recorded ones, a variable the release does not know. Never a refusal (a table
cannot know the future); `make synth`, `warmstart plan` and `make deploy`'s preflight print them."""

from __future__ import annotations

from warmstart.config.compute import KarpenterCompute
from warmstart.config.environment import EnvironmentConfig
from warmstart.vllm_release import NEWEST, SUPPORTED, facts_for, serving_release, serving_version, version_key


def config_notes(config: EnvironmentConfig) -> list[str]:
    notes = []
    for index, model in enumerate(config.models):
        at = f"models[{index}]"
        version = serving_version(model)
        known = serving_release(model)
        if version is not None and known is None:
            newer = version_key(version) > version_key(NEWEST)
            shaped = facts_for(model).version
            notes.append(
                f"{at}: vLLM {version} is {'newer than' if newer else 'not one of'} the releases warmstart has facts "
                f"of ({', '.join(SUPPORTED)}): its pods are rendered as {shaped}'s are, its torch_version is taken as "
                "given, and its vllm_env values are not checked against its own parser; to check them, record its "
                f"facts (python -m tests.real_vllm.record_facts {version}; docs/vllm-workload.md, 'Supported vLLM "
                "releases')"
            )
        if known is not None:
            unknown = sorted(name for name in model.vllm_env if not known.reads_variable(name))
            if unknown:
                notes.append(
                    f"{at}.vllm_env: vLLM {known.version} reads no variable named {', '.join(unknown)} (a plugin "
                    "may; vLLM logs a warning): a misspelt name changes nothing in vLLM but still makes a new "
                    "compile-cache key"
                )
    if isinstance(config.compute, KarpenterCompute):
        note = config.compute.node_os.release_note(config.cluster.kubernetes_version)
        if note:
            notes.append(f"compute.ami_alias: {note}")
    return notes
