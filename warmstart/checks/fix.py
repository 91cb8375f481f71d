"""A refusal's fix as data: the settings to change (by the path the refusal names) and their new values, so that a
program (a test, a bot, an editor) can apply it to the file's settings and validate again.

A Problem offers alternatives (a tuple of Fix); each works on its own. A Fix whose edits only work together holds
them all. A fix that leaves another refusal to settle says so in its words ("then also ...") and names that field
in `then_also`.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Any


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


# The value of an edit that removes the setting: its default applies (or, for a list item, the item goes).
UNSET: Any = _Unset()


@dataclass(frozen=True)
class Ask:
    """A value only the user (or their AWS account) knows: what it is, and an example of its form, which a
    program applying the fix uses unless it is given the real one."""

    what: str
    example: Any = field(hash=False, compare=False)

    def __str__(self) -> str:
        return f"<{self.what}>"


@dataclass(frozen=True)
class Edit:
    path: str  # as a Problem's field is written: models[0].autoscaling.max_replicas, tags["cost center"]
    value: Any = field(default=UNSET, hash=False, compare=False)

    def __str__(self) -> str:
        if self.value is UNSET:
            return f"remove {self.path}"
        return f"{self.path}: {self.value if isinstance(self.value, Ask) else json.dumps(self.value, default=str)}"


@dataclass(frozen=True)
class Fix:
    edits: tuple[Edit, ...]
    then_also: tuple[str, ...] = ()  # fields the fix leaves refused, as its words say

    def __str__(self) -> str:
        return ", ".join(map(str, self.edits))

    def under(self, prefix: str) -> Fix:
        """The fix with its paths (relative to a validator's field, or from the top with a leading "/") made
        absolute."""
        return Fix(
            tuple(Edit(e.path[1:] if e.path.startswith("/") else join(prefix, e.path), e.value) for e in self.edits),
            self.then_also,
        )


def fix_record(fix: Fix) -> dict:
    """A fix as JSON: each edit's path and value (`remove: true` instead where the setting goes; `ask` where only
    the user knows the value, with an example of its form), and the fields it leaves refused."""

    def value(item: Any) -> Any:
        if isinstance(item, Ask):
            return {"ask": item.what, "example": item.example}
        if isinstance(item, dict):
            return {key: value(inner) for key, inner in item.items()}
        if isinstance(item, list):
            return [value(inner) for inner in item]
        return item

    edits = [
        {"path": e.path, "remove": True} if e.value is UNSET else {"path": e.path, "value": value(e.value)}
        for e in fix.edits
    ]
    return {"edits": edits, "then_also": list(fix.then_also)}


def setting(path: str, value: Any) -> Fix:
    return Fix((Edit(path, value),))


def removing(*paths: str) -> Fix:
    return Fix(tuple(Edit(path) for path in paths))


def together(*edits: Edit, then_also: tuple[str, ...] = ()) -> Fix:
    return Fix(tuple(edits), then_also)


def join(prefix: str, path: str) -> str:
    if not path:
        return prefix
    if not prefix or prefix == "<root>":
        return path
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


_PART = re.compile(r'\.?([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def parts(path: str) -> list[str | int]:
    """models[0].vllm_env.VLLM_X -> ['models', 0, 'vllm_env', 'VLLM_X']; tags["a b"] (key) -> ['tags', 'a b']."""
    text, found, at = path.removesuffix(" (key)"), [], 0
    while at < len(text):
        match = _PART.match(text, at)
        if match is None:
            raise ValueError(f"not a settings path: {path!r}")
        name, index, quoted = match.groups()
        found.append(name if name is not None else int(index) if index is not None else json.loads(quoted))
        at = match.end()
    return found


def call_site(depth: int) -> str:
    """file:line of the call `depth` frames above the caller: where a refusal is written in the source."""
    frame = sys._getframe(depth + 1)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class FixError(ValueError):
    """A fix that cannot be applied to the document (a path through something that is not a mapping or list)."""


def apply_fix(document: dict, fix: Fix, answers: dict[str, Any] | None = None, *, use_examples: bool = False) -> dict:
    """A copy of the file's settings with the fix's edits made (mappings on the way are created, and an index one
    past a list's end adds an item). A value to ask for is the answer given for its full path (a nested one too:
    `network.existing.vpc_id`); unanswered, it is refused (FixError) unless `use_examples` (tests) takes its
    example, which only has the value's form."""
    fixed = copy.deepcopy(document)
    sets = [e for e in fix.edits if e.value is not UNSET]
    # Removals last, the later list items first, so that removing one item does not move another's index.
    removals = sorted((e for e in fix.edits if e.value is UNSET), key=lambda e: _order(parts(e.path)), reverse=True)
    for edit in sets + removals:
        filled = Edit(edit.path, _filled(edit.value, answers or {}, edit.path, use_examples))
        _apply(fixed, parts(edit.path), filled)
    return fixed


def _filled(value: Any, answers: dict[str, Any], path: str, use_examples: bool) -> Any:
    """The value with each Ask in it (at any depth) replaced by the answer for its path."""
    if isinstance(value, Ask):
        if path in answers:
            return answers[path]
        if use_examples:
            return value.example
        raise FixError(f"{path}: {value.what} is needed (an example of its form: {value.example})")
    if isinstance(value, dict):
        return {key: _filled(item, answers, join(path, str(key)), use_examples) for key, item in value.items()}
    if isinstance(value, list):
        return [_filled(item, answers, f"{path}[{index}]", use_examples) for index, item in enumerate(value)]
    return value


def _order(path: list[str | int]) -> tuple:
    return tuple((0, part, "") if isinstance(part, int) else (1, 0, part) for part in path)


def _apply(node: Any, path: list[str | int], edit: Edit) -> None:
    *parents, last = path
    for part in parents:
        if isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str):
            if node.get(part) is None:  # absent or empty: the mapping is made (a removal has nothing to do)
                if edit.value is UNSET:
                    return
                node[part] = {}
            elif not isinstance(node[part], (dict, list)):  # a value the user wrote is never overwritten on the way
                raise FixError(f"{edit.path}: {part!r} holds {node[part]!r}, not settings")
            node = node[part]
        else:
            raise FixError(f"{edit.path}: {part!r} is not there")
    if isinstance(node, list) and isinstance(last, int) and last < len(node):
        if edit.value is UNSET:
            del node[last]
        else:
            node[last] = copy.deepcopy(edit.value)
    elif isinstance(node, list) and last == len(node) and edit.value is not UNSET:
        node.append(copy.deepcopy(edit.value))  # the item after the last: added
    elif isinstance(node, dict) and isinstance(last, str):
        if edit.value is UNSET:
            node.pop(last, None)
        else:
            node[last] = copy.deepcopy(edit.value)
    else:
        raise FixError(f"{edit.path}: {last!r} is not there")
