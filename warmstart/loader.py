"""Load an environment file into a validated EnvironmentConfig, or fail with every problem listed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from warmstart.catalog import Catalog, default_catalog
from warmstart.checks import Problem, check_environment
from warmstart.config import EnvironmentConfig


class ConfigError(ValueError):
    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        listing = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s) in the configuration\n{listing}")


def load_config(path: str | Path, catalog: Catalog | None = None) -> EnvironmentConfig:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(str(path), [Problem("<file>", "file not found", "pass an existing config/<env>.yaml")])
    except yaml.YAMLError as error:
        raise ConfigError(str(path), [Problem("<file>", f"not valid YAML: {error}", "fix the YAML syntax")])
    return parse_config(raw, source=str(path), catalog=catalog)


def parse_config(raw: Any, *, source: str = "<config>", catalog: Catalog | None = None) -> EnvironmentConfig:
    if not isinstance(raw, dict):
        raise ConfigError(source, [Problem("<root>", "expected a mapping of settings", "see config/dev.yaml")])
    try:
        config = EnvironmentConfig.model_validate(raw)
    except ValidationError as error:
        raise ConfigError(source, _problems(error)) from None
    problems = check_environment(config, catalog or default_catalog())
    if problems:
        raise ConfigError(source, problems)
    return config


# Union branch names pydantic puts into error locations; they are not fields.
_BRANCH_TAGS = {"auto", "karpenter", "int", "str", "float", "bool"}


def _is_field(part: str) -> bool:
    return part.isidentifier() and part not in _BRANCH_TAGS


def _path(loc: tuple) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _is_field(part):
            text += f".{part}" if text else part
    return text or "<root>"


def _problems(error: ValidationError) -> list[Problem]:
    """One problem per field: the branches of a union (an int or 'auto') fail together."""
    by_field: dict[str, list[Problem]] = {}
    for detail in error.errors():
        problem = _problem(detail)
        by_field.setdefault(problem.field, []).append(problem)
    merged = []
    for field, found in by_field.items():
        if len(found) == 1:
            merged.append(found[0])
        else:
            merged.append(Problem(field, " or ".join(p.message for p in found), "use one of the accepted forms"))
    return merged


def _problem(error: dict) -> Problem:
    kind = error["type"]
    field = _path(error["loc"])
    message = error["msg"]
    if kind == "extra_forbidden":
        parent = _model_for(error["loc"][:-1])
        allowed = ", ".join(parent.model_fields) if parent else "see config/dev.yaml"
        return Problem(field, "unknown setting", f"remove it or fix its spelling; allowed here: {allowed}")
    if kind == "missing":
        return Problem(field, "required setting is missing", "add it (see config/dev.yaml for an example)")
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return Problem(field, message, "set compute.mode to 'auto' (EKS Auto Mode) or 'karpenter'")
    if kind == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        return Problem(field, f"{error.get('input')!r} has the wrong form", f"use a value matching {pattern}")
    return Problem(field, message, "correct the value as the message says")


def _model_for(loc: tuple) -> type[BaseModel] | None:
    """The pydantic model class at a location, to list its allowed fields."""
    model: Any = EnvironmentConfig
    for part in loc:
        if isinstance(part, int) or model is None or (not _is_field(part) and part not in ("auto", "karpenter")):
            continue
        if part in ("auto", "karpenter"):
            from warmstart.config import AutoModeCompute, KarpenterCompute

            model = AutoModeCompute if part == "auto" else KarpenterCompute
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _inner_model(field.annotation)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None
