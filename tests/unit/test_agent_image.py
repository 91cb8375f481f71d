"""The agent image installs exactly what the agent imports, at the project's pinned versions."""

import ast
import sys
from pathlib import Path

from node_agent.image import DOCKERFILE, IMAGE_SOURCE
from tests.synth import ROOT

# Our own packages that the image carries (node_agent/image.py), not installed from requirements.
FIRST_PARTY = {path.split("/")[0] for path in IMAGE_SOURCE}

IMPORT_TO_DISTRIBUTION = {
    "awscrt": "awscrt",
    "boto3": "boto3",
    "botocore": "botocore",
    "zstandard": "zstandard",
    "pydantic": "pydantic",
    "yaml": "PyYAML",
    "prometheus_client": "prometheus-client",
}


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-r "):
            name, version = line.split("==")
            pins[name.lower().replace("_", "-")] = version
    return pins


def _third_party_imports(folder: Path, files: list[Path] | None = None, siblings: set[str] | None = None) -> set[str]:
    found = set()
    siblings = siblings if siblings is not None else {p.stem for p in folder.glob("*.py")}
    for path in files or folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            )
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in FIRST_PARTY | {"__future__"} | siblings:
                    found.add(top)
    return found


def test_agent_requirements_cover_every_import_at_the_project_versions():
    agent_pins = _pins(ROOT / "node_agent" / "requirements.txt")
    project_pins = {
        name: version
        for file in ("requirements.txt", "requirements-runtime.txt", "requirements-test.txt", "requirements-lint.txt")
        for name, version in _pins(ROOT / file).items()
    }
    imports = set().union(
        *(_third_party_imports(ROOT / path) for path in IMAGE_SOURCE if (ROOT / path).is_dir()),
        *(_third_party_imports((ROOT / path).parent, [ROOT / path]) for path in IMAGE_SOURCE if path.endswith(".py")),
    )
    assert imports <= set(IMPORT_TO_DISTRIBUTION), imports - set(IMPORT_TO_DISTRIBUTION)
    for module in imports:
        assert IMPORT_TO_DISTRIBUTION[module].lower() in agent_pins, module
    for name, version in agent_pins.items():
        assert project_pins[name] == version, name


def test_the_entry_step_needs_only_the_standard_library():
    """It runs inside the serving image (vLLM's), from a ConfigMap: none of our packages are there. vLLM's plugin
    imports vLLM, the image's own, only once vLLM calls it (its module is imported to find the hook)."""
    from model_workload.pod_spec import ENTRY_FILES

    scripts = [path for path in ENTRY_FILES.values() if path.suffix == ".py"]
    plugin = ROOT / "model_workload" / "runtime" / "node_copy_loader.py"
    assert plugin in scripts
    mounted = {Path(name).stem for name in ENTRY_FILES if "/" not in name}  # side by side in the mounted folder
    others = [p for p in scripts if p != plugin]
    assert _third_party_imports(ROOT / "model_workload" / "runtime", others, mounted) == set()
    assert _third_party_imports(ROOT / "model_workload" / "runtime", [plugin], mounted) == {"vllm"}
    module_level = ast.parse(plugin.read_text()).body
    assert not any(isinstance(n, (ast.Import, ast.ImportFrom)) and "vllm" in ast.dump(n) for n in module_level)
    for path in scripts:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and node not in _repository_fallbacks(tree, mounted):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(m.split(".")[0] in FIRST_PARTY for m in modules), path.name


def _repository_fallbacks(tree: ast.Module, mounted: set[str]) -> set[ast.AST]:
    """Imports in the `except ImportError` of a `try` that imports a module the ConfigMap mounts beside the script:
    the pod always takes the `try` (the shared module is a sibling there); only the repository's tests take these."""
    fallbacks: set[ast.AST] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try):
            continue
        tried = {n.module for n in node.body if isinstance(n, ast.ImportFrom)}
        if tried and tried <= mounted:
            for handler in node.handlers:
                if isinstance(handler.type, ast.Name) and handler.type.id == "ImportError":
                    fallbacks |= {n for n in handler.body if isinstance(n, ast.ImportFrom)}
    return fallbacks


def test_dockerfile_pins_its_base_image_and_runs_the_agent():
    dockerfile = (ROOT / DOCKERFILE).read_text()
    base = next(line.split()[1] for line in dockerfile.splitlines() if line.startswith("FROM "))
    assert ":" in base and not base.endswith(":latest")
    assert 'ENTRYPOINT ["python", "-m", "node_agent.runtime"]' in dockerfile
    # Every package the image source holds is copied in.
    for package in FIRST_PARTY:
        assert f"COPY {package} {package}" in dockerfile, package
    # ...and compiled after the last copy (the image never writes bytecode at run time).
    assert "ENV PYTHONDONTWRITEBYTECODE=1" in dockerfile
    lines = dockerfile.splitlines()
    compile_step = next(i for i, line in enumerate(lines) if line.startswith("RUN python -m compileall"))
    assert {word for word in lines[compile_step].split()[4:] if not word.startswith("-")} == set(FIRST_PARTY)
    assert compile_step > max(i for i, line in enumerate(lines) if line.startswith("COPY "))


def test_make_agent_image_sends_the_same_context_as_cdk():
    """`make agent-image` builds with BuildKit, which reads node_agent/Dockerfile.dockerignore; CDK's asset uses
    IMAGE_CONTEXT: one list for both, written from node_agent/image.py."""
    from node_agent.image import dockerignore

    assert (ROOT / "node_agent" / "Dockerfile.dockerignore").read_text() == dockerignore()
