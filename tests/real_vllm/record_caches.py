"""Records where a supported vLLM release's engine writes its caches into warmstart/vllm_releases/<version>.json
("caches"), and renders the inventory's table in docs/upstream-facts.md ("Engine caches").

    python -m tests.real_vllm.record_caches 0.34.0 [0.21.0 ...]

Read from the release's own packages in the real vLLM tier's environment (tests/real_vllm/read_caches.py): the
names vLLM's code joins under VLLM_CACHE_ROOT, the kernel libraries' versions, and each library's default cache
folder with HOME and TMPDIR set to markers (written back as $HOME and $TMPDIR, the user as <user>). record_facts.py
records the same section for a new release. tests/unit/test_engine_caches.py holds contracts/engine_caches.py to
every recorded release; the real vLLM tier reads the installed packages again and compares.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.real_vllm.environment import VllmEnvironment, environment, launcher_env
from tests.upstream.engine_caches_table import replace_section

READER = Path(__file__).resolve().with_name("read_caches.py")
RELEASES_DIR = Path(__file__).resolve().parents[2] / "warmstart" / "vllm_releases"
FACTS = Path(__file__).resolve().parents[2] / "docs" / "upstream-facts.md"


def read_caches(env: VllmEnvironment, scratch: Path, variables: dict[str, str] | None = None) -> dict:
    """The reader's document, run in the release's environment with HOME and TMPDIR in `scratch` (then
    `variables`, as a pod would have them)."""
    home, tmp = scratch / "home", scratch / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    given = scratch / "variables.json"
    given.write_text(json.dumps({"HOME": str(home), "TMPDIR": str(tmp), **(variables or {})}))
    done = subprocess.run(
        [str(env.python), str(READER), str(given)],
        capture_output=True,
        text=True,
        env=launcher_env(env, home=home),
        cwd=scratch,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("VLLM-CACHES ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"reading the caches failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(lines[-1].removeprefix("VLLM-CACHES "))


def defaults_section(read: dict, scratch: Path) -> dict:
    """The release's "caches" section: the markers written back as $HOME and $TMPDIR, the user as <user>."""

    def general(path: str | None) -> str | None:
        if path is None:
            return None
        for marker, word in ((scratch / "home", "$HOME"), (scratch / "tmp", "$TMPDIR")):
            if path == str(marker) or path.startswith(f"{marker}/"):
                path = word + path[len(str(marker)) :]
        return path.replace(f"/{read['user']}/", "/<user>/").replace(f"_{read['user']}", "_<user>")

    return {
        "vllm_cache_root": read["vllm_cache_root"],
        "libraries": read["libraries"],
        "defaults": [[name, general(path)] for name, path in read["folders"]],
    }


def recorded_caches(env: VllmEnvironment) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        return defaults_section(read_caches(env, Path(scratch)), Path(scratch))


def caches_source() -> str:
    """The release data file's `sources.caches`: what the section was read from, and when."""
    return (
        f"the installed wheel and its image's kernel libraries, read {datetime.date.today().isoformat()}: every "
        "module of vllm/ joining under VLLM_CACHE_ROOT, each library's cache folder from its own code "
        "(tests/real_vllm/read_caches.py)"
    )


def record(version: str) -> Path:
    env = environment(version)
    if not env.installed():
        raise SystemExit(f"vLLM {version}'s environment is not installed: make vllm-env")
    path = RELEASES_DIR / f"{version}.json"
    document = json.loads(path.read_text())
    document["caches"] = recorded_caches(env)
    document["sources"]["caches"] = caches_source()
    path.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    versions = (argv if argv is not None else sys.argv[1:]) or []
    if not versions:
        raise SystemExit("name the releases: python -m tests.real_vllm.record_caches 0.34.0 [...]")
    for version in versions:
        print(f"wrote {record(version)}")
    releases = {p.stem: json.loads(p.read_text()) for p in sorted(RELEASES_DIR.glob("*.json"))}
    FACTS.write_text(replace_section(FACTS.read_text(), releases))
    print(f"wrote {FACTS} (Engine caches)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
