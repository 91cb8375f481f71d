"""pydantic's refusals of a config put in words: the field's path, the value as written, the rule, and a fix
(`config_fixes.py`)."""

from __future__ import annotations

import datetime
import difflib
import re
import unicodedata
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from warmstart import model_fixes
from warmstart.checks.fix import Edit, Fix
from warmstart.config.base import DNS_LABEL, DURATION, LABEL_KEY, LABEL_VALUE, S3_BUCKET_NAME
from warmstart.config.compute import COMPUTE_MODES
from warmstart.config_file import EXAMPLE, Literals
from warmstart.config_fixes import (
    MODES,
    field_path,
    fixes_for,
    is_branch,
    model_for,
    quoted,
    settings_path,
    vllm_spelling,
)
from warmstart.node_os import AMI_ALIAS_PATTERN, KARPENTER_NODE_OSES
from warmstart.problem import Problem, Refused
from warmstart.vllm_release import VERSION_PATTERN as VLLM_VERSION_PATTERN

# Why a list or mapping has the limit it has, where the reason is another system's.
LIMIT_REASONS = {
    "tags": " (EC2 allows 50 tags per resource; Karpenter adds 6 of its own to every GPU node: kubernetes.io/cluster/"
    "<cluster>, karpenter.sh/nodepool, karpenter.sh/nodeclaim, karpenter.k8s.aws/ec2nodeclass, eks:eks-cluster-name "
    "and Name, and Auto Mode its own eks: tags; warmstart keeps the rest for yours, with room to spare)",
}

# Each pattern of the config model, in words (tests/unit/test_config_messages.py checks that none is missing).
PATTERN_WORDS = {
    LABEL_KEY: "a Kubernetes label key: an optional DNS subdomain and '/', then 1-63 letters, digits, '-', '_' and "
    "'.', starting and ending with a letter or digit",
    LABEL_VALUE: "a Kubernetes label value: empty, or 1-63 letters, digits, '-', '_' and '.', starting and ending "
    "with a letter or digit",
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


def problems_of(error: ValidationError, settings: dict, literals: Literals) -> list[Problem]:
    """One problem per error, with its fix as data; the branches of a union (a number or 'auto') fail together and
    make one."""
    by_field: dict[str, list[Any]] = {}
    for detail in error.errors():
        by_field.setdefault(field_path(detail["loc"]), []).append(detail)
    problems = []
    for field, details in by_field.items():
        union = len(details) > 1 and any(is_branch(part) for d in details for part in d["loc"])
        if union:
            forms = " or ".join(_expected(d) for d in details)
            problem = Problem(field, f"{_echo(details[0].get('input'))} is not {forms}", f"write {forms}")
            literal = _literal(details[0], literals)
            problems.append(
                replace(problem, fixes=fixes_for(field, details[0], settings, literal), rule="config:union")
            )
        else:
            problems += [
                replace(problem, fixes=problem.fixes or fixes_for(field, d, settings, literal), rule=_origin(d))
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
    return literals.get(tuple(settings_path(detail["loc"])))


def _origin(detail: dict) -> str:
    error = detail.get("ctx", {}).get("error")
    return f"config:{error.origin}" if isinstance(error, Refused) else f"config:{detail['type']}"


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


def kind_of(value: Any) -> str:
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
        found = "nothing" if error.get("input") is None else f"a {kind_of(error.get('input'))} ({value})"
        return Problem(
            field, f"expected a mapping of settings, found {found}", "write it as 'key: value' lines under it"
        )
    if kind == "list_type":
        found = "nothing" if error.get("input") is None else f"a {kind_of(error.get('input'))} ({value})"
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
        spelled = vllm_spelling(loc, error.get("input"), literal, settings)
        if spelled is not None:
            version, values = spelled
            spellings = " or ".join(map(quoted, values))
            how = f"write it in quotes as vLLM {version} reads it: {spellings}, or " if values else ""
            empty = error.get("input") is None
            what = "is empty (YAML read nothing there)" if empty else f"{value} is not text{read}"
            return Problem(field, what, f"{how}remove it (vLLM's default applies)")
        return Problem(
            field,
            f"{value} is not text{read}",
            f"write it in quotes: {quoted(literal if literal is not None else error.get('input'))}",
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
        return f" (YAML 1.1 read the unquoted {literal} as the {kind_of(value)} {shown})"
    return f" (YAML read it as {kind_of(value)})"


def _unknown_setting(field: str, loc: tuple) -> Problem:
    key = loc[-1]
    parent, mode = model_for(loc[:-1])
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
