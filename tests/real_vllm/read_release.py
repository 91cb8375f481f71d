"""Reads, inside an installed vLLM, the facts warmstart keeps per release (tests/real_vllm/record_facts.py runs it).
With a second argument (a JSON file of [variable, value] pairs) it evaluates each through vLLM's own getter instead.

Standard library and vLLM only; prints one JSON document. Nothing is typed in: every value is vLLM's own.
- `env.known`: every variable vLLM reads (`vllm.envs.environment_variables`); `env.hashed`: the names
  `envs.compile_factors()` puts into the compile hash.
- `env.values`: how vLLM parses each `VLLM_*` variable, found by calling its own getter on a fixed set of spellings
  after the engine's own environment check (`validate_environ`) (a getter made by `env_with_choices` and its
  list/set forms gives its choices from its closure); `env.removed`: the names the engine refuses, with its hint.
- `compile`: which function hashes the config (`compile_factors`, which replaced `compute_hash`), how the folder
  name is formed (read from `VllmBackend.__call__`'s source), and whether AOT compile and the self-contained AOT
  artifact are on by default with the installed (pinned) torch.
- `requires`: the wheel's `Requires-Dist` lines (the torch pin, the `runai` extra's streamer).
- `cli`: whether the `vllm serve` subcommand exists, and whether `python -m vllm.entrypoints.openai.api_server`
  warns that it is deprecated.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import sys
from collections.abc import Callable

# Spellings every getter is called with: numbers, words of both meanings in the usual cases, empty, text.
SPELLINGS = [
    "0",
    "1",
    "2",
    "-1",
    "1.5",
    "1e3",
    "true",
    "false",
    "True",
    "False",
    "TRUE",
    "FALSE",
    "yes",
    "no",
    "on",
    "off",
    "",
    "None",
    "abc",
    " true",
    "tRue",
    '{"dtype": "int8"}',
]
TRUE_WORDS = {"1", "true", "True", "TRUE", "yes", "on"}
FALSE_WORDS = {"0", "false", "False", "FALSE", "no", "off", ""}
CHOICE_GETTERS = {"_get_validated_env": False, "_get_validated_env_list": True, "_get_validated_env_set": True}


def _environ_check():
    """What the engine checks of the environment before it reads it: the platform's `validate_environ` (0.34.0:
    removed variables, values no longer supported) or `envs.validate_environ` (0.21.0). Called with
    hard_fail=False (`--fail-on-environ-validation` is off by default)."""
    import vllm.envs as envs
    from vllm.platforms import current_platform

    return getattr(type(current_platform), "validate_environ", None) or envs.validate_environ


def _checked_names() -> set[str]:
    """The VLLM_* names the engine's environment check names in its own code."""
    import ast
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(_environ_check())))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.fullmatch(r"VLLM_[A-Z0-9_]+", node.value)
    }


def _call(name: str, getter, value: str | None):
    saved = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        _environ_check()(False)
        return True, getter()
    except Exception as error:  # noqa: BLE001 - a refusal is what is recorded
        return False, error
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


def _choices(getter) -> dict | None:
    """The choices of a getter made by env_with_choices / env_list_with_choices / env_set_with_choices."""
    code = getattr(getter, "__code__", None)
    if code is None or code.co_name not in CHOICE_GETTERS:
        return None
    closure = inspect.getclosurevars(getter).nonlocals
    if code.co_name == "_get_validated_env_set":  # wraps the list getter's arguments
        closure = {**closure}
    choices = closure.get("choices")
    if callable(choices):
        try:
            choices = choices()
        except Exception as error:  # noqa: BLE001
            return {"kind": "unchecked", "why": f"its choices come from a call that failed here: {error}"}
    return {
        "kind": "choices",
        "choices": sorted(str(c) for c in choices or ()),
        "case_sensitive": bool(closure.get("case_sensitive", True)),
        "list": CHOICE_GETTERS[code.co_name],
    }


def _kind(name: str, getter) -> dict:
    chosen = _choices(getter)
    if chosen is not None:
        return chosen
    results = {spelling: _call(name, getter, spelling) for spelling in SPELLINGS}
    accepted = [s for s, (ok, _) in results.items() if ok]
    values = {s: value for s, (ok, value) in results.items() if ok}
    whole = [s for s in SPELLINGS if _parses(int, s)]
    if accepted == whole and all(isinstance(v, bool) for v in values.values()):
        return {"kind": "int_flag"}  # bool(int(...)): 0 off, any other whole number on
    if accepted == whole and all(isinstance(v, int) for v in values.values()):
        return {"kind": "int"}
    if set(accepted) == {s for s in SPELLINGS if _parses(float, s)} and all(
        isinstance(v, (int, float)) for v in values.values()
    ):
        return {"kind": "float"}
    if set(accepted) == {s for s in SPELLINGS if _parses(json.loads, s)}:
        return {"kind": "json"}  # maybe_convert_json_str_or_file: JSON text, or the path of a JSON file
    if len(accepted) == len(SPELLINGS) and all(isinstance(v, bool) for v in values.values()):
        return {
            "kind": "words_flag",
            "on": sorted(s for s, v in values.items() if v),
            "off": sorted(s for s, v in values.items() if not v),
            # Whether the getter reads a spelling as it reads it stripped and lowercased (`.strip().lower()`).
            "folds": all(values[s] == values.get(s.strip().lower(), values[s]) for s in values),
        }
    if len(accepted) == len(SPELLINGS):
        return {"kind": "text"}
    return {"kind": "other", "accepts": accepted}


def _parses(kind: Callable[[str], object], text: str) -> bool:
    try:
        kind(text)
    except ValueError:
        return False
    return True


def _folder_formula() -> str:
    """How VllmBackend names the compile folder: a sha256 of `str([env, config, code, compiler])` (0.21.0) or of the
    JSON of the raw factors (`hash_factors(all_factors)`, 0.34.0). Anything else is refused: the stand-in has to
    learn the new form first."""
    from vllm.compilation.backends import VllmBackend

    source = inspect.getsource(VllmBackend.__call__)
    if "hash_factors(all_factors)" in source:
        return "sha256-json-raw-factors"
    if "factors = [env_hash, config_hash, code_hash, compiler_hash]" in source:
        return "sha256-str-hash-list"
    raise SystemExit("vllm/compilation/backends.py names its compile folder in a way this reader does not know")


def _deprecated_module_server() -> bool:
    import importlib.util

    spec = importlib.util.find_spec("vllm.entrypoints.openai.api_server")
    if spec is None or spec.loader is None:
        return False
    source = spec.loader.get_source(spec.name) or ""  # type: ignore[attr-defined]  # a source loader's
    return "deprecated" in source.split('if __name__ == "__main__"')[-1]


def evaluate(pairs: list[list[str]]) -> list[dict]:
    """Each (variable, value) through vLLM's own getter: {"ok": true, "value": ...} or {"ok": false, "error": ...}."""
    import vllm.envs as envs

    results = []
    for name, value in pairs:
        ok, got = _call(name, envs.environment_variables[name], value)
        results.append(
            {"ok": True, "value": _plain(got)} if ok else {"ok": False, "error": f"{type(got).__name__}: {got}"}
        )
    return results


def _plain(value):
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def main() -> int:
    # Some getters read the platform: the node's GPU, as the probe reports it (argv[1]: gpu.json).
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from probe import install_platform

    with open(sys.argv[1]) as gpu:
        install_platform(json.load(gpu))
    if len(sys.argv) > 2:  # argv[2]: a JSON file of [variable, value] pairs to evaluate instead
        with open(sys.argv[2]) as pairs:
            print("VLLM-VALUES " + json.dumps(evaluate(json.load(pairs))))
        return 0
    import importlib.metadata

    import vllm
    import vllm.envs as envs
    from vllm.config import VllmConfig

    values = {
        name: _kind(name, getter) for name, getter in envs.environment_variables.items() if name.startswith("VLLM_")
    }
    # Names the engine's environment check reads itself, outside `environment_variables` (0.34.0 refuses
    # VLLM_USE_V2_MODEL_RUNNER unless it is 1): their values as that check takes them.
    for name in _checked_names() - set(values) - set(getattr(envs, "removed_environment_variables", {})):
        values[name] = _kind(name, lambda name=name: os.environ.get(name))
    try:
        import vllm.entrypoints.cli.serve  # noqa: F401

        serve = True
    except ImportError:
        serve = False
    document = {
        "vllm": vllm.__version__,
        "env": {
            "known": sorted(envs.environment_variables),
            "hashed": sorted(envs.compile_factors()),
            "values": values,
            # Names the engine refuses at start, with vLLM's own hint (0.34.0 `removed_environment_variables`).
            "removed": dict(getattr(envs, "removed_environment_variables", {})),
        },
        "compile": {
            "config_factors": "compile_factors" if hasattr(VllmConfig, "compile_factors") else "compute_hash",
            "folder_name": _folder_formula(),
            "aot_compile_default": bool(envs.VLLM_USE_AOT_COMPILE),
            "mega_aot_artifact_default": bool(envs.VLLM_USE_MEGA_AOT_ARTIFACT),
        },
        "cli": {"serve": serve, "module_server_deprecated": _deprecated_module_server()},
        "requires": importlib.metadata.requires("vllm") or [],
    }
    print("VLLM-RELEASE " + json.dumps(document, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
