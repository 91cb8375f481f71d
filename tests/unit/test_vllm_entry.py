"""The vLLM container's entry step: records first, the node copy only when fresh, arguments never changed."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from contracts.file_identity import record_identities
from model_workload.runtime import vllm_entry
from model_workload.runtime.node_copy_loader import current_boot_id
from model_workload.runtime.vllm_entry import choose_weights, prepare, vllm_hash_dirs
from node_agent.runtime.pod_records import PodRecords

S3 = "s3://models/llama/"
# What warmstart renders: `vllm serve <model> ...` (the model first, as vLLM's CLI takes it).
ARGS = ["vllm", "serve", S3, "--served-model-name=llama", "--load-format=runai_streamer"]
NOW = 1_800_000_000.0
ENTRY = Path(__file__).resolve().parents[2] / "model_workload" / "runtime" / "vllm_entry.py"


KEY = "0123456789abcdef"  # a weights key (16 hex digits)
UID = "5c1e8a52-3f0d-4b7e-9a61-0d2c4e6f8a10"


def mark(copy: Path) -> None:
    """The agent's completion marker of `copy`: what it verified, file by file."""
    files = [p for p in copy.rglob("*") if p.is_file()]
    document = {"key": copy.name, "files": len(files), "bytes": sum(p.stat().st_size for p in files)}
    copy.with_name(f"{copy.name}.complete").write_text(
        json.dumps({**document, "identity": record_identities(str(copy))})
    )


def node(tmp_path: Path, *, key=KEY, s3_uri=S3, checked_at=NOW - 10, complete=True) -> Path:
    root = tmp_path / "weights"
    (root / "llama" / key).mkdir(parents=True)
    config = '{"architectures": ["LlamaForCausalLM"]}'
    (root / "llama" / key / "config.json").write_text(config)
    if complete:  # as the agent writes it: what it verified
        mark(root / "llama" / key)
    pointer = root / ".warmstart" / "current" / "llama"
    pointer.parent.mkdir(parents=True)
    pointer.write_text(json.dumps({"key": key, "s3_uri": s3_uri, "checked_at": checked_at}))  # NaN as JSON NaN
    return root


def test_without_a_pointer_the_pod_streams_from_s3(tmp_path):
    choice = choose_weights("llama", S3, tmp_path / "empty", 90, NOW)
    assert choice.source == "s3" and "streaming from s3://models/llama/" in choice.reason


def test_with_a_fresh_complete_copy_the_pod_serves_it(tmp_path):
    choice = choose_weights("llama", S3, node(tmp_path), 90, NOW)
    assert (choice.source, choice.key) == ("node", KEY)


def test_a_copy_the_agent_had_not_synced_before_the_node_restarted_means_s3(tmp_path):
    root = node(tmp_path)
    complete = root / "llama" / f"{KEY}.complete"
    published = root / "llama" / f"{KEY}.published"
    document = json.loads(complete.read_text())
    complete.unlink()
    published.write_text(json.dumps({**document, "boot_id": current_boot_id()}))
    assert choose_weights("llama", S3, root, 90, NOW).source == "node"  # this boot's page cache holds it
    published.write_text(json.dumps({**document, "boot_id": "an-earlier-boot"}))
    choice = choose_weights("llama", S3, root, 90, NOW)
    assert choice.source == "s3" and "not on disk when the node restarted" in choice.reason


@pytest.mark.parametrize(
    "pointer, reason",
    [
        ({"checked_at": NOW - 600}, "not confirmed"),
        ({"checked_at": NOW + 3600}, "in the future"),  # the node clock stepped back after the check
        ({"s3_uri": "s3://models/old-llama/"}, "another S3 source"),
        ({"complete": False}, "incomplete"),
        ({"key": "../../etc"}, "incomplete"),
        ({"key": ".warmstart"}, "incomplete"),
        ({"key": "abc123"}, "incomplete"),  # not of the weights-key form
        ({"checked_at": float("nan")}, "no check time"),  # a NaN time is no time, never fresh
        ({"checked_at": True}, "no check time"),
        ({"checked_at": "1800000000"}, "no check time"),
    ],
)
def test_anything_but_a_fresh_complete_copy_of_this_source_means_s3(tmp_path, pointer, reason):
    choice = choose_weights("llama", S3, node(tmp_path, **pointer), 90, NOW)
    assert choice.source == "s3" and reason in choice.reason


def test_a_pointer_that_is_a_link_a_fifo_or_too_large_is_no_pointer(tmp_path):
    root = node(tmp_path)
    pointer = root / ".warmstart" / "current" / "llama"
    pointer.unlink()
    pointer.symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_text(json.dumps({"key": KEY, "s3_uri": S3, "checked_at": NOW}))
    assert choose_weights("llama", S3, root, 90, NOW).source == "s3"
    pointer.unlink()
    os.mkfifo(pointer)
    assert choose_weights("llama", S3, root, 90, NOW).source == "s3"  # and it did not block
    pointer.unlink()
    pointer.write_text(json.dumps({"key": KEY, "s3_uri": S3, "checked_at": NOW, "pad": "x" * 70_000}))
    assert choose_weights("llama", S3, root, 90, NOW).source == "s3"


def _env(tmp_path, **extra) -> dict:
    return {
        "WARMSTART_POD_RECORDS": str(tmp_path / "pods" / UID),  # the pod's own folder, as kubelet mounts it
        "VLLM_CACHE_ROOT": str(tmp_path / "cache" / "vllm"),
        "WARMSTART_FINGERPRINT": "f" * 16,
        **extra,
    }


def test_the_pod_records_that_it_is_choosing_before_it_reads_the_pointer(tmp_path, monkeypatch):
    seen = {}

    def watching(*args):
        seen["record"] = PodRecords(tmp_path / "pods").read()[UID]
        return choose(*args)

    choose = vllm_entry.choose_weights
    monkeypatch.setattr(vllm_entry, "choose_weights", watching)
    env = _env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(node(tmp_path)))
    monkeypatch.setattr(vllm_entry, "start_node_copy_endpoint", lambda *a: "http://127.0.0.1:9")
    prepare(ARGS, env, NOW)
    assert seen["record"].phase == "choosing" and seen["record"].may_read("llama", "any-key")
    final = PodRecords(tmp_path / "pods").read()[UID]
    assert (final.phase, final.weights_source, final.weights_key) == ("started", "node", KEY)
    assert final.may_read("llama", KEY) and not final.may_read("llama", "other")


def test_the_node_copy_changes_the_endpoint_never_the_arguments(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_entry, "start_node_copy_endpoint", lambda *a: "http://127.0.0.1:4567")
    env, choice, record = prepare(ARGS, _env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(node(tmp_path))), NOW)
    assert choice.source == "node"
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:4567"
    assert env["RUNAI_STREAMER_S3_UNSIGNED"] == "1" and env["RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING"] == "0"
    streaming, _, _ = prepare(ARGS, _env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(tmp_path / "none")), NOW)
    assert "AWS_ENDPOINT_URL" not in streaming


def test_the_node_copy_puts_vllms_plugin_on_the_path_and_names_the_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_entry, "start_node_copy_endpoint", lambda *a: "http://127.0.0.1:4567")
    root = node(tmp_path)
    env, choice, _ = prepare(ARGS, _env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(root), PYTHONPATH="/image/lib"), NOW)
    assert env["PYTHONPATH"] == f"/image/lib{os.pathsep}{ENTRY.parent}"  # the image's own path kept, first
    assert env["WARMSTART_NODE_COPY_DIR"] == str(root / "llama" / KEY)
    assert env["WARMSTART_NODE_COPY_MODEL"] == S3
    assert choice.reason.endswith("the streamer reads the weight files as local files")
    alone, _, _ = prepare(ARGS, _env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(root)), NOW)
    assert alone["PYTHONPATH"] == str(ENTRY.parent)
    streaming, _, _ = prepare(ARGS, _env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(tmp_path / "none")), NOW)
    assert not {"PYTHONPATH", "WARMSTART_NODE_COPY_DIR", "WARMSTART_NODE_COPY_MODEL"} & set(streaming)


def test_a_plugin_list_without_ours_is_said_the_endpoint_still_serves(tmp_path, monkeypatch):
    monkeypatch.setattr(vllm_entry, "start_node_copy_endpoint", lambda *a: "http://127.0.0.1:4567")
    env = _env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(node(tmp_path)), VLLM_PLUGINS="lora_resolver")
    new_env, choice, _ = prepare(ARGS, env, NOW)
    assert choice.source == "node" and new_env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:4567"
    assert "VLLM_PLUGINS leaves out" in choice.reason and new_env["VLLM_PLUGINS"] == "lora_resolver"
    listed = _env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(node(tmp_path / "again")), VLLM_PLUGINS="x,warmstart_node_copy")
    assert prepare(ARGS, listed, NOW)[1].reason.endswith("as local files")


def test_without_the_plugins_dist_info_beside_the_script_the_endpoint_is_said(tmp_path, monkeypatch):
    """A pod of a spec from before the plugin (no items, no dist-info) restarted on a node with a copy."""
    monkeypatch.setattr(vllm_entry, "start_node_copy_endpoint", lambda *a: "http://127.0.0.1:4567")
    monkeypatch.setattr(vllm_entry, "ENTRY_FOLDER", str(tmp_path / "entry-without-dist-info"))
    _, choice, _ = prepare(ARGS, _env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(node(tmp_path))), NOW)
    assert choice.source == "node" and "no plugin dist-info beside the entry step" in choice.reason


def test_a_failing_endpoint_falls_back_to_s3(tmp_path, monkeypatch):
    def broken(*args):
        raise OSError("address in use")

    monkeypatch.setattr(vllm_entry, "start_node_copy_endpoint", broken)
    env, choice, record = prepare(ARGS, _env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(node(tmp_path))), NOW)
    assert choice.source == "s3" and "address in use" in choice.reason and "AWS_ENDPOINT_URL" not in env
    assert record["weights"]["source"] == "s3"


def test_a_model_without_a_weights_cache_is_recorded_as_streaming_from_s3(tmp_path):
    """So the agent holds its downloads back for this pod too."""
    _, choice, record = prepare(ARGS, _env(tmp_path), NOW)
    assert choice.source == "s3" and record["weights"]["source"] == "s3"


def test_the_record_lists_the_compile_folders_present_at_start(tmp_path):
    cache = tmp_path / "cache" / "vllm" / "torch_compile_cache"
    for folder in ("0123456789/rank_0_0", "torch_aot_compile/" + "a" * 64 + "/rank_0_0"):
        (cache / folder).mkdir(parents=True)
    _, _, record = prepare(ARGS, _env(tmp_path), NOW)
    assert record["compile"] == {
        "fingerprint": "f" * 16,
        "hash_dirs": ["torch_compile_cache/0123456789", "torch_compile_cache/torch_aot_compile/" + "a" * 64],
    }
    assert vllm_hash_dirs(tmp_path / "nowhere") == []


def _mounted_entry(tmp_path: Path) -> Path:
    """The ConfigMap's files at their mounted paths (the volume's items): the script as the container runs it."""
    from model_workload.pod_spec import ENTRY_FILES

    mount = tmp_path / "warmstart-entry"
    for name, source in ENTRY_FILES.items():
        (mount / name).parent.mkdir(parents=True, exist_ok=True)
        (mount / name).write_text(source.read_text())
    return mount / "vllm_entry.py"


def _free_port_closed(endpoint: str) -> bool:
    host, port = endpoint.removeprefix("http://").split(":")
    with socket.socket() as probe:
        return probe.connect_ex((host, int(port))) != 0


def test_the_script_serves_the_copy_to_the_command_it_execs_and_stops_with_it(tmp_path):
    """The real script, as the container runs it: the exec'd program reads through the endpoint."""
    root = node(tmp_path, checked_at=time.time())
    program = (
        "import os, boto3, botocore.config as c; "
        "s3 = boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT_URL'], region_name='us-east-1', "
        "config=c.Config(signature_version=__import__('botocore').UNSIGNED, s3={'addressing_style': 'path'})); "
        "print(os.environ['AWS_ENDPOINT_URL']); "
        "print(s3.get_object(Bucket='models', Key='llama/config.json')['Body'].read().decode())"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(_mounted_entry(tmp_path)),
            sys.executable,
            "-c",
            program,
            f"--model={S3}",
            "--served-model-name=llama",
        ],
        env={**os.environ, **_env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(root))},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("warmstart: serving s3://models/llama/ from the node-local copy")
    assert lines[2] == '{"architectures": ["LlamaForCausalLM"]}'
    deadline = time.monotonic() + 10
    while not _free_port_closed(lines[1]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _free_port_closed(lines[1])  # the endpoint died with the program


def test_the_script_execs_the_command_unchanged_without_a_copy(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(_mounted_entry(tmp_path)),
            sys.executable,
            "-c",
            "import sys; print(sys.argv[1:])",
            f"--model={S3}",
            "--served-model-name=llama",
        ],
        env={"PATH": os.environ["PATH"], "WARMSTART_WEIGHTS_ROOT": str(tmp_path / "none")},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "warmstart: no local copy of llama" in done.stdout
    assert f"['--model={S3}', '--served-model-name=llama']" in done.stdout


def test_the_script_execs_a_program_that_finds_vllms_plugin_and_the_copys_files(tmp_path):
    """The ConfigMap's files at their mounted paths (the volume's items), the real script: the program it execs
    finds the plugin as vLLM does (an entry point of group vllm.general_plugins) and lists the copy's files."""
    entry = _mounted_entry(tmp_path)
    root = node(tmp_path, checked_at=time.time())
    weights = root / "llama" / KEY / "model.safetensors"
    weights.write_bytes(b"w" * 10)
    mark(root / "llama" / KEY)
    program = (
        "import importlib, importlib.metadata as m, os; "
        "(p,) = [e for e in m.entry_points(group='vllm.general_plugins') if e.name == 'warmstart_node_copy']; "
        "p.load(); plugin = importlib.import_module(p.module); "
        "print(p.value); print(plugin.node_copy_files(os.environ['WARMSTART_NODE_COPY_MODEL'], os.environ))"
    )
    done = subprocess.run(
        [
            sys.executable,
            str(entry),
            sys.executable,
            "-c",
            program,
            f"--model={S3}",
            "--served-model-name=llama",
        ],
        env={
            **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
            **_env(tmp_path, WARMSTART_WEIGHTS_ROOT=str(root)),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("the streamer reads the weight files as local files"), lines
    assert lines[1:] == ["node_copy_loader:register", str([str(weights)])]


@pytest.mark.parametrize(
    "args",
    [
        ["vllm", "serve", S3, "--served-model-name=llama"],
        ["python3", "-m", "vllm.entrypoints.openai.api_server", f"--model={S3}", "--served-model-name=llama"],
        ["vllm", "serve", "--served-model-name=llama", f"--model={S3}"],  # serve with --model (0.34.0 warns)
    ],
)
def test_the_entry_step_finds_the_model_in_either_form_vllm_takes(args, tmp_path):
    """`vllm serve <model>` (vllm/entrypoints/cli/serve.py: the positional model wins) and `--model=`."""
    env = {"WARMSTART_WEIGHTS_ROOT": str(node(tmp_path)), "WARMSTART_WEIGHTS_MAX_AGE": "90"}
    _, choice, record = prepare(args, env, NOW)
    assert choice is not None and record["model"] == "llama"
    assert choice.source == "node" or "endpoint failed" in choice.reason, choice
