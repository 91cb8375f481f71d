"""The builder's pull script, run as SSM's AWS-RunShellScript runs it (the `commands` written to a file and run
by sh), against a stand-in `apiclient` on PATH.

The stand-in mirrors what the script relies on: Bottlerocket's `apiclient exec admin sheltie <command>` runs the
command as root on the host; the host's `ctr` (containerd 2.x) refuses a reference without a registry host (it
does not normalize docker.io/library as the CRI plugin does), records the labels it is given, and lists image
references with `images ls -q`."""

import json
import os
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.synth import ROOT
from warmstart.image_preload import builder_commands

SCRIPT = (ROOT / "image_preload" / "runtime" / "snapshot" / "pull-images.sh").read_text()

FAKE_APICLIENT = textwrap.dedent("""\
    #!/usr/bin/env python3
    import json, os, sys
    state_file = os.environ["FAKE_STATE"]
    state = json.load(open(state_file))
    args = sys.argv[1:]
    state["calls"].append(args)
    def save():
        json.dump(state, open(state_file, "w"))
    if args[:3] != ["exec", "admin", "sheltie"]:
        save(); sys.exit("apiclient: unsupported invocation")
    command = args[3:]
    if command in (["systemctl", "stop", "kubelet"], ["sync"]):
        save(); sys.exit(0)
    if command[:5] == ["ctr", "-a", "/run/containerd/containerd.sock", "-n", "k8s.io"]:
        rest = command[5:]
        if rest == ["images", "ls", "-q"]:
            print("\\n".join(state["listed"] if state["listed"] is not None else state["pulled"]))
            save(); sys.exit(0)
        if rest[:2] == ["images", "pull"]:
            ref = rest[-1]
            if "." not in ref.split("/")[0]:
                save(); sys.exit(f"ctr: failed to resolve reference {ref!r}: object required")
            if "--label" not in rest or rest[rest.index("--label") + 1] != "io.cri-containerd.image=managed":
                save(); sys.exit("test: pulled without the CRI label")
            failures = state["fail"].get(ref, 0)
            if failures:
                state["fail"][ref] = failures - 1
                save(); sys.exit(f"ctr: {ref}: 503 Service Unavailable")
            state["pulled"].append(ref)
            save(); sys.exit(0)
    save(); sys.exit(f"unexpected: {command}")
""")


def run(
    tmp_path: Path, images: list[str], *, fail=None, listed=None, retries="3"
) -> tuple[subprocess.CompletedProcess, dict]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "apiclient"
    fake.write_text(FAKE_APICLIENT)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"calls": [], "pulled": [], "fail": fail or {}, "listed": listed}))
    script = tmp_path / "_script.sh"  # what the SSM agent writes and runs
    script.write_text("\n".join(builder_commands(images, SCRIPT) if images else ["set --", *SCRIPT.splitlines()]))
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_STATE": str(state),
        "BACKOFF_SECONDS": "0",
        "RETRIES": retries,
    }
    result = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=60)
    return result, json.loads(state.read_text())


def test_every_image_is_pulled_into_the_kubelets_namespace_with_the_cri_label(tmp_path):
    result, state = run(tmp_path, ["vllm/vllm-openai:v0.21.0", "registry.k8s.io/pause:3.10"])
    assert result.returncode == 0, result.stderr
    assert state["pulled"] == ["docker.io/vllm/vllm-openai:v0.21.0", "registry.k8s.io/pause:3.10"]
    assert state["calls"][0] == ["exec", "admin", "sheltie", "systemctl", "stop", "kubelet"]
    pull = state["calls"][1]
    assert pull[pull.index("--platform") + 1] == "linux/amd64"
    assert state["calls"][-1] == ["exec", "admin", "sheltie", "sync"]


def test_a_failing_pull_is_retried(tmp_path):
    result, state = run(tmp_path, ["vllm/vllm-openai:v0.21.0"], fail={"docker.io/vllm/vllm-openai:v0.21.0": 2})
    assert result.returncode == 0, result.stderr
    assert "attempt 3" in result.stdout


def test_a_pull_that_keeps_failing_fails_the_build_and_stops_there(tmp_path):
    result, state = run(
        tmp_path,
        ["vllm/vllm-openai:v0.21.0", "registry.k8s.io/pause:3.10"],
        fail={"docker.io/vllm/vllm-openai:v0.21.0": 5},
    )
    assert result.returncode == 1
    assert "failed 3 times" in result.stderr
    assert state["pulled"] == []  # the later image is not pulled: the build fails, no snapshot is taken


def test_an_image_missing_from_the_store_after_pulling_fails_the_build(tmp_path):
    result, _ = run(tmp_path, ["vllm/vllm-openai:v0.21.0"], listed=["docker.io/vllm/vllm-openai:v0.20.0"])
    assert result.returncode == 1
    assert "is not in the k8s.io namespace" in result.stderr


@pytest.mark.parametrize(
    "images, retries", [([], "3"), (["vllm/vllm-openai:v0.21.0"], "0"), (["vllm/vllm-openai:v0.21.0"], "two")]
)
def test_bad_arguments_stop_before_anything_is_pulled(tmp_path, images, retries):
    result, state = run(tmp_path, images, retries=retries)
    assert result.returncode == 64
    assert state["calls"] == []


def test_without_the_qualification_ctr_would_refuse_the_reference(tmp_path):
    # The stand-in refuses what ctr refuses: the builder must pass docker.io/... itself.
    (tmp_path / "raw").mkdir()
    result, state = run(tmp_path / "raw", ["registry.k8s.io/pause:3.10"])
    assert result.returncode == 0
    script = tmp_path / "unqualified.sh"
    script.write_text("\n".join(["set -- vllm/vllm-openai:v0.21.0", *SCRIPT.splitlines()]))
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'raw' / 'bin'}:{os.environ['PATH']}",
        "FAKE_STATE": str(tmp_path / "raw" / "state.json"),
        "BACKOFF_SECONDS": "0",
        "RETRIES": "1",
    }
    refused = subprocess.run(["sh", str(script)], capture_output=True, text=True, env=env, timeout=60)
    assert refused.returncode == 1 and "object required" in refused.stderr
