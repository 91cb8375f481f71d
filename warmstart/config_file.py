"""Reading a config file's YAML: each scalar as written (for messages that echo it), keys written twice refused,
merge keys only from `x-` anchors; and the error that lists a file's problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from warmstart.problem import Problem

EXAMPLE = "config/dev.yaml"


class ConfigError(ValueError):
    def __init__(self, source: str, problems: list[Problem]):
        self.source = source
        self.problems = problems
        listing = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s) in the configuration\n{listing}")


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
