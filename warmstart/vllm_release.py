"""The vLLM releases warmstart supports, as data read from each release's own packages.

Each `warmstart/vllm_releases/<version>.json` is written by `python -m tests.real_vllm.record_facts <version>` (never
by hand): PyPI's release list, the wheel's metadata (torch pin, the streamer minimum of its `runai` extra), the
sdist's Dockerfile (the serving image's ENV, ENTRYPOINT and streamer), and the installed vLLM (the variables it
knows, hashes and how it parses each; the compile folder's naming; its CLI). The real vLLM tier runs every case
against every release here. The oldest is the oldest supported; a release newer than the newest is accepted with a
note (a table cannot know the future), one older than the oldest is refused.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from warmstart.naming import image_tag

RELEASES_DIR = Path(__file__).resolve().parent / "vllm_releases"
# A vLLM release as PyPI and the image tags number it (0.34.0, 0.10.1.1, 0.8.5.post1).
VERSION_PATTERN = r"^\d+\.\d+\.\d+(\.\d+)?(\.post\d+)?$"
# Repositories whose tags are vLLM releases: vLLM's own image and AWS's Deep Learning Container (`vllm`).
_VLLM_REPOSITORIES = re.compile(r"^vllm(-openai)?$")
_TAG_VERSION = re.compile(r"^v?(?P<version>\d+\.\d+\.\d+(?:\.\d+)?(?:\.post\d+)?)(?:[-+_].*)?$")
# Spellings a person writes for on and off (what a `words_flag` getter is checked against).
ON_WORDS = ("1", "true", "True", "TRUE", "yes", "on")
OFF_WORDS = ("0", "false", "False", "FALSE", "no", "off")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


@dataclass(frozen=True)
class VllmRelease:
    version: str
    released: str
    recorded: str
    torch: str
    streamer_minimum: str
    image: dict[str, Any]
    env: dict[str, Any]
    compile: dict[str, Any]
    cli: dict[str, Any]
    sources: dict[str, str]
    # Where the engine writes its caches (tests/real_vllm/record_caches.py): the names vLLM joins under
    # VLLM_CACHE_ROOT, the kernel libraries' versions and their default folders.
    caches: dict[str, Any]

    @property
    def known_env(self) -> frozenset[str]:
        return frozenset(self.env["known"])

    @property
    def hashed_env(self) -> frozenset[str]:
        return frozenset(self.env["hashed"])

    @property
    def server_command(self) -> list[str]:
        """How a pod starts the OpenAI server: `vllm serve` where the release has it (the image's ENTRYPOINT; the
        `python -m ...api_server` form is deprecated from 0.34.0), else the module."""
        return ["vllm", "serve"] if self.cli["serve"] else ["python3", "-m", "vllm.entrypoints.openai.api_server"]

    def value_refusal(self, name: str, value: str) -> tuple[str, str, list[str]] | None:
        """(why, fix in words, values this release reads as meant) for a `vllm_env` value this release's own getter
        refuses or reads against its plain meaning; None when it reads it as written."""
        rule = self.env["values"].get(name)
        if rule is None:
            return None
        kind, says = rule["kind"], f"vLLM {self.version} reads {name}"
        if kind == "choices":
            return _choice_refusal(rule, value, says)
        if kind in ("int", "int_flag"):
            if _parses(int, value):
                return None
            instead = _word_number(value) if kind == "int_flag" else _whole(value)
            return (
                f"{says} with int(): {value!r} stops the engine at start",
                f"write a whole number{' (0 off, 1 on)' if kind == 'int_flag' else ''}, or remove it",
                instead,
            )
        if kind == "float":
            if _parses(float, value):
                return None
            return (f"{says} with float(): {value!r} stops the engine at start", "write a number, or remove it", [])
        if kind == "words_flag":
            return _words_refusal(rule, value, says)
        if kind == "json":
            if value.startswith("/") or _parses(json.loads, value):
                return None  # JSON text, or a file in the image (which synth cannot see)
            return (
                f"{says} as JSON text or the path of a JSON file: {value!r} is neither, and the engine stops at start",
                'write JSON (such as {"dtype": "int8"}) or an absolute path, or remove it',
                [],
            )
        if kind == "other" and value not in rule["accepts"]:
            return (
                f"{says} and takes only {', '.join(map(repr, rule['accepts']))} of the values warmstart tried; "
                f"{value!r} is not one of them",
                "write one of them, or remove it",
                list(rule["accepts"][:1]),
            )
        return None

    def reads_variable(self, name: str) -> bool:
        """Whether this release reads the name: a variable it knows, one its environment check reads, or one it
        removed (and refuses)."""
        return name in self.known_env or name in self.env["values"] or name in self.removed_env

    @property
    def removed_env(self) -> dict[str, str]:
        """Names the engine refuses at start, with vLLM's own hint (0.34.0 `removed_environment_variables`)."""
        return dict(self.env.get("removed", {}))

    def spell(self, name: str, given: Any, literal: str | None = None) -> list[str]:
        """How to write, as text this release reads as meant, a value YAML did not read as text: true/false as an
        on/off spelling the variable's getter takes, a number as written; nothing for an empty value (removing
        the variable keeps vLLM's default)."""
        if given is None:
            return []
        if isinstance(given, bool):
            words = ON_WORDS if given else OFF_WORDS
            return [w for w in words if self.value_refusal(name, w) is None and self._reads(name, w) in (given, None)][
                :1
            ]
        written = literal if literal is not None else str(given)
        refused = self.value_refusal(name, written)
        return [written] if refused is None else refused[2]

    def _reads(self, name: str, value: str) -> bool | None:
        """What an on/off getter makes of a spelling (None where the variable is no such getter)."""
        rule = self.env["values"].get(name, {})
        if rule.get("kind") == "words_flag":
            return value in rule["on"]
        if rule.get("kind") == "int_flag":
            return _parses(int, value) and int(value) != 0
        return None


def _parses(kind: Callable[[str], object], value: str) -> bool:
    try:
        kind(value)
    except ValueError:
        return False
    return True


def _word_number(value: str) -> list[str]:
    """A word's meaning as the number a bool(int(...)) getter takes."""
    if value.strip() in ON_WORDS:
        return ["1"]
    if value.strip() in (*OFF_WORDS, ""):
        return ["0"]
    return _whole(value)


def _whole(value: str) -> list[str]:
    try:
        number = float(value)
    except ValueError:
        return []
    return [str(int(number))] if number.is_integer() else []


def _choice_refusal(rule: dict, value: str, says: str) -> tuple[str, str, list[str]] | None:
    choices: list[str] = rule["choices"]

    def fold(text: str) -> str:
        return text if rule["case_sensitive"] else text.lower()

    items = [v.strip() for v in value.split(",") if v.strip()] if rule["list"] else [value]
    if rule["list"] and not items:
        return None  # an empty list: vLLM takes its default (env_list_with_choices)
    allowed = {fold(c) for c in choices}
    wrong = [item for item in items if fold(item) not in allowed]
    if not wrong:
        return None
    close = {item: difflib.get_close_matches(fold(item), choices, n=1, cutoff=0.5) for item in wrong}
    # The items it takes stay; each it refuses becomes its nearest choice (no fix where one has none).
    fixed: list[str | None] = [item if item not in close else next(iter(close[item]), None) for item in items]
    suggestion = ",".join(c for c in fixed if c) if all(fixed) else None
    shown = ", ".join(choices) if len(choices) <= 12 else ", ".join(choices[:12]) + ", ..."
    return (
        f"{says} as {'a comma-separated list of ' if rule['list'] else 'one of '}{shown}; "
        f"{', '.join(map(repr, wrong))} {'is' if len(wrong) == 1 else 'are'} not among them, so the engine "
        "stops at start",
        "write " + ("values" if rule["list"] else "a value") + " from that list, or remove it",
        [suggestion] if suggestion else [],
    )


def _words_refusal(rule: dict, value: str, says: str) -> tuple[str, str, list[str]] | None:
    """A getter that never fails but reads only some spellings as on: a word meaning on that it reads as off (or the
    reverse), or a spelling it was never seen to read, is refused."""
    on, off = rule["on"], rule["off"]
    plain = value.strip().lower()
    meant = True if plain in ON_WORDS else False if plain in OFF_WORDS else None
    reads = True if value in on else False if value in off else None
    if reads is None and rule.get("folds"):  # the getter strips and lowercases: read as its plain spelling
        reads = True if plain in on else False if plain in off else None
    if meant is None and reads is not None:
        return None  # no plain meaning to contradict (a number such as 2, a word such as abc): read as recorded
    if meant is not None and reads == meant:
        return None
    # The plain spellings of on and off this getter reads as such ("1" before "true", as vLLM's own docs write them).
    on_words = [w for w in ON_WORDS if w in on]
    off_words = [w for w in OFF_WORDS if w in off]
    spelling = (on_words[:1] if meant else off_words[:1]) if meant is not None else []
    folded = " (in any case, spaces around ignored)" if rule.get("folds") else ""
    spells = f"on only for {', '.join(map(repr, on_words))}{folded}" if on_words else "off whatever it says here"
    if reads is None:
        why = f"{says} as {spells}; warmstart has no record of how it reads {value!r}"
    else:
        why = f"{says} as {spells}: {value!r} would turn it {'on' if reads else 'off'}, not {'on' if meant else 'off'}"
    return (
        why,
        "write " + (" or ".join(map(repr, on_words[:1] + off_words[:1])) or "another value") + ", or remove it",
        spelling,
    )


def _load(path: Path) -> VllmRelease:
    data = json.loads(path.read_text())
    return VllmRelease(
        version=data["vllm"],
        released=data["released"],
        recorded=data["recorded"],
        torch=data["torch"],
        streamer_minimum=data["streamer_minimum"],
        image=data["image"],
        env=data["env"],
        compile=data["compile"],
        cli=data["cli"],
        sources=data["sources"],
        caches=data["caches"],
    )


@cache
def releases() -> dict[str, VllmRelease]:
    found = {path.stem: _load(path) for path in RELEASES_DIR.glob("*.json")}
    return dict(sorted(found.items(), key=lambda item: version_key(item[0])))


SUPPORTED: tuple[str, ...] = tuple(releases())
OLDEST, NEWEST = SUPPORTED[0], SUPPORTED[-1]
DEFAULT_IMAGE = releases()[NEWEST].image["reference"]


def release(version: str) -> VllmRelease | None:
    return releases().get(version)


def image_version(image: str) -> str | None:
    """The vLLM release a serving image's tag names: vllm/vllm-openai:v0.34.0, or AWS's Deep Learning Container
    .../vllm:0.21.0-gpu-py312-...; None for a digest alone or another repository (its tag says nothing of vLLM)."""
    tag = image_tag(image)
    repository = image.split("@", 1)[0].rsplit("/", 1)[-1].split(":", 1)[0]
    if tag is None or not _VLLM_REPOSITORIES.match(repository):
        return None
    match = _TAG_VERSION.match(tag)
    return match.group("version") if match else None


def nearest_older(version: str) -> VllmRelease:
    """The newest supported release not newer than `version` (the facts that apply at least as far as it goes)."""
    older = [v for v in SUPPORTED if version_key(v) <= version_key(version)]
    return releases()[older[-1] if older else OLDEST]


class _Serving(Protocol):
    """What a model says of its serving image (warmstart.config.models.ModelSpec, frozen)."""

    @property
    def image(self) -> str: ...

    @property
    def vllm_version(self) -> str | None: ...

    @property
    def torch_version(self) -> str | None: ...


def serving_version(model: _Serving) -> str | None:
    """The vLLM release a model's pods run: the config's vllm_version, else the one the image's tag names."""
    return model.vllm_version or image_version(model.image)


def serving_release(model: _Serving) -> VllmRelease | None:
    """The recorded facts of that release (None for a release warmstart has none of)."""
    version = serving_version(model)
    return release(version) if version else None


def serving_torch(model: _Serving) -> str:
    """The PyTorch inside the image: the config's torch_version, else the release's pin. A model with neither is
    refused (warmstart/checks/vllm_rules.py); other rules that plan such a model before the refusal is reported see
    "unknown", which no accepted config ever holds."""
    if model.torch_version:
        return model.torch_version
    known = serving_release(model)
    return known.torch if known else "unknown"


def facts_for(model: _Serving) -> VllmRelease:
    """The facts that shape what warmstart renders for a model: its release's, or for a release warmstart has none
    of, the nearest older recorded one's (a note says so)."""
    version = serving_version(model)
    return serving_release(model) or nearest_older(version or NEWEST)
