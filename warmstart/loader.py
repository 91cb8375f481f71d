"""Load an environment file into a validated EnvironmentConfig, or fail with every problem listed.

Every way a file can be wrong ends here as Problems (field path, what is wrong with the value echoed, the rule
in words, a fix that works or none): unreadable files, YAML syntax (file and line), keys written twice, the
model's own rules (pydantic) and the rules across fields (checks.py). `plan` and the CDK app both load through
`load_config`, so they refuse the same inputs with the same words.
"""

from __future__ import annotations

import datetime
import difflib
import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from warmstart import model_fixes
from warmstart.catalog import Catalog, default_catalog
from warmstart.checks.environment import check_environment
from warmstart.checks.fix import UNSET, Edit, Fix, Refused, join, removing, setting, together
from warmstart.checks.problem import Problem
from warmstart.config import COMPUTE_MODES, DNS_LABEL, DURATION, S3_BUCKET_NAME, EnvironmentConfig
from warmstart.node_os import AMI_ALIAS_PATTERN, KARPENTER_NODE_OSES
from warmstart.vllm_release import VERSION_PATTERN as VLLM_VERSION_PATTERN
from warmstart.vllm_release import image_version, release

EXAMPLE = "config/dev.yaml"
MODES: dict[str, type[BaseModel]] = dict(COMPUTE_MODES)

# Why a list or mapping has the limit it has, where the reason is another system's.
LIMIT_REASONS = {
    "tags": " (EC2 allows 50 tags per resource; Karpenter adds 6 of its own to every GPU node: kubernetes.io/cluster/"
    "<cluster>, karpenter.sh/nodepool, karpenter.sh/nodeclaim, karpenter.k8s.aws/ec2nodeclass, eks:eks-cluster-name "
    "and Name, and Auto Mode its own eks: tags; warmstart keeps the rest for yours, with room to spare)",
}

# Each pattern of the config model, in words (tests/unit/test_config_messages.py checks that none is missing).
PATTERN_WORDS = {
    DNS_LABEL: "lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters",
    DURATION: "a duration such as 30s, 10m, 1h or 1h30m",
    S3_BUCKET_NAME: "an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-', starting and ending with a "
    "letter or digit",
    r"^(([0-9]+(s|m|h))+|Never)$": "a duration such as 336h or 1h30m, or Never",
    AMI_ALIAS_PATTERN: "a pinned EKS AMI alias: "
    + " or ".join(os.alias_example for os in KARPENTER_NODE_OSES.values()),
    r"^(rate\(.+\)|cron\(.+\))$": "an EventBridge Scheduler expression: rate(1 day) or cron(...)",
    r"^/": "an absolute path (starting with /)",
    r"^[0-9]{12}$": "a 12-digit AWS account ID",
    r"^\d{12}$": "a 12-digit AWS account ID",
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$": "a revision: letters, digits, '.', '_' and '-', starting with a letter "
    "or digit, at most 64 characters",
    r"^[^@\s]+@[^@\s]+\.[^@\s]+$": "an email address",
    r"^[a-z0-9_]+$": "lowercase letters, digits and '_'",
    r"^[a-zA-Z][-a-zA-Z0-9]{0,99}$": "letters, digits and '-', starting with a letter, at most 100 characters",
    r"^[a-z][a-z0-9-]*\.[a-z0-9]+$": "an EC2 instance type such as m7i.2xlarge",
    r"^[a-z]{2}(-[a-z]+)+-\d$": "an AWS Region such as us-east-1",
    r"^\d+\.\d+(\.\d+)?([+a-z0-9.]*)$": "a PyTorch version such as 2.11.0 or 2.11.0+cu128",
    r"^\d+\.\d+\.\d+$": "a version such as 1.14.1",
    VLLM_VERSION_PATTERN: "a vLLM release such as 0.34.0",
    r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]{36}$": "a KMS key ARN (arn:aws:kms:<region>:<account>:"
    "key/<key id>)",
    r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$": "an SNS topic ARN (arn:aws:sns:<region>:"
    "<account>:<name>)",
    r"^cr-[0-9a-z]+$": "a capacity reservation ID (cr-...)",
    r"^vpc-[0-9a-f]{8,17}$": "a VPC ID (vpc- and 8 or 17 hexadecimal digits)",
    r"^subnet-[0-9a-f]{8,17}$": "a subnet ID (subnet- and 8 or 17 hexadecimal digits)",
    r"^rtb-[0-9a-f]{8,17}$": "a route table ID (rtb- and 8 or 17 hexadecimal digits)",
    r"^sg-[0-9a-f]{8,17}$": "a security group ID (sg- and 8 or 17 hexadecimal digits)",
    r"^[\w+=,.@-]{1,64}$": "an IAM role name: 1-64 letters, digits and + = , . @ _ -",
    r"^[\w .:/=+\-@]*$": "an AWS tag: letters, digits, spaces and _ . : / = + - @",
    r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]/(.+/)?$": "s3://<bucket>/<prefix>/, ending with '/'",
    r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$": "a GitHub repository as owner/name",
    r"^[A-Za-z0-9._/-]{1,255}$": "a branch name: letters, digits, '.', '_', '/' and '-'",
    r"^[a-z0-9]{1,10}$": "a CDK bootstrap qualifier: 1-10 lowercase letters and digits",
}


class ConfigError(ValueError):
    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        listing = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s) in the configuration\n{listing}")


def load_config(path: str | Path, catalog: Catalog | None = None) -> EnvironmentConfig:
    path = Path(path)
    document, literals = read_yaml_literals(path)
    return parse_config(document, source=str(path), catalog=catalog, literals=literals)


def read_yaml(path: Path) -> Any:
    """The file's YAML document; any way the file cannot be read is a ConfigError naming the file."""
    return read_yaml_literals(path)[0]


# A settings path (keys and list indexes) and the text a plain scalar there was written as.
Literals = dict[tuple[str | int, ...], str]


def read_yaml_literals(path: Path) -> tuple[Any, Literals]:
    """The file's YAML document and, for each plain scalar YAML 1.1 read as something other than text (a number, a
    boolean, a date, nothing), the text as written: 012345678901 and 1.30 are what a refusal echoes and quotes, not
    the octal number or 1.3 YAML made of them."""

    def refuse(message: str, fix: str) -> ConfigError:
        return ConfigError(str(path), [Problem("<file>", message, fix)])

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise refuse("no such file", f"pass an existing environment file, e.g. {EXAMPLE}") from None
    except IsADirectoryError:
        raise refuse("is a directory, not a file", f"pass the environment's YAML file, e.g. {path}/dev.yaml") from None
    except PermissionError:
        raise refuse("cannot be read (permission denied)", "make it readable by this user") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise refuse(f"is not UTF-8 text (byte {error.start}, line {line})", "save it as UTF-8") from None
    try:
        loader = _loader(str(path))
        return yaml.load(text, Loader=loader), scalar_literals(yaml.compose(text, Loader=loader))  # noqa: S506
    except _DuplicateKey as duplicate:
        raise ConfigError(str(path), [duplicate.problem]) from None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        what = " ".join(part for part in (error.context, error.problem) if part)
        tabs = " (indent with spaces: YAML does not allow tabs)" if "\\t" in what or "\t" in what else ""
        raise refuse(f"not valid YAML at {where}: {what}{tabs}", "fix the YAML syntax at that line") from None
    except yaml.YAMLError as error:
        raise refuse(f"not valid YAML: {error}", "fix the YAML syntax") from None


STRING_TAG = "tag:yaml.org,2002:str"


def scalar_literals(node: Any, path: tuple[str | int, ...] = ()) -> Literals:
    """Each plain scalar under `node` that YAML resolved to a non-string, by its settings path (a merge's keys count
    where they are merged)."""
    found: Literals = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            sources = [value_node] if key_node.tag != MERGE_TAG else []
            if key_node.tag == MERGE_TAG:
                merged = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                found |= {k: v for source in merged for k, v in scalar_literals(source, path).items() if k not in found}
            elif isinstance(key_node, yaml.ScalarNode):
                for source in sources:
                    found |= scalar_literals(source, (*path, key_node.value))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found |= scalar_literals(item, (*path, index))
    elif isinstance(node, yaml.ScalarNode) and node.style is None and node.tag != STRING_TAG:
        found[path] = node.value
    return found


class _DuplicateKey(Exception):
    def __init__(self, problem: Problem) -> None:
        self.problem = problem


MERGE_TAG = "tag:yaml.org,2002:merge"
ANCHOR_PREFIX = "x-"


def _loader(name: str) -> type[yaml.SafeLoader]:
    """A SafeLoader that refuses a key written twice in one mapping (YAML would silently keep the last), counting
    the keys a merge (`<<: *anchor`, or a list of anchors) brings in: a key written beside a merge that also brings
    it, or brought by two merges, is refused too, since only one of the values would be kept."""

    def duplicate(key: Any, first: str, second: str) -> _DuplicateKey:
        return _DuplicateKey(
            Problem(
                str(key),
                f"given twice in one mapping ({name}: {first} and {second}); YAML would silently keep only one value",
                "keep one of them (to vary a shared block, leave the key out of the anchor and write it in each "
                "mapping)",
            )
        )

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
            seen: dict[Any, str] = {}
            merges = []
            for key_node, value_node in node.value:
                if key_node.tag == MERGE_TAG:
                    merges.append((key_node, value_node))
                    continue
                key = self.construct_object(key_node, deep=True)
                where = f"line {key_node.start_mark.line + 1}"
                if key in seen:
                    raise duplicate(key, seen[key], where)
                seen[key] = where
            for key_node, value_node in merges:
                where = f"the merge on line {key_node.start_mark.line + 1}"
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    if not isinstance(source, yaml.MappingNode):
                        continue  # flatten_mapping refuses it with YAML's own message
                    self.flatten_mapping(source)  # the anchor's own merges first
                    for merged_key_node, _ in source.value:
                        key = self.construct_object(merged_key_node, deep=True)
                        if key in seen:
                            raise duplicate(key, seen[key], where)
                        seen[key] = where
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def parse_config(
    raw: Any, *, source: str = "<config>", catalog: Catalog | None = None, literals: Literals | None = None
) -> EnvironmentConfig:
    if raw is None:
        raise ConfigError(source, [Problem("<root>", "the file is empty", f"start from {EXAMPLE}")])
    if not isinstance(raw, dict):
        raise ConfigError(
            source,
            [
                Problem(
                    "<root>",
                    f"expected a mapping of settings, found a {_kind(raw)}",
                    f"write settings as 'key: value' lines, as {EXAMPLE} does",
                )
            ],
        )
    # Top-level `x-` keys hold YAML anchors for the settings to merge in (`<<: *name`), as Compose files do; they
    # are not settings.
    settings = {
        key: value for key, value in raw.items() if not (isinstance(key, str) and key.startswith(ANCHOR_PREFIX))
    }
    try:
        config = EnvironmentConfig.model_validate(settings)
    except ValidationError as error:
        raise ConfigError(source, _problems(error, settings, literals or {})) from None
    problems = check_environment(config, catalog or default_catalog())
    if problems:
        raise ConfigError(source, problems)
    return config


# Union branch names pydantic puts into error locations; they are not fields.
_BRANCH_TAGS = {*COMPUTE_MODES, "int", "str", "float", "bool", "literal['auto']"}


_TYPE_TAG = re.compile(r"^(constrained-|lax-|strict-)?(int|str|float|bool|bytes|date|datetime|decimal|none)$")


def _is_branch(part: Any) -> bool:
    """A union branch pydantic names in an error location (int, constrained-int, literal['auto'], ...)."""
    return isinstance(part, str) and (part in _BRANCH_TAGS or bool(_TYPE_TAG.match(part)) or "[" in part or "(" in part)


def _is_field(part: Any) -> bool:
    """A name the config's paths write bare (ASCII, as the fix paths parse it); any other key goes in quotes."""
    return isinstance(part, str) and bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", part)) and part not in _BRANCH_TAGS


def _path(loc: tuple) -> str:
    """models[0].name, tags["cost center"] (a mapping's key), tags["aws:x"] (key) for an error in the key."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part == "[key]":
            text += " (key)"
        elif _is_branch(part):
            continue
        elif _is_field(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part, ensure_ascii=False)}]"
    return text or "<root>"


def _problems(error: ValidationError, settings: dict, literals: Literals) -> list[Problem]:
    """One problem per error, with its fix as data; the branches of a union (a number or 'auto') fail together and
    make one."""
    by_field: dict[str, list[Any]] = {}
    for detail in error.errors():
        by_field.setdefault(_path(detail["loc"]), []).append(detail)
    problems = []
    for field, details in by_field.items():
        union = len(details) > 1 and any(_is_branch(part) for d in details for part in d["loc"])
        if union:
            forms = " or ".join(_expected(d) for d in details)
            problem = Problem(field, f"{_echo(details[0].get('input'))} is not {forms}", f"write {forms}")
            literal = _literal(details[0], literals)
            problems.append(replace(problem, fixes=_fixes(field, details[0], settings, literal), rule="config:union"))
        else:
            problems += [
                replace(problem, fixes=problem.fixes or _fixes(field, d, settings, literal), rule=_origin(d))
                for d in details
                for literal in [_literal(d, literals)]
                for problem in [_problem(field, d, settings, literal)]
            ]
    return problems


def _literal(detail: dict, literals: Literals) -> str | None:
    """The text a refused value was written as, where YAML read it as something else (a number, a boolean)."""
    given = detail.get("input")
    if given is None or isinstance(given, (str, dict, list)):
        return None
    return literals.get(tuple(_settings_path(detail["loc"])))


def _vllm_spelling(loc: tuple, given: Any, literal: str | None, settings: dict) -> tuple[str, list[str]] | None:
    """For a `models[i].vllm_env.NAME` value YAML did not read as text: (the model's vLLM release, the values it reads
    as meant), from the raw settings (the config is not valid yet); None elsewhere or for a release without facts."""
    path = _settings_path(loc)
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


def _origin(detail: dict) -> str:
    error = detail.get("ctx", {}).get("error")
    return f"config:{error.origin}" if isinstance(error, Refused) else f"config:{detail['type']}"


def _settings_path(loc: tuple) -> list[str | int]:
    """An error location without pydantic's union branch names: the path into the file's settings."""
    return [part for part in loc if not _is_branch(part) and part != "[key]"]


def _has_default(loc: tuple) -> bool:
    parent, _ = _model_for(loc[:-1])
    field = parent.model_fields.get(loc[-1]) if parent and isinstance(loc[-1], str) else None
    return field is not None and not field.is_required()


def _fixes(field: str, detail: dict, settings: dict, literal: str | None = None) -> tuple[Fix, ...]:
    """The fix, as data, of one of the model's own refusals (warmstart/model_fixes.py)."""
    kind, ctx, given = detail["type"], detail.get("ctx", {}), detail.get("input")
    loc = tuple(part for part in detail["loc"] if not _is_branch(part))
    path = _settings_path(detail["loc"])
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
    if kind == "string_type" and (spelled := _vllm_spelling(detail["loc"], given, literal, settings)):
        return (*(setting(field, value) for value in spelled[1]), removing(field))
    if kind == "string_type" and given is not None and not isinstance(given, (dict, list)):
        return (setting(field, literal if literal is not None else _quoted(given)[1:-1]),)
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
    parent, mode = _model_for(loc[:-1])
    if mode is None and parent is not None:
        node = _node(settings, _settings_path(loc[:-1]))
        where = _path(loc[:-1]) if loc[:-1] else ""
        # A path written as one key (`image_preload.mode: off`): the value moves where the path points, if free.
        nested = str(key).split(".")
        if len(nested) > 1 and nested[0] in parent.model_fields and all(_is_field(p) for p in nested):
            inner = _node(node, nested) if isinstance(node, dict) else None
            holder = _node(node, nested[:-1]) if isinstance(node, dict) else None
            if inner is None and (holder is None or isinstance(holder, dict)):
                return (together(Edit(field), Edit(join(where, ".".join(nested)), node[key])),)
        close = difflib.get_close_matches(str(key), list(parent.model_fields), n=1, cutoff=0.6)
        if close and isinstance(node, dict) and close[0] not in node:
            return (together(Edit(field), Edit(join(where, close[0]), node[key])),)
    return (removing(field),)


def _expected(detail: dict) -> str:
    kind, ctx = detail["type"], detail.get("ctx", {})
    if kind == "literal_error":
        expected = str(ctx.get("expected"))
        return f"one of {expected}" if " or " in expected or "," in expected else expected
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "a whole number"
    if kind in ("greater_than", "greater_than_equal"):
        return f"a number {'above' if kind == 'greater_than' else 'at least'} {ctx.get('gt', ctx.get('ge'))}"
    if kind in ("bool_parsing", "bool_type"):
        return "true or false"
    if kind in ("float_parsing", "float_type"):
        return "a number"
    return detail["msg"].removeprefix("Input should be ").lower()


def _echo(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    text = value.isoformat() if isinstance(value, datetime.date) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _kind(value: Any) -> str:
    names = {
        list: "list",
        str: "string",
        int: "number",
        float: "number",
        bool: "true/false",
        type(None): "nothing",
        dict: "mapping",
        datetime.date: "date",
        datetime.datetime: "date and time",
    }
    return names.get(type(value), type(value).__name__)


def _problem(field: str, error: dict, settings: dict, literal: str | None = None) -> Problem:
    kind, ctx, loc = error["type"], error.get("ctx", {}), error["loc"]
    value = literal if literal is not None else _echo(error.get("input"))
    if kind == "extra_forbidden":
        return _unknown_setting(field, loc)
    if kind == "missing":
        return Problem(field, "required setting is missing", f"add it (see {EXAMPLE} for an example)")
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        fitting = model_fixes.mode_fixes(settings.get("compute"), MODES)
        modes = [fix.edits[0].value for fix in fitting] or list(COMPUTE_MODES)
        return Problem(
            field,
            f"compute.mode is {_echo(ctx.get('tag'))}, not one of {' or '.join(map(repr, COMPUTE_MODES))}",
            "set compute.mode to "
            + " or ".join(f"{mode!r} ({COMPUTE_MODES[mode].title})" for mode in modes)
            + ("" if fitting else " (then also the settings that mode takes: they differ from those given)"),
            fitting or tuple(Fix((Edit("compute.mode", mode),), then_also=("compute",)) for mode in modes),
        )
    if kind == "string_pattern_mismatch":
        pattern = ctx.get("pattern", "")
        words = PATTERN_WORDS.get(pattern)
        rule = words or f"of the form {pattern}"
        return Problem(field, f"{value} is not {rule}{_why_not(error.get('input'), pattern)}", f"write {rule}")
    if kind == "literal_error":
        read = _yaml_read_as(error.get("input"), literal)
        if read and isinstance(error.get("input"), bool):
            read = " (YAML read off/on/no/yes as false/true)"
        return Problem(
            field,
            f"{value} is not {_expected(error)}{read}",
            f"use {_expected(error)}" + (", in quotes" if read else ""),
        )
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = next(iter(ctx.values()))
        relation = {
            "greater_than": "above",
            "greater_than_equal": "at least",
            "less_than": "below",
            "less_than_equal": "at most",
        }[kind]
        return Problem(
            field, f"{value} is out of range: the value must be {relation} {bound}", f"use a value {relation} {bound}"
        )
    if kind in ("too_short", "too_long"):
        limit = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        words = "at least" if kind == "too_short" else "at most"
        given = error.get("input")
        count = ctx.get("actual_length") or (len(given) if isinstance(given, (list, dict, str)) else "too many")
        why = LIMIT_REASONS.get(field, "")
        return Problem(field, f"{count} item(s); {words} {limit} allowed{why}", f"give {words} {limit}")
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        found = "nothing" if error.get("input") is None else f"a {_kind(error.get('input'))} ({value})"
        return Problem(
            field, f"expected a mapping of settings, found {found}", "write it as 'key: value' lines under it"
        )
    if kind == "list_type":
        found = "nothing" if error.get("input") is None else f"a {_kind(error.get('input'))} ({value})"
        return Problem(field, f"expected a list, found {found}", "write it as a list ([a, b] or '- a' lines)")
    if kind == "value_error":
        text = str(ctx.get("error", error["msg"].removeprefix("Value error, ")))
        message, _, fix = text.partition("; fix: ")
        # Where a validator's refusal is written (its raise), else here.
        refused = ctx.get("error")
        site = refused.site if isinstance(refused, Refused) else ""
        if not isinstance(error.get("input"), dict):
            joint = " " if message.split(" ", 1)[0] in ("is", "has", "starts") else ": "
            message = f"{value}{joint}{message}"
        return Problem(field, message, fix, site=site)
    if kind == "string_too_short":
        return Problem(
            field,
            "is empty"
            if not error.get("input")
            else f"{value} is too short (at least {ctx.get('min_length')} characters)",
            "give a value",
        )
    if kind == "string_too_long":
        return Problem(
            field,
            f"{value} has {len(str(error.get('input')))} characters; at most {ctx.get('max_length')} allowed",
            f"shorten it to {ctx.get('max_length')} characters",
        )
    if kind == "string_type":
        read = _yaml_read_as(error.get("input"), literal)
        spelled = _vllm_spelling(loc, error.get("input"), literal, settings)
        if spelled is not None:
            version, values = spelled
            quoted = " or ".join(map(_quoted, values))
            how = f"write it in quotes as vLLM {version} reads it: {quoted}, or " if values else ""
            empty = error.get("input") is None
            what = "is empty (YAML read nothing there)" if empty else f"{value} is not text{read}"
            return Problem(field, what, f"{how}remove it (vLLM's default applies)")
        return Problem(
            field,
            f"{value} is not text{read}",
            f"write it in quotes: {_quoted(literal if literal is not None else error.get('input'))}",
        )
    return Problem(field, f"{value}: {_expected(error)} expected", f"write {_expected(error)}")


def _why_not(given: Any, pattern: str) -> str:
    """What in a refused text a reader would not see: a character outside ASCII (a look-alike letter, a
    non-breaking space), by position and code point; or capitals where only lowercase is allowed."""
    if not isinstance(given, str):
        return ""
    for position, character in enumerate(given, start=1):
        if not character.isascii() or not character.isprintable():
            name = unicodedata.name(character, "unnamed")
            return f" (character {position}, {character!r}, is U+{ord(character):04X} {name}, not ASCII)"
    if any(c.isupper() for c in given) and re.fullmatch(pattern, given.lower()):
        return " (capital letters: write it in lowercase)"
    return ""


def _yaml_read_as(value: Any, literal: str | None = None) -> str:
    """YAML 1.1 turns unquoted 1.35, off, 2025-04-29 and 123456789012 into a number, false, a date and a number; an
    unquoted 012345670123 into the octal number 1402433619 and 1.30 into 1.3."""
    if value is None or isinstance(value, (dict, list, str)):
        return ""
    shown = _echo(value)
    if literal is not None and literal != shown:
        return f" (YAML 1.1 read the unquoted {literal} as the {_kind(value)} {shown})"
    return f" (YAML read it as {_kind(value)})"


def _quoted(value: Any) -> str:
    text = {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else value
    return f'"{text}"'


def _unknown_setting(field: str, loc: tuple) -> Problem:
    key = loc[-1]
    parent, mode = _model_for(loc[:-1])
    allowed = list(parent.model_fields) if parent else []
    if mode is not None:
        others = [other for other, model in MODES.items() if other != mode and key in model.model_fields]
        if others and key not in MODES[mode].model_fields:
            return Problem(
                field,
                f"'{key}' is a setting of compute.mode {' or '.join(others)} only (this environment is {mode})",
                f"remove it (or move the environment to compute.mode: {others[0]}, whose settings differ)",
            )
    close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
    nested = str(key).split(".")
    if len(nested) > 1 and nested[0] in allowed:
        written = "".join(f"{part}: {{" for part in nested[:-1]) + f"{nested[-1]}: ..." + "}" * (len(nested) - 1)
        return Problem(field, f"unknown setting '{key}'", f"a path is written nested: {written}")
    hint = f"did you mean '{close[0]}'? " if close else ""
    listing = ", ".join(allowed) if allowed else f"see {EXAMPLE}"
    return Problem(field, f"unknown setting '{key}'", f"{hint}settings allowed here: {listing}")


def _model_for(loc: tuple) -> tuple[type[BaseModel] | None, str | None]:
    """The pydantic model class at a location (to list its fields), and the compute mode on the way there."""
    model: Any = EnvironmentConfig
    mode = None
    for part in loc:
        if part in MODES:
            model, mode = MODES[part], part
            continue
        if isinstance(part, int) or model is None or not _is_field(part):
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
