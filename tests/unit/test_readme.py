"""The map: the README stays short, and what the documents tell a newcomer to run or open exists.

- the README is at most 300 lines and names every top-level folder in its layout table;
- every `make <target>` written in a document is a target, and `make help` lists every target;
- every `python -m <module> <command>` written in a document names a module and, for the command line, a command;
- every relative link resolves;
- the README's config excerpt is what config/dev.yaml says;
- times and test counts are stated once, in tests/README.md: the README and CONTRIBUTING link there.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.synth import ROOT

README = ROOT / "README.md"
DOCUMENTS = sorted(
    [README, ROOT / "CONTRIBUTING.md", ROOT / "tests" / "README.md", ROOT / "bench" / "RESULTS.md"]
    + list((ROOT / "docs").glob("*.md"))
)
MAKE_WORD = re.compile(r"(?:`|^)make ([a-z][a-z-]*)", flags=re.MULTILINE)  # in code, not the verb
PYTHON_M = re.compile(r"python -m ([\w.]+)(?: ([a-z][a-z-]*))?")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z-]*):", text, flags=re.MULTILINE))


def test_the_readme_is_a_short_map():
    assert len(README.read_text().splitlines()) <= 300


def test_the_readmes_layout_names_every_top_level_folder():
    layout = README.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `([^`]+?)/?` \|", layout, flags=re.MULTILINE))
    folders = {
        p.name
        for p in ROOT.iterdir()
        if (p / "__init__.py").exists() or p.name in ("config", "docs", "bench", "tests", ".github", ".ci")
    }
    assert folders - {"tests"} <= {n.rstrip("/").split("/")[0] for n in named} | {"tests"}
    for path in named:
        assert (ROOT / path.split(" ")[0].replace("<env>", "dev")).exists(), path


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_make_target_a_document_names_exists(document):
    named = set(MAKE_WORD.findall(document.read_text()))
    assert named - _targets() == set(), f"{document.name} names targets the Makefile lacks"


def test_make_help_lists_every_target():
    done = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.strip()}
    assert listed == _targets()


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_command_a_document_names_exists(document):
    from warmstart_cli.__main__ import COMMANDS

    ours = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    for module, command in PYTHON_M.findall(document.read_text()):
        if module.split(".")[0] not in ours:
            continue  # another project's (vllm's own entry points)
        assert importlib.util.find_spec(module) is not None, (document.name, module)
        if module == "warmstart_cli" and command:
            assert command in COMMANDS, (document.name, command)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(document):
    for target in LINK.findall(document.read_text()):
        if "://" in target:
            continue
        assert (document.parent / target).exists(), (document.name, target)


def _subtree(part, whole) -> bool:
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _subtree(v, whole[k]) for k, v in part.items())
    if isinstance(part, list) and part and isinstance(part[0], dict):
        return isinstance(whole, list) and all(_subtree(p, w) for p, w in zip(part, whole, strict=False))
    return part == whole


def test_the_readmes_config_excerpt_is_the_shipped_dev_config():
    excerpt = README.read_text().split("## A config, in short", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    assert _subtree(yaml.safe_load(excerpt), yaml.safe_load((ROOT / "config" / "dev.yaml").read_text()))
    assert not _subtree({"compute": {"mode": "karpenter"}}, yaml.safe_load((ROOT / "config" / "dev.yaml").read_text()))


@pytest.mark.parametrize("document", [README, ROOT / "CONTRIBUTING.md"], ids=lambda p: p.name)
def test_times_are_stated_once_in_the_tests_readme(document):
    """A suite's time lives in tests/README.md; the map and the contributing guide link there."""
    text = document.read_text()
    assert re.findall(r"\b\d+(?:[.,-]\d+)? ?(?:min|minutes|seconds)\b", text) == []
    assert "tests/README.md" in text


def test_the_tests_readme_has_one_row_per_test_folder():
    table = (ROOT / "tests" / "README.md").read_text().split("## ", 1)[0]
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    named = set(re.findall(r"`tests/(\w+)", table))
    assert folders - {"standins", "fixtures", "schemas"} <= named
    assert Path(ROOT / "tests" / "README.md").exists()
