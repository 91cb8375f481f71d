"""The house rules of imports, read from the source (no module is imported):

- no import cycle among our modules (imports inside functions count: they only hide a cycle);
- runtime code (every `runtime/` folder and `contracts/`) never imports CDK, cdk8s or constructs;
- `contracts` imports only the standard library and pydantic, never one of our packages;
- each program shipped alone (the agent image's programs, each Lambda function) imports only `contracts`, its own
  folder and, for a Lambda, the shared log line: what its asset ships (node_agent/image.py, the constructs'
  FUNCTION_SOURCE);
- the domain package (`warmstart`) imports no infrastructure package.
"""

from __future__ import annotations

import sys

import pytest

from tests.import_graph import (
    COMPONENTS,
    INFRASTRUCTURE,
    LAYERS,
    PACKAGES,
    SHARED,
    SOURCES,
    cycles,
    graph,
    imported,
    layer_of,
    package_imports,
    reached,
    shipped_programs,
    third_party,
    within,
)
from tests.synth import ROOT


def test_the_rules_see_every_package():
    """The reader itself: it finds the modules and their imports (a rule over nothing would pass)."""
    assert {m.split(".")[0] for m in SOURCES} == {*PACKAGES, "app", "render"}
    top_level = {
        p.name.removesuffix(".py")
        for p in ROOT.iterdir()
        if (p / "__init__.py").exists() or p.name in ("app.py", "render.py")
    }
    assert top_level - {"tests", "bench"} == {*PACKAGES, "app", "render"}, (
        "a new top-level package needs its place in LAYERS"
    )
    assert "contracts.cache_key" in package_imports("pruner.runtime.selection")
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    # Importing a submodule runs its package's __init__: an edge to the package, unless the importer is inside it.
    assert "warmstart.checks" in graph()["warmstart.problem"]
    assert "warmstart.node_os" not in graph()["warmstart.node_os.al2023"]
    # What ships is read from the constructs: the pruner's asset has the contracts and the shared log line.
    assert shipped_programs()["pruner.runtime"][0] == ("pruner.runtime", "contracts", "lambdas.log")


def test_no_import_cycle():
    assert cycles(graph()) == []


def test_no_import_cycle_even_through_type_only_imports():
    """A circle of `if TYPE_CHECKING:` imports ties modules as tightly in a reader's head: the node OS and preload
    mode objects read the config through Protocols of their own, never its classes."""
    assert cycles(graph(with_types=True)) == []


@pytest.mark.parametrize("module", [m for m in SOURCES if ".runtime" in m or m.startswith("contracts")])
def test_runtime_code_never_imports_cdk(module):
    reached = {name.split(".")[0] for name in imported(module)}
    assert not reached & set(INFRASTRUCTURE), module


def test_contracts_import_only_the_standard_library_and_pydantic():
    for module in [m for m in SOURCES if m.startswith("contracts")]:
        for name in imported(module):
            top = name.split(".")[0]
            assert top in sys.stdlib_module_names or top in ("__future__", "pydantic", "contracts"), (module, name)


@pytest.mark.parametrize("program", ["node_agent.runtime", "image_preload.runtime.gate", "pruner.runtime",
                                     "image_preload.runtime.snapshot"])  # fmt: skip
def test_each_program_shipped_alone_imports_only_what_ships_with_it(program):
    shipped, allowed = shipped_programs()[program]
    own = [m for m in SOURCES if m == program or m.startswith(program + ".")]
    assert own, program
    for module in reached(own):
        # The `__init__.py` of every package above what ships travels with it (construct_kit.source.only); what
        # it imports is followed like the rest.
        above = any(p.startswith(module + ".") for p in shipped)
        assert above or within(module, shipped), (program, module)
        if allowed is not None:
            assert third_party(module) <= allowed, (program, module, third_party(module))


def test_the_domain_package_imports_no_infrastructure():
    for module in [m for m in SOURCES if m.split(".")[0] == "warmstart"]:
        for name in imported(module):
            top = name.split(".")[0]
            assert top not in INFRASTRUCTURE, (module, name)
            # The domain runs no command and draws nothing: that is the operator's command line (warmstart_cli).
            assert top not in ("subprocess", "matplotlib", "argparse"), (module, name)


def test_the_entry_steps_record_names_are_the_contracts():
    """The entry step runs alone in the serving image (a ConfigMap), so it keeps a copy of the record's names."""
    from contracts import pod_record
    from model_workload.runtime import vllm_entry

    assert (vllm_entry.RECORD_FILE, vllm_entry.RECORD_VERSION) == (pod_record.RECORD_FILE, pod_record.RECORD_VERSION)


def test_no_module_outside_the_tests_is_over_500_lines():
    """A module that grows past this is two jobs: split it (the layout's "rooms of one job")."""
    assert {m: n for m, p in SOURCES.items() if (n := len(p.read_text().splitlines())) > 500} == {}


def test_every_import_runs_down_the_layers():
    """No shared module imports a component, the stacks or an entry point; the construct kit never imports the
    stacks that compose it; nothing imports an entry point. Type-only imports count: a type from above is a tie too."""
    wrong = []
    for module in SOURCES:
        for target in package_imports(module, with_types=True):
            same_package = target.split(".")[0] == module.split(".")[0]
            sideways = layer_of(target) == layer_of(module) and layer_of(module) == LAYERS.index(COMPONENTS)
            if not same_package and not sideways and layer_of(target) >= layer_of(module):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_the_layer_rule_is_read_from_the_imports():
    """The rule would pass over nothing: the stacks do import components, components the kit."""
    assert "construct_kit.nag" in package_imports("pruner.construct")
    assert (
        layer_of("stacks.compose")
        > layer_of("pruner.construct")
        > layer_of("construct_kit.nag")
        > layer_of("warmstart.config")
    )
    assert all(layer_of(s) < layer_of(c) for s in SHARED for c in COMPONENTS)
