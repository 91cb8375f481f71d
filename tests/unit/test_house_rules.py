"""Where decisions live, read from the source: every builder (constructs, charts, statement and state-machine
functions) fits in about a screen, each node OS is named only by its object (warmstart/node_os/), and no code
compares against a compute mode's name outside the config model."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.synth import ROOT
from warmstart.config.compute import COMPUTE_MODES
from warmstart.node_os import AUTO_MODE_OS, KARPENTER_NODE_OSES
from warmstart.preload_modes import PRELOAD_MODES

BUILDER_LINES = 60
# The infrastructure packages: everything in them that is not runtime code builds constructs, charts or policies.
BUILDER_PACKAGES = (
    "stacks",
    "construct_kit",
    "gpu_compute",
    "kube",
    "node_agent",
    "model_workload",
    "pruner",
    "image_preload",
    "lambdas",
)
SOURCE_PACKAGES = ("contracts", "warmstart", "warmstart_cli", *BUILDER_PACKAGES)


def _files(packages: tuple[str, ...]) -> list[Path]:
    return [ROOT / "app.py", *(p for package in packages for p in sorted((ROOT / package).rglob("*.py")))]


def _builder_files() -> list[Path]:
    return [p for p in _files(BUILDER_PACKAGES) if "runtime" not in p.relative_to(ROOT).parts]


def long_functions(path: Path, limit: int) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if lines > limit:
                found.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_the_length_rule_sees_a_long_function(tmp_path):
    source = tmp_path / "long.py"
    source.write_text("def f():\n" + "    x = 1\n" * BUILDER_LINES + "\n\ndef g():\n    pass\n")
    assert long_functions(source, BUILDER_LINES) == [f"long.py:1 f ({BUILDER_LINES + 1} lines)"]


@pytest.mark.parametrize("path", _builder_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_builder_is_longer_than_a_screen(path):
    assert long_functions(path, BUILDER_LINES) == []


def _string_constants(path: Path) -> list[ast.Constant]:
    tree = ast.parse(path.read_text())
    docstrings = {
        id(getattr(node.body[0], "value", None))
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and ast.get_docstring(node, clean=False) is not None
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_each_node_os_is_named_only_by_its_object():
    """A value such as "bottlerocket" or "al2023@v..." outside warmstart/node_os/ would be a decision about an OS
    made elsewhere (prose in messages and comments may still mention an OS)."""
    names = tuple(KARPENTER_NODE_OSES)
    mounts = {os.nvme_mount for os in KARPENTER_NODE_OSES.values()} | {AUTO_MODE_OS.nvme_mount}
    outside = [p for p in _files(SOURCE_PACKAGES) if "node_os" not in p.relative_to(ROOT).parts]
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}"
        for path in outside
        for node in _string_constants(path)
        if node.value.lower() in names
        or node.value.lower().startswith(tuple(f"{name}@" for name in names))
        or node.value.rstrip("/") in mounts
    ]
    assert found == []


def mode_comparisons(source: str) -> list[int]:
    """Lines that compare something's `mode` with a compute or preload mode's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = any(isinstance(s, ast.Constant) and s.value in {*COMPUTE_MODES, *PRELOAD_MODES} for s in sides)
            if names and any(isinstance(s, ast.Attribute) and s.attr == "mode" for s in sides):
                found.append(node.lineno)
    return found


def test_no_code_compares_against_a_modes_name():
    """The compute mode is decided once (gpu_compute/__init__.py, by the settings' class) and a
    preload mode answers for itself (warmstart/preload_modes/); a comparison such as `compute.mode == "auto"` or
    `image_preload.mode == "snapshot"` anywhere would be a second place."""
    assert mode_comparisons('if config.compute.mode == "auto":\n    pass\nif tp != "auto":\n    pass\n') == [1]
    assert mode_comparisons('x = preload.mode != "snapshot"\n') == [1]
    found = {str(p.relative_to(ROOT)): mode_comparisons(p.read_text()) for p in _files(SOURCE_PACKAGES)}
    assert {path: lines for path, lines in found.items() if lines} == {}


# A test module that runs another's tests again on a real server (the mirror) imports them on purpose.
RERUNS = {"tests/cluster/test_agent_api.py"}


def test_no_test_module_imports_another_test_module():
    """Shared builders live in modules of their own (tests/builders.py, tests/import_graph.py, a folder's *_world.py),
    never in a test module another one imports: importing a test module collects its tests twice."""
    importers = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if str(path.relative_to(ROOT)) in RERUNS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if any(name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_") for name in names):
                importers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert importers == []


def _fixtures(conftest: Path) -> set[str]:
    tree = ast.parse(conftest.read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and any("fixture" in ast.unparse(d) for d in node.decorator_list)
    }


def test_what_other_modules_take_from_a_conftest_is_fixtures_only():
    """A conftest holds fixtures; the helpers they use live in a builder module (a folder's *_world.py), which
    other folders import instead."""
    taken = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith(".conftest"):
                conftest = ROOT / Path(*node.module.split(".")).with_suffix(".py")
                taken += [
                    f"{path.relative_to(ROOT)}: {a.name}" for a in node.names if a.name not in _fixtures(conftest)
                ]
    assert taken == []
