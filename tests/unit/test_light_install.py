"""`make synth` installs requirements.txt only: everything synth and the command line reach must come from it (the
tests', benchmarks' and linters' tools are requirements-test.txt and requirements-lint.txt)."""

from __future__ import annotations

import importlib.util

from tests.import_graph import SOURCES, reached, third_party
from tests.synth import ROOT
from warmstart_cli.__main__ import main

# Import name -> distribution, for what synth and the command line import.
DISTRIBUTIONS = {
    "aws_cdk": "aws-cdk-lib",
    "constructs": "constructs",
    "cdk8s": "cdk8s",
    "cdk8s_plus_33": "cdk8s-plus-33",
    "cdk_nag": "cdk-nag",
    "jsii": "jsii",
    "pydantic": "pydantic",
    "yaml": "PyYAML",
    "grafana_foundation_sdk": "grafana-foundation-sdk",  # the dashboard dist/<env>/monitoring/ holds
}


def _synth_pins() -> set[str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return {line.split("==")[0].lower() for line in lines if "==" in line and not line.startswith("#")}


def test_synth_and_the_command_line_import_only_what_requirements_txt_installs():
    # Less estimate_plot: it imports matplotlib only when `plan --plot` asks, which says how to get it.
    # The node OS and preload-mode modules are loaded by discovery (by name), which the import graph cannot see.
    discovered = [m for m in SOURCES if m.startswith(("warmstart.node_os.", "warmstart.preload_modes."))]
    modules = reached(["app", "warmstart_cli.__main__", "render", *discovered]) - {"warmstart_cli.estimate_plot"}
    imported = set().union(*(third_party(module) for module in modules))
    assert imported <= set(DISTRIBUTIONS), imported - set(DISTRIBUTIONS)
    assert {DISTRIBUTIONS[name].lower() for name in imported} <= _synth_pins()
    assert "torch" not in (ROOT / "requirements.txt").read_text() and "pytest" not in _synth_pins()


def test_plan_plot_without_matplotlib_says_how_to_get_it(capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    monkeypatch.chdir(ROOT)
    assert main(["plan", "--env", "dev", "--estimate", "--plot", "start.png"]) == 2
    assert "requirements-runtime.txt" in capsys.readouterr().err


def test_no_package_is_pinned_at_two_versions():
    pins: dict[str, set[str]] = {}
    for name in ("requirements.txt", "requirements-runtime.txt", "requirements-test.txt", "requirements-lint.txt"):
        for line in (ROOT / name).read_text().splitlines():
            if "==" in line and not line.startswith("#"):
                package, version = line.split("==")
                pins.setdefault(package.lower().replace("_", "-"), set()).add(version.strip())
    assert {package: versions for package, versions in pins.items() if len(versions) > 1} == {}
