"""The fix, as data, of each way a value can break the config model's own rules (pydantic's errors): the value a
refusal's words ask for, written where the refusal points.

Where the words name no single value (a pattern, a missing setting), the fix is, in order: the given text repaired
(look-alike letters made ASCII, capitals lowered, spaces trimmed) where the repair matches the rule; the setting
removed where it has a default; the shipped example's value at the same place.
"""

from __future__ import annotations

import difflib
import json
import re
import unicodedata
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from warmstart.checks.fix import UNSET, Ask, Edit, Fix, join, removing, setting, together
from warmstart.problem import Refused

# Where the shipped examples are (the repository's config/), to take a required setting's value from.
EXAMPLES = [Path(__file__).resolve().parents[1] / "config" / f"{name}.yaml" for name in ("dev", "prod", "existing")]

# Letters of other scripts that look like ASCII ones (Unicode's confusables for Latin, the common subset), and
# typographic dashes and spaces.
LOOK_ALIKES = str.maketrans(
    "аеорсухіјѕԁһӏАВЕКМНОРСТХІЈЅοαινρτυΑΒΕΖΗΙΚΜΝΟΡΤΥΧ\u2010\u2011\u2012\u2013\u2014\u2212\u00a0\u2007\u202f",
    "aeopcyxijsdhlABEKMHOPCTXIJSoaivptuABEZHIKMNOPTYX------   ",
)


# Values of a pattern that only the user's account knows: asked for, with an example of the form.
ASKED = {
    r"^cr-[0-9a-z]+$": Ask("the capacity reservation's ID", "cr-0123456789abcdef0"),
    r"^vpc-[0-9a-f]{8,17}$": Ask("the VPC's ID", "vpc-0123456789abcdef0"),
    r"^subnet-[0-9a-f]{8,17}$": Ask("the subnet's ID", "subnet-0123456789abcdef0"),
    r"^rtb-[0-9a-f]{8,17}$": Ask("the route table's ID", "rtb-0123456789abcdef0"),
    r"^sg-[0-9a-f]{8,17}$": Ask("the security group's ID", "sg-0123456789abcdef0"),
    r"^[0-9]{12}$": Ask("the 12-digit AWS account ID", "123456789012"),
    r"^\d{12}$": Ask("the 12-digit AWS account ID", "123456789012"),
    r"^arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[0-9a-f-]{36}$": Ask(
        "the KMS key's ARN", "arn:aws:kms:us-west-2:123456789012:key/0123abcd-0123-4567-89ab-0123456789ab"
    ),
    r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_-]{1,256}$": Ask(
        "the SNS topic's ARN", "arn:aws:sns:us-west-2:123456789012:alarms"
    ),
    r"^[^@\s]+@[^@\s]+\.[^@\s]+$": Ask("an email address", "oncall@example.com"),
    r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$": Ask("the GitHub repository", "example-org/platform"),
}


def ascii_look_alike(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).translate(LOOK_ALIKES)
    return "".join(c for c in unicodedata.normalize("NFKD", folded) if not unicodedata.combining(c))


def repaired(value: Any, pattern: str) -> str | None:
    """The given text made to match the pattern by what a reader would not have meant: look-alike letters,
    capitals, spaces at either end, or other characters where a DNS-style name allows only '-'."""
    if not isinstance(value, str):
        return None
    plain = ascii_look_alike(value).strip()
    lowered = plain.lower()
    dashed = re.sub(r"[^a-z0-9-]+", "-", lowered).strip("-")[:63].strip("-")
    for candidate in (plain, lowered, dashed):
        if candidate and re.fullmatch(pattern, candidate):
            return candidate
    return None


@cache
def _examples() -> tuple[Any, ...]:
    return tuple(yaml.safe_load(path.read_text()) for path in EXAMPLES if path.exists())


def example_value(loc: list[str | int]) -> Any:
    """The value a shipped example has at the same place (the first list item standing for any)."""
    for document in _examples():
        node: Any = document
        for part in loc:
            if isinstance(part, int):
                node = node[0] if isinstance(node, list) and node else None
            else:
                node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        else:
            return node
    return UNSET


def fallback(field: str, loc: list[str | int], has_default: bool) -> tuple[Fix, ...]:
    """Remove the setting where it has a default (or is a list item or mapping entry); else ask for the value (a
    name, an account, a bucket are the user's own: the shipped example only shows its form)."""
    if has_default or (loc and isinstance(loc[-1], int)):
        return (setting(field, UNSET),)
    value = example_value(loc)
    return () if value is UNSET else (setting(field, Ask(f"the value of {field}", value)),)


def range_value(kind: str, bound: Any, given: Any) -> Any:
    """The nearest value inside a bound (a whole number beside an exclusive one)."""
    if kind in ("greater_than_equal", "less_than_equal"):
        return bound
    if isinstance(given, int) and isinstance(bound, int):
        return bound + 1 if kind == "greater_than" else bound - 1
    return UNSET


def literal_choice(given: Any, expected: str) -> Any:
    """The allowed value closest to the given one: YAML's false/true back to the word written (off/on), or the
    nearest spelling, or the first."""
    choices: list[Any] = [
        int(number) if number else text for text, number in re.findall(r"'([^']*)'|(-?\d+)", expected)
    ]
    if not choices:
        return UNSET
    if isinstance(given, bool):
        words = [w for w in (("on", "yes", "true") if given else ("off", "no", "false")) if w in choices]
        if words:
            return words[0]
    if isinstance(given, (int, float)) and all(isinstance(c, int) for c in choices):
        return min(choices, key=lambda c: abs(c - given))
    close = difflib.get_close_matches(str(given), [str(c) for c in choices], n=1, cutoff=0.0)
    return next(c for c in choices if str(c) == close[0]) if close else choices[0]


def pattern_fixes(field: str, given: Any, pattern: str) -> tuple[Fix, ...]:
    """The text repaired where that matches, else the value asked for (an ID or ARN only the account knows)."""
    value = repaired(given, pattern)
    if value is not None:
        return (setting(field, value),)
    asked = ASKED.get(pattern)
    return (setting(field, asked),) if asked else ()


def key_fixes(field: str, given: Any, pattern: str | None, entries: Any) -> tuple[Fix, ...]:
    """A mapping key refused: the entry under the key repaired (where that key is free), or the entry removed."""
    entry = Edit(field)
    key = repaired(given, pattern) if pattern else None
    if key is not None and isinstance(entries, dict) and key not in entries and given in entries:
        parent = field.removesuffix(" (key)").rpartition("[")[0]
        return (together(entry, Edit(join(parent, f"[{json.dumps(key)}]"), entries[given])), removing(field))
    return (removing(field),)


def list_of(given: Any, loc: list[str | int]) -> Any:
    """A single item written where a list goes: the example's list where it holds that item, else the item alone."""
    example = example_value(loc)
    return example if isinstance(example, list) and given in example else [given]


def refused_fixes(error: Any, field: str) -> tuple[Fix, ...]:
    """A validator's own fix (warmstart.problem.Refused), its paths made absolute."""
    return tuple(fix.under(field) for fix in error.fixes) if isinstance(error, Refused) else ()


def mode_fixes(compute: Any, modes: dict[str, type[BaseModel]]) -> tuple[Fix, ...]:
    """The compute modes whose settings are all among those given (a typo in mode, or mode left out)."""
    given = set(compute) - {"mode"} if isinstance(compute, dict) else set()
    fitting = [name for name, model in modes.items() if given <= set(model.model_fields)]
    return tuple(setting("compute.mode", name) for name in fitting)
