"""The real vLLM tier's environment: the pinned vLLM, installed once outside the repository and reused.

`python -m tests.real_vllm.environment install` (make vllm-env) creates it; the tests only find it. It lives in
`$WARMSTART_CACHE_DIR` (default `~/.cache/warmstart`) under a folder named after the vLLM version and a digest of
tests/real_vllm/requirements.txt, so a changed pin installs beside the old one and never mixes with it. About 8 GB
and a few minutes the first time (PyTorch with its CUDA libraries, which run on the CPU here).

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
REQUIREMENTS = HERE / "requirements.txt"
CUDA_ERROR_NO_DEVICE = 100
# Entry points PyTorch's CUDA runtime looks up while it probes for a device, besides the ones vLLM's own
# compiled modules name (those are read from the installed wheel, so a new vLLM needs no edit here).
DRIVER_PROBE_SYMBOLS = ("cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuGetProcAddress")


def pinned_version(package: str) -> str:
    for line in REQUIREMENTS.read_text().splitlines():
        name, _, version = line.partition("==")
        if name.strip().lower() == package:
            return version.strip()
    raise KeyError(f"{package} is not pinned in {REQUIREMENTS}")


def cache_dir() -> Path:
    return Path(os.environ.get("WARMSTART_CACHE_DIR") or Path.home() / ".cache" / "warmstart")


@dataclass(frozen=True)
class VllmEnvironment:
    root: Path

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
        return self.marker.is_file() and self.marker.read_text() == _digest()


def _digest() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def environment() -> VllmEnvironment:
    return VllmEnvironment(cache_dir() / f"vllm-{pinned_version('vllm')}-{_digest()[:12]}")


def install(env: VllmEnvironment | None = None) -> VllmEnvironment:
    env = env or environment()
    if env.installed():
        print(f"vLLM environment ready: {env.root}")
        return env
    print(f"installing vLLM {pinned_version('vllm')} into {env.root} (about 8 GB, a few minutes the first time)")
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
            "-r",
            str(REQUIREMENTS),
        ],
        check=True,
    )
    env.marker.write_text(_digest())
    return env


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
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["install", "path"])
    args = parser.parse_args(argv)
    if args.command == "install":
        build_driver_stub(install())
    else:
        print(environment().root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
