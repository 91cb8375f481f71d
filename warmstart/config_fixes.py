"""Where a pydantic refusal points in the config (the field's path, the model that holds it) and the fixes offered
for it: the value a field would take, an unknown setting's nearest known name, vLLM's own spelling of a value."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from warmstart import model_fixes
from warmstart.checks.fix import UNSET, Edit, Fix, join, removing, setting, together
from warmstart.config.compute import COMPUTE_MODES
from warmstart.config.environment import EnvironmentConfig
from warmstart.vllm_release import image_version, release

MODES: dict[str, type[BaseModel]] = dict(COMPUTE_MODES)


# Union branch names pydantic puts into error locations; they are not fields.
_BRANCH_TAGS = {*COMPUTE_MODES, "int", "str", "float", "bool", "literal['auto']"}


_TYPE_TAG = re.compile(r"^(constrained-|lax-|strict-)?(int|str|float|bool|bytes|date|datetime|decimal|none)$")


def is_branch(part: Any) -> bool:
    """A union branch pydantic names in an error location (int, constrained-int, literal['auto'], ...)."""
    return isinstance(part, str) and (part in _BRANCH_TAGS or bool(_TYPE_TAG.match(part)) or "[" in part or "(" in part)


def is_field(part: Any) -> bool:
    """A name the config's paths write bare (ASCII, as the fix paths parse it); any other key goes in quotes."""
    return isinstance(part, str) and bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part)) and part not in _BRANCH_TAGS


def field_path(loc: tuple) -> str:
    """models[0].name, tags["cost center"] (a mapping's key), tags["aws:x"] (key) for an error in the key."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":
            text += " (key)"
        elif is_branch(part):
            continue
        elif is_field(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part, ensure_ascii=False)}]"
    return text or "<root>"


def vllm_spelling(loc: tuple, given: Any, literal: str | None, settings: dict) -> tuple[str, list[str]] | None:
    """For a `models[i].vllm_env.NAME` value YAML did not read as text: (the model's vLLM release, the values it reads
    as meant), from the raw settings (the config is not valid yet); None elsewhere or for a release without facts."""
    path = settings_path(loc)
    if len(path) != 4 or path[0] != "models" or path[2] != "vllm_env" or not isinstance(path[1], int):
        return None
    model = _node(settings, path[:2])
    if not isinstance(model, dict):
        return None
    version = model.get("vllm_version")
    version = version if isinstance(version, str) else image_version(str(model.get("image", "")))
    known = release(version) if version else None
    if known is None:
        return None
    return known.version, known.spell(str(path[3]), given, literal)


def settings_path(loc: tuple) -> list[str | int]:
    """An error location without pydantic's union branch names: the path into the file's settings."""
    return [part for part in loc if not is_branch(part) and part != "[key]"]


def _has_default(loc: tuple) -> bool:
    parent, _ = model_for(loc[:-1])
    field = parent.model_fields.get(loc[-1]) if parent and isinstance(loc[-1], str) else None
    return field is not None and not field.is_required()


def fixes_for(field: str, detail: dict, settings: dict, literal: str | None = None) -> tuple[Fix, ...]:
    """The fix, as data, of one of the model's own refusals (warmstart/model_fixes.py)."""
    kind, ctx, given = detail["type"], detail.get("ctx", {}), detail.get("input")
    loc = tuple(part for part in detail["loc"] if not is_branch(part))
    path = settings_path(detail["loc"])
    if "[key]" in detail["loc"]:
        entries = _node(settings, path[:-1])
        return model_fixes.key_fixes(field, given, ctx.get("pattern"), entries)
    default = _has_default(loc) if loc else False
    if kind == "value_error":
        return model_fixes.refused_fixes(ctx.get("error"), field)
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return model_fixes.mode_fixes(settings.get("compute"), MODES)
    if kind == "string_pattern_mismatch":
        found = model_fixes.pattern_fixes(field, given, ctx.get("pattern", ""))
        if found:
            return found
    if kind == "literal_error":
        value = model_fixes.literal_choice(given if literal is None else literal, str(ctx.get("expected", "")))
        if value is not UNSET:
            return (setting(field, value),)
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal") and not default:
        value = model_fixes.range_value(kind, next(iter(ctx.values())), given)
        if value is not UNSET:
            return (setting(field, value),)
    if kind == "too_long" and isinstance(given, (list, dict)):
        limit = ctx.get("max_length")
        kept = given[:limit] if isinstance(given, list) else dict(list(given.items())[:limit])
        return (setting(field, kept),)
    if kind == "string_too_long" and isinstance(given, str):
        return (setting(field, given[: ctx.get("max_length")]),)
    if kind == "string_type" and (spelled := vllm_spelling(detail["loc"], given, literal, settings)):
        return (*(setting(field, value) for value in spelled[1]), removing(field))
    if kind == "string_type" and given is not None and not isinstance(given, (dict, list)):
        return (setting(field, literal if literal is not None else quoted(given)[1:-1]),)
    if kind == "list_type" and isinstance(given, str):
        return (setting(field, model_fixes.list_of(given, path)),)
    if kind == "extra_forbidden":
        return _unknown_setting_fixes(field, detail["loc"], settings)
    return model_fixes.fallback(field, path, default)


def _node(settings: Any, path: Sequence[str | int]) -> Any:
    """What the file's settings hold at a path (None where nothing)."""
    node: Any = settings
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
    return node


def _unknown_setting_fixes(field: str, loc: tuple, settings: dict) -> tuple[Fix, ...]:
    """The setting under the name it was likely meant to have (where that one is not given too), else removed."""
    key = loc[-1]
    parent, mode = model_for(loc[:-1])
    if mode is None and parent is not None:
        node = _node(settings, settings_path(loc[:-1]))
        where = field_path(loc[:-1]) if loc[:-1] else ""
        # A path written as one key (`image_preload.mode: off`): the value moves where the path points, if free.
        nested = str(key).split(".")
        if len(nested) > 1 and nested[0] in parent.model_fields and all(is_field(p) for p in nested):
            inner = _node(node, nested) if isinstance(node, dict) else None
            holder = _node(node, nested[:-1]) if isinstance(node, dict) else None
            if inner is None and (holder is None or isinstance(holder, dict)):
                return (together(Edit(field), Edit(join(where, ".".join(nested)), node[key])),)
        close = difflib.get_close_matches(str(key), list(parent.model_fields), n=1, cutoff=0.6)
        if close and isinstance(node, dict) and close[0] not in node:
            return (together(Edit(field), Edit(join(where, close[0]), node[key])),)
    return (removing(field),)


def quoted(value: Any) -> str:
    text = {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else value
    return f'"{text}"'


def model_for(loc: tuple) -> tuple[type[BaseModel] | None, str | None]:
    """The pydantic model class at a location (to list its fields), and the compute mode on the way there."""
    model: Any = EnvironmentConfig
    mode = None
    for part in loc:
        if part in MODES:
            model, mode = MODES[part], part
            continue
        if isinstance(part, int) or model is None or not is_field(part):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None, mode
        model = _inner_model(field.annotation)
    return (model if isinstance(model, type) and issubclass(model, BaseModel) else None), mode


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _inner_model(arg)
        if found is not None:
            return found
    return None
