"""Records one vLLM release's facts from its own packages into warmstart/vllm_releases/<version>.json, and the real
vLLM tier's lock for it (tests/real_vllm/locks/vllm-<version>.txt) when there is none yet.

    python -m tests.real_vllm.record_facts 0.34.0 [--override flashinfer-python==0.7.4 ...]

Adding a supported vLLM release is this command and the two files it writes (docs/vllm-workload.md, "Supported
vLLM releases").
Nothing is typed in; each fact is read from its source:
- PyPI's release list (the simple JSON API): the wheel and sdist, their upload times (the release date), the Run:ai
  Model Streamer releases and theirs;
- the sdist's `docker/Dockerfile`: the `vllm-openai` image's ENV and ENTRYPOINT, and the streamer requirement it
  installs (tests/real_vllm/dockerfile.py); the streamer in the image is the newest release that meets it on the
  day the release was published;
- the wheel's metadata (`Requires-Dist`): the torch pin and the streamer minimum of vLLM's `runai` extra;
- vLLM itself, installed into the tier's environment for that release: the variables it knows and hashes, how it
  parses each, the compile folder's naming, AOT defaults, the CLI (tests/real_vllm/read_release.py), and where its
  engine writes its caches (tests/real_vllm/read_caches.py; then run record_caches to render docs/upstream-facts.md).
The lock is resolved with uv (`uv pip compile`, the tier installs it with `--no-deps`); `--override` replaces a pin
vLLM names that PyPI does not serve (0.34.0 pins flashinfer-python 0.7.3, which PyPI never had), and the lock's
header says so.
"""

from __future__ import annotations

import argparse
import datetime
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
import venv
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from tests.real_vllm import dockerfile
from tests.real_vllm.environment import LOCKS, VllmEnvironment, cache_dir, install, launcher_env
from tests.real_vllm.image import gpu_facts
from tests.real_vllm.record_caches import caches_source, recorded_caches
from warmstart.catalog import default_catalog

# warmstart/vllm_releases/ (warmstart.vllm_release reads it; not imported here, so that the first release can be
# recorded into an empty folder).
RELEASES_DIR = Path(__file__).resolve().parents[2] / "warmstart" / "vllm_releases"

SIMPLE = "https://pypi.org/simple/{}/"
READER = Path(__file__).resolve().with_name("read_release.py")
# The GPU the reader's platform reports (some getters read the platform): a p5's H100.
READER_INSTANCE = "p5.48xlarge"
UV = "uv==0.13.9"
BASE_EXTENDED = ("PATH", "LD_LIBRARY_PATH")
LINUX_X86 = re.compile(r"manylinux_\d+_\d+_x86_64")


def release_files(package: str) -> list[dict]:
    request = urllib.request.Request(SIMPLE.format(package), headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - PyPI's fixed https address
        return json.load(answer)["files"]


def vllm_files(version: str) -> tuple[dict, dict]:
    """(the Linux x86_64 wheel pip would pick, the sdist) of a vLLM release."""
    files = release_files("vllm")
    wheels = [
        f
        for f in files
        if f["filename"].endswith(".whl")
        and parse_wheel_filename(f["filename"])[1] == Version(version)
        and LINUX_X86.search(f["filename"])
    ]
    sdists = [f for f in files if f["filename"] == f"vllm-{version}.tar.gz"]
    if not wheels or not sdists:
        raise SystemExit(f"PyPI has no Linux x86_64 wheel and sdist of vllm {version}")
    # pip prefers the highest build tag (vllm-0.21.0-1-... over vllm-0.21.0-...).
    wheel = max(wheels, key=lambda f: parse_wheel_filename(f["filename"])[2])
    return wheel, sdists[0]


def image_streamer(spec: str, published: str) -> str:
    """The newest runai-model-streamer release meeting the image's requirement on the day vLLM was published."""
    specifier = SpecifierSet(spec)
    first_upload: dict[Version, str] = {}
    for f in release_files("runai-model-streamer"):
        version = Version(f["filename"].split("-")[1].removesuffix(".tar.gz"))
        first_upload[version] = min(first_upload.get(version, f["upload-time"]), f["upload-time"])
    released = [v for v, at in first_upload.items() if at <= published and v in specifier and not v.is_prerelease]
    if not released:
        raise SystemExit(f"no runai-model-streamer release meets {spec} by {published}")
    return str(max(released))


def read_dockerfile(sdist: dict, version: str) -> str:
    with urllib.request.urlopen(sdist["url"], timeout=300) as answer:  # noqa: S310 - PyPI's https address
        data = answer.read()
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        member = archive.extractfile(f"vllm-{version}/docker/Dockerfile")
        if member is None:
            raise SystemExit(f"vllm {version}'s sdist has no docker/Dockerfile")
        return member.read().decode()


def write_lock(version: str, streamer: str, overrides: list[str], published: str) -> Path:
    """The tier's lock for `version`: vLLM and everything it resolves to, with the image's streamer, via uv."""
    lock = LOCKS / f"vllm-{version}.txt"
    tools = cache_dir() / "tools-uv"
    if not (tools / "bin" / "uv").exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(tools)
        subprocess.run([str(tools / "bin" / "python"), "-m", "pip", "install", "--quiet", UV], check=True)
    with tempfile.TemporaryDirectory() as scratch:
        wanted = Path(scratch, "in.txt")
        wanted.write_text(f"vllm=={version}\nrunai-model-streamer[s3]=={streamer}\n")
        override = Path(scratch, "override.txt")
        override.write_text("".join(f"{o}\n" for o in overrides))
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
                "x86_64-manylinux_2_28",
                "--no-header",
                "--no-annotate",
                "--quiet",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
    note = f"# with {', '.join(overrides)} in place of vLLM's own pin (PyPI does not serve it)\n" if overrides else ""
    header = (
        f"# The real vLLM tier's environment for vLLM {version} (make test-vllm): what the serving image\n"
        f"# vllm/vllm-openai:v{version} runs, without a GPU. vLLM and everything it resolves to (uv pip compile,\n"
        f"# {datetime.date.today().isoformat()}), with the Run:ai Model Streamer the image ships: {streamer}\n"
        f"# (the newest release its Dockerfile's requirement admits on {published[:10]}).\n{note}"
        "# Written by python -m tests.real_vllm.record_facts; tests/real_vllm/environment.py installs it --no-deps.\n"
    )
    lock.write_text(header + compiled.stdout)
    return lock


def read_vllm(env: VllmEnvironment, scratch: Path) -> dict:
    return _run_reader(env, scratch, "VLLM-RELEASE ")


def evaluate_values(env: VllmEnvironment, scratch: Path, pairs: list[tuple[str, str]]) -> list[dict]:
    """Each (variable, value) through the installed release's own getter (tests/real_vllm/read_release.py)."""
    values = scratch / "values.json"
    values.write_text(json.dumps([list(pair) for pair in pairs]))
    return _run_reader(env, scratch, "VLLM-VALUES ", values)


def _run_reader(env: VllmEnvironment, scratch: Path, prefix: str, *extra: Path):
    gpu = scratch / "gpu.json"
    gpu.write_text(json.dumps(gpu_facts(default_catalog().instance(READER_INSTANCE))))
    done = subprocess.run(
        [str(env.python), str(READER), str(gpu), *map(str, extra)],
        capture_output=True,
        text=True,
        env=launcher_env(env, home=scratch),
        timeout=900,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(prefix)]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"reading vLLM failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(lines[-1].removeprefix(prefix))


def requirement(metadata: list[str], name: str, extra: str | None = None) -> str:
    """The version part of a Requires-Dist line of the wheel (its extra's, when named)."""
    for line in metadata:
        requirement, _, marker = line.partition(";")
        if not re.match(rf"{re.escape(name)}(\[[^\]]*\])?\s*[=<>!~]", requirement.strip()):
            continue
        if (extra is None) == ("extra ==" not in marker) and (extra is None or f'"{extra}"' in marker):
            return re.sub(rf"^{re.escape(name)}(\[[^\]]*\])?", "", requirement.strip())
    raise SystemExit(f"the wheel's metadata names no {name} requirement" + (f" in extra {extra}" if extra else ""))


def record(version: str, overrides: list[str]) -> Path:
    wheel, sdist = vllm_files(version)
    text = read_dockerfile(sdist, version)
    image = dockerfile.image_config(text, "vllm-openai")
    spec = dockerfile.arg_default(text, "RUNAI_MODEL_STREAMER_VERSION")
    if spec is None:
        raise SystemExit("the Dockerfile has no RUNAI_MODEL_STREAMER_VERSION")
    published = sdist["upload-time"]
    streamer = image_streamer(spec, published)
    if not (LOCKS / f"vllm-{version}.txt").exists():
        write_lock(version, streamer, overrides, published)
    env = install(version)
    with tempfile.TemporaryDirectory() as scratch:
        read = read_vllm(env, Path(scratch))
    if read["vllm"] != version:
        raise SystemExit(f"the tier's environment runs vLLM {read['vllm']}, not {version}")
    metadata = read.pop("requires")
    torch = requirement(metadata, "torch")
    document = {
        "vllm": version,
        "recorded": datetime.date.today().isoformat(),
        "released": published[:10],
        "sources": {
            "wheel": f"{wheel['filename']} (PyPI, uploaded {wheel['upload-time']})",
            "sdist": f"{sdist['filename']} (PyPI, uploaded {published}): docker/Dockerfile, target vllm-openai",
            "vllm": "the installed wheel: vllm/envs.py, vllm/config, vllm/compilation/backends.py, "
            "vllm/entrypoints (tests/real_vllm/read_release.py)",
        },
        "torch": torch.removeprefix("=="),
        "streamer_minimum": requirement(metadata, "runai-model-streamer", "runai").removeprefix(">="),
        "image": {
            "reference": f"vllm/vllm-openai:v{version}",
            "entrypoint": image["entrypoint"],
            # PATH and LD_LIBRARY_PATH extend the CUDA base image's own, which the Dockerfile does not hold.
            "env": {k: v for k, v in image["env"].items() if k not in BASE_EXTENDED},
            "streamer": streamer,
            "streamer_requirement": spec,
        },
        **read,
        # Where its engine writes its caches (tests/real_vllm/record_caches.py; the inventory must name each).
        "caches": recorded_caches(env),
    }
    document["sources"]["caches"] = caches_source()
    path = RELEASES_DIR / f"{version}.json"
    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version")
    parser.add_argument("--override", action="append", default=[], help="a pin replacing one vLLM names (pkg==ver)")
    args = parser.parse_args(argv)
    print(f"wrote {record(args.version, args.override)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
