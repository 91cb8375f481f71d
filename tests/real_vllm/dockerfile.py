"""The environment and entry point a Dockerfile target's image runs with, read from the Dockerfile itself.

What the real vLLM tier needs of a serving image `vllm/vllm-openai:v<version>`: its ENV (variables vLLM reads and
hashes, such as `VLLM_USAGE_SOURCE` and `CUDA_HOME`) and its ENTRYPOINT, as vLLM's own `docker/Dockerfile` builds
the `vllm-openai` target. Follows Docker's rules (Dockerfile reference, "ENV", "ARG", "FROM", "Environment
replacement"): a target inherits the ENV of the stages it is built `FROM`, in order; an `ARG` before the first
`FROM` is global and a stage's bare `ARG NAME` takes its default; `$NAME`, `${NAME}`, `${NAME:-word}` and
`${NAME:+word}` are replaced, a build argument with no default being empty. The base image's own ENV (the CUDA
image's) is not in the Dockerfile and is left out.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

_REFERENCE = re.compile(
    r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?::(?P<op>[-+])(?P<word>[^}]*))?\}|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def instructions(text: str) -> list[tuple[str, str]]:
    """(keyword, arguments) per instruction: continuation lines joined, comments and blank lines dropped."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        if whole:
            keyword, _, arguments = whole.partition(" ")
            found.append((keyword.upper(), arguments.strip()))
    return found


def substitute(text: str, variables: dict[str, str]) -> str:
    def replace(match: re.Match) -> str:
        name = match.group("braced") or match.group("bare")
        value = variables.get(name, "")
        if match.group("op") == "-":
            return value or match.group("word")
        if match.group("op") == "+":
            return match.group("word") if value else ""
        return value

    return _REFERENCE.sub(replace, text)


def _pairs(arguments: str, variables: dict[str, str]) -> list[tuple[str, str]]:
    """ENV's two forms: `K=V [K2=V2 ...]` (values may be quoted) and the legacy `K V...`."""
    words = shlex.split(arguments, posix=True)
    if words and "=" not in words[0]:
        name, _, value = arguments.partition(" ")
        return [(name, substitute(value.strip().strip('"'), variables))]
    pairs = []
    for word in words:
        name, _, value = word.partition("=")
        pairs.append((name, substitute(value, variables)))
    return pairs


def _stages(text: str) -> tuple[dict[str, str], list[Stage]]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, arguments in instructions(text):
        if keyword == "FROM":
            words = arguments.split()
            words = [w for w in words if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
        elif not stages:
            if keyword == "ARG":
                for declaration in shlex.split(arguments):
                    name, _, default = declaration.partition("=")
                    global_args[name] = substitute(default, global_args)
        else:
            stages[-1].instructions.append((keyword, arguments))
    return global_args, stages


def image_config(text: str, target: str) -> dict:
    """{"env": {...}, "entrypoint": [...]} of the image the Dockerfile builds for `target`."""
    global_args, stages = _stages(text)
    by_name = {stage.name: stage for stage in stages if stage.name}
    if target not in by_name:
        raise KeyError(f"the Dockerfile has no stage named {target!r}")
    chain = [by_name[target]]
    while chain[-1].base in by_name:
        chain.append(by_name[chain[-1].base])
    env: dict[str, str] = {}
    entrypoint: list[str] = []
    for stage in reversed(chain):
        args: dict[str, str] = {}
        for keyword, arguments in stage.instructions:
            variables = {**global_args, **args, **env}
            if keyword == "ARG":
                for declaration in shlex.split(arguments):
                    name, equals, default = declaration.partition("=")
                    args[name] = substitute(default, variables) if equals else global_args.get(name, args.get(name, ""))
            elif keyword == "ENV":
                for name, value in _pairs(arguments, variables):
                    env[name] = value
            elif keyword == "ENTRYPOINT":
                entrypoint = _exec_form(arguments)
    return {"env": env, "entrypoint": entrypoint}


def _exec_form(arguments: str) -> list[str]:
    import json

    try:
        parsed = json.loads(arguments)
    except ValueError:
        return ["/bin/sh", "-c", arguments]
    return [str(part) for part in parsed]


def arg_default(text: str, name: str) -> str | None:
    """The default of a build argument (the last declaration with one), as written."""
    found = None
    for keyword, arguments in instructions(text):
        if keyword == "ARG":
            for declaration in shlex.split(arguments):
                key, equals, default = declaration.partition("=")
                if key == name and equals:
                    found = default
    return found
