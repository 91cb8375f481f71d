"""One word per concept (CONTRIBUTING.md, "Glossary"): the code's identifiers and the documents' prose use the
glossary's words. Names already deployed (object names, construct IDs, the cache key's factor) are strings or
serialized fields the glossary lists as kept, and are not identifiers this test reads."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from tests.import_graph import SOURCES
from tests.synth import ROOT

# identifier pattern -> the glossary's word for it
IDENTIFIERS = {
    re.compile(r"image_?cache", re.IGNORECASE): "prepull (the mode's objects) or image_preload (the feature)",
    re.compile(r"weights_?copy", re.IGNORECASE): "node_copy",
    re.compile(r"(?<![a-z])tp_?size|tensor_parallel(?!_size|_sizes|_problems)", re.IGNORECASE): "tensor_parallel_size",
}
# The cache key's factor keeps its name: it is part of every key's digest (contracts/cache_key.py ModelFactors).
KEPT = {("contracts.cache_key", "tensor_parallel")}
PROSE = {
    re.compile(r"pre-pull", re.IGNORECASE): "prepull",
    re.compile(r"weights copy", re.IGNORECASE): "node copy",
    re.compile(r"image caches?\b", re.IGNORECASE): "prepull DaemonSets",
}
DOCUMENTS = [ROOT / "README.md", ROOT / "tests" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Text that ships or is rendered as it is (a ConfigMap's files, the agent image's modules, annotations, RBAC texts):
# rewording it would roll pods or change templates, so it keeps its words until the file changes for a reason of
# its own. Each entry is a file and the old word it may still hold.
KEPT_TEXT = {
    ("contracts/file_identity.py", "weights copy"),  # in the entry step's ConfigMap
    ("model_workload/runtime/__init__.py", "weights copy"),  # in the entry step's ConfigMap
    ("model_workload/chart.py", "weights copy"),  # the scanner annotation of every vLLM pod
    ("kube/hardening.py", "pre-pull"),  # the scanner annotation of the prepull DaemonSets
    ("image_preload/prepull_chart.py", "pre-pull"),  # the gate's RBAC description
    ("image_preload/runtime/gate.py", "pre-pull"),  # in the agent image
    ("node_agent/runtime/metrics.py", "weights copy"),  # a metric's HELP text, in the agent image
}
TESTS = {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in sorted((ROOT / "tests").rglob("*.py"))}


def defined_names(tree: ast.AST) -> set[str]:
    """The names a module defines: functions, classes, arguments, assigned names and fields."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


def off_glossary(module: str, names: set[str]) -> list[str]:
    return [
        f"{module}: {name} (say {word})"
        for name in sorted(names)
        for pattern, word in IDENTIFIERS.items()
        if pattern.search(name) and (module, name) not in KEPT
    ]


def test_identifiers_use_the_glossarys_words():
    wrong = []
    for module, path in {**SOURCES, **TESTS}.items():
        wrong += off_glossary(module, defined_names(ast.parse(path.read_text())))
    assert wrong == []


def test_the_identifier_rule_would_catch_a_synonym():
    assert off_glossary("m", {"ImageCacheChart", "weights_copy_path", "tp_size", "tensor_parallel"}) == [
        "m: ImageCacheChart (say prepull (the mode's objects) or image_preload (the feature))",
        "m: tensor_parallel (say tensor_parallel_size)",
        "m: tp_size (say tensor_parallel_size)",
        "m: weights_copy_path (say node_copy)",
    ]
    assert off_glossary("m", {"tensor_parallel_size", "valid_tensor_parallel_sizes", "node_copy_files"}) == []


def prose(text: str) -> str:
    """A document's words, less its code (spans and blocks): a deployed name quoted as code is kept as it is."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", text, flags=re.DOTALL))


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_documents_use_the_glossarys_words(document: Path):
    text = prose(document.read_text())
    wrong = [f"{m.group(0)!r} (say {word})" for pattern, word in PROSE.items() for m in pattern.finditer(text)]
    assert wrong == []


def off_glossary_text(path: Path) -> list[str]:
    """The comments, docstrings and strings of a source file that use a word the glossary replaced."""
    relative = str(path.relative_to(ROOT))
    found = []
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type not in (tokenize.COMMENT, tokenize.STRING):
            continue
        for pattern, word in PROSE.items():
            for match in pattern.finditer(token.string):
                if (relative, match.group(0).lower().rstrip("s")) not in KEPT_TEXT:
                    found.append(f"{relative}:{token.start[0]} {match.group(0)!r} (say {word})")
    return found


def test_comments_docstrings_and_messages_use_the_glossarys_words():
    assert [line for path in SOURCES.values() for line in off_glossary_text(path)] == []
