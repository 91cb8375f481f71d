"""Our modules' imports, read from the source (no module is imported): the graph that the import rules and the
light-install test hold, the layout's layers, and what each program shipped alone carries."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.synth import ROOT

# The layout's rule, bottom up: a module imports only its own package and the layers below its own. Shared
# folders (contracts, the domain, what Lambda functions ship, the charts' and the constructs' kits) never import a
# component, the stacks or an entry point; components may import each other (no cycle: test_no_import_cycle).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("contracts",),
    ("warmstart",),
    ("lambdas", "kube"),
    ("construct_kit",),
    ("node_agent", "model_workload", "pruner", "image_preload", "gpu_compute", "observability"),
    ("stacks",),
    ("app", "render", "warmstart_cli"),
)
SHARED = ("contracts", "warmstart", "lambdas", "kube", "construct_kit")
COMPONENTS = LAYERS[4]
PACKAGES = tuple(p for layer in LAYERS for p in layer if p not in ("app", "render"))
INFRASTRUCTURE = ("aws_cdk", "constructs", "cdk8s", "cdk8s_plus_33", "cdk_nag", "jsii")


# Each program shipped alone: its own code, and what its asset or image ships beside it (read from the
# constructs, so a test cannot allow what the asset leaves out).
def shipped_programs() -> dict[str, tuple[tuple[str, ...], set[str] | None]]:
    """program -> (module prefixes its asset ships, third-party packages it may import; None: the image's own
    requirements, which tests/unit/test_agent_image.py holds)."""
    from construct_kit.lambda_packaging import SHARED_RUNTIME
    from image_preload.snapshot import FUNCTION_SOURCE as SNAPSHOT_SOURCE
    from node_agent.image import IMAGE_SOURCE
    from pruner.construct import FUNCTION_SOURCE as PRUNER_SOURCE

    def modules(paths) -> tuple[str, ...]:
        return tuple(p.removesuffix(".py").replace("/", ".") for p in paths if not p.endswith(".txt"))

    lambda_runtime = {"boto3", "botocore"}  # what the Lambda Python runtime provides
    image = modules(IMAGE_SOURCE)
    return {
        "node_agent.runtime": (image, None),
        "image_preload.runtime.gate": (image, None),
        "pruner.runtime": (modules([*PRUNER_SOURCE, *SHARED_RUNTIME]), lambda_runtime),
        "image_preload.runtime.snapshot": (modules([*SNAPSHOT_SOURCE, *SHARED_RUNTIME]), lambda_runtime),
    }


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    found = {"app": ROOT / "app.py", "render": ROOT / "render.py"}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[_module_name(path)] = path
    return found


SOURCES = _sources()


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """In the body of an `if TYPE_CHECKING:` (not its else branch, nor `if not TYPE_CHECKING:`)."""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.If) and ast.unparse(parent.test).split(".")[-1] == "TYPE_CHECKING":
            if node in parent.body:
                return True
        node = parent
    return False


def imported(module: str, *, with_types: bool = False) -> set[str]:
    """Every module `module` imports (dotted names as written, relative ones resolved)."""
    path = SOURCES[module]
    tree = ast.parse(path.read_text())
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if not with_types and _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            members = {f"{base}.{alias.name}" for alias in node.names}
            # `from package import module` imports the modules (and the package's __init__, which imports nothing
            # of the modules' when a package is laid out well: a cycle through it is found there).
            names |= members if all(m in SOURCES for m in members) else {base, *members}
    return names


def ours(name: str) -> str | None:
    """The module of ours a dotted name lands in (the longest known prefix), or None."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in SOURCES:
            return candidate
    return None


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:end]) for end in range(1, len(parts))]


def graph(*, with_types: bool = False) -> dict[str, set[str]]:
    """Module -> what importing it runs: each imported module, and the `__init__` of every package above it that
    is not one of the importer's own (Python runs a package's `__init__` before its submodule)."""
    edges = {}
    for module in SOURCES:
        targets: set[str] = set()
        for name in imported(module, with_types=with_types):
            target = ours(name)
            if target is None or target == module:
                continue
            targets.add(target)
            targets |= {p for p in _parents(target) if p in SOURCES and not module.startswith(p + ".")}
        edges[module] = targets - {module}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package_imports(module: str, *, with_types: bool = False) -> set[str]:
    """Packages of ours a module reaches for (a package's own submodules import it: not counted)."""
    reached = set()
    for name in imported(module, with_types=with_types):
        target = ours(name)
        if target is not None and not module.startswith(target + ".") and target != module:
            reached.add(target)
    return reached


def within(module: str, allowed: tuple[str, ...]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


def reached(start: list[str]) -> set[str]:
    """Every module of ours that importing `start` runs, transitively (packages' __init__ included)."""
    edges, seen, todo = graph(), set(start), list(start)
    while todo:
        for target in edges[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def third_party(module: str) -> set[str]:
    tops = {name.split(".")[0] for name in imported(module)}
    return {t for t in tops if t not in sys.stdlib_module_names and t != "__future__" and t not in PACKAGES}


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    return next(rank for rank, layer in enumerate(LAYERS) if top in layer)
