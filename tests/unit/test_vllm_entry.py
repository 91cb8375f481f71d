"""The vLLM container's entry step: node-local weights only when fresh, complete and of this source."""

import json
import subprocess
import sys
from pathlib import Path

from agent.vllm_entry import choose_model

S3 = "s3://models/llama/"
ARGS = ["python3", "-m", "vllm.entrypoints.openai.api_server", f"--model={S3}", "--served-model-name=llama",
        "--load-format=runai_streamer"]
NOW = 1_800_000_000.0


def node(tmp_path: Path, *, key="abc123", s3_uri=S3, checked_at=NOW - 10, complete=True) -> Path:
    root = tmp_path / "weights"
    (root / "llama" / key).mkdir(parents=True)
    if complete:
        (root / "llama" / f"{key}.complete").write_text("{}")
    pointer = root / ".warmstart" / "current" / "llama"
    pointer.parent.mkdir(parents=True)
    pointer.write_text(json.dumps({"key": key, "s3_uri": s3_uri, "checked_at": checked_at}))
    return root


def test_without_a_marker_the_pod_streams_from_s3(tmp_path):
    args, reason = choose_model(ARGS, tmp_path / "empty", 90, NOW)
    assert args == ARGS and "streaming from s3://models/llama/" in reason


def test_with_a_fresh_complete_copy_the_pod_uses_the_local_path(tmp_path):
    root = node(tmp_path)
    args, reason = choose_model(ARGS, root, 90, NOW)
    assert f"--model={root / 'llama' / 'abc123'}" in args
    assert args[:3] == ARGS[:3] and "--served-model-name=llama" in args and "--load-format=runai_streamer" in args
    assert "node-local copy" in reason


def test_a_stale_pointer_falls_back_to_s3(tmp_path):
    args, reason = choose_model(ARGS, node(tmp_path, checked_at=NOW - 600), 90, NOW)
    assert args == ARGS and "not confirmed" in reason


def test_a_copy_of_another_source_falls_back_to_s3(tmp_path):
    args, reason = choose_model(ARGS, node(tmp_path, s3_uri="s3://models/old-llama/"), 90, NOW)
    assert args == ARGS and "old-llama" in reason


def test_an_incomplete_copy_falls_back_to_s3(tmp_path):
    args, reason = choose_model(ARGS, node(tmp_path, complete=False), 90, NOW)
    assert args == ARGS and "incomplete" in reason


def test_a_pointer_escaping_the_model_folder_is_refused(tmp_path):
    args, _ = choose_model(ARGS, node(tmp_path, key="../../etc"), 90, NOW)
    assert args == ARGS


def test_the_script_execs_the_command(tmp_path):
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve().parents[2] / "agent" / "vllm_entry.py"),
         sys.executable, "-c", "import sys; print(sys.argv[1:])", f"--model={S3}", "--served-model-name=llama"],
        env={"WARMSTART_WEIGHTS_ROOT": str(tmp_path / "none")}, capture_output=True, text=True, check=True,
    )
    assert "warmstart: no local copy of llama" in done.stdout
    assert f"['--model={S3}', '--served-model-name=llama']" in done.stdout
