"""The vLLM plugin's choice of files (model_workload/runtime/node_copy_loader.py): the node copy's own weight files,
for the chosen model only, and never anything the agent did not verify. vLLM itself runs it in the real vLLM tier
(tests/real_vllm)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from contracts.file_identity import record_identities
from model_workload.runtime.node_copy_loader import (
    FOLDER_VARIABLE,
    MODEL_VARIABLE,
    current_boot_id,
    local_weight_files,
    node_copy_files,
    register,
)

URI = "s3://models/llama/"


def _copy(tmp_path: Path) -> Path:
    """A copy as the agent leaves it: its files, and beside it the marker with what it verified."""
    folder = tmp_path / "0123456789abcdef"
    folder.mkdir()
    for name in ("model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors", "config.json"):
        (folder / name).write_bytes(b"x")
    _mark(folder)
    return folder


def _mark(folder: Path, **changes) -> None:
    files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
    marker = {"files": len(files), "bytes": sum(p.stat().st_size for p in files), **changes}
    marker["identity"] = record_identities(str(folder))
    folder.with_name(f"{folder.name}.complete").write_text(json.dumps(marker))


def test_the_copys_weight_files_sorted_as_paths_in_the_copy(tmp_path):
    folder = _copy(tmp_path)
    assert local_weight_files(str(folder)) == [
        str(folder / "model-00001-of-00002.safetensors"),
        str(folder / "model-00002-of-00002.safetensors"),
    ]


def test_links_fifos_folders_and_nested_files_are_not_weight_files(tmp_path):
    folder = _copy(tmp_path)
    outside = tmp_path / "outside.safetensors"
    outside.write_bytes(b"secret")
    (folder / "link.safetensors").symlink_to(outside)
    (folder / "dangling.safetensors").symlink_to(tmp_path / "gone")
    os.mkfifo(folder / "fifo.safetensors")
    (folder / "folder.safetensors").mkdir()
    (folder / "sub").mkdir()
    (folder / "sub" / "nested.safetensors").write_bytes(b"x")  # the streamer's listing is not recursive
    (folder / "model.safetensors.tmp").write_bytes(b"x")
    names = [Path(p).name for p in local_weight_files(str(folder))]
    assert names == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def test_a_dot_file_is_listed_as_the_s3_listing_lists_its_object(tmp_path):
    """fnmatch("<prefix>/.extra.safetensors", "*.safetensors") holds: an S3 start streams it, so the copy's must."""
    folder = _copy(tmp_path)
    (folder / ".extra.safetensors").write_bytes(b"x")
    assert Path(local_weight_files(str(folder))[0]).name == ".extra.safetensors"


def test_only_the_chosen_model_is_redirected(tmp_path):
    env = {FOLDER_VARIABLE: str(_copy(tmp_path)), MODEL_VARIABLE: URI}
    assert [Path(p).name for p in node_copy_files(URI, env) or []] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]
    assert node_copy_files(URI.rstrip("/"), env) == node_copy_files(URI, env)  # one prefix, with or without "/"
    assert node_copy_files("s3://models/llama-draft/", env) is None
    assert node_copy_files("s3://models/", env) is None
    assert node_copy_files(URI, {MODEL_VARIABLE: URI}) is None
    assert node_copy_files(URI, {FOLDER_VARIABLE: env[FOLDER_VARIABLE]}) is None


def test_a_copy_that_is_not_what_the_agent_verified_is_never_streamed(tmp_path):
    """vLLM's Run:ai loader does not check that every parameter was loaded: a copy short of a file, or holding one
    more, must leave vLLM's own listing (through the endpoint, which fails loudly), never load in part."""
    folder = _copy(tmp_path)
    env = {FOLDER_VARIABLE: str(folder), MODEL_VARIABLE: URI}
    assert node_copy_files(URI, env)
    marker = folder.with_name(f"{folder.name}.complete")
    (folder / "model-00002-of-00002.safetensors").unlink()
    assert node_copy_files(URI, env) is None  # a file gone since the agent verified it
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"xx")
    assert node_copy_files(URI, env) is None  # back with other bytes
    (folder / "model-00002-of-00002.safetensors").write_bytes(b"x")
    assert node_copy_files(URI, env) is None  # the same bytes again: another file (times), not the one verified
    _mark(folder)
    assert node_copy_files(URI, env)
    (folder / "extra.safetensors").write_bytes(b"")
    assert node_copy_files(URI, env) is None  # one file more (even empty)
    (folder / "extra.safetensors").unlink()
    text = marker.read_text()
    for hostile in ("[1, 2]", '{"files": "3", "bytes": 3}', "{", "x" * 70_000, '{"files": 3}'):
        marker.write_text(hostile)
        assert node_copy_files(URI, env) is None, hostile[:20]
    marker.unlink()
    assert node_copy_files(URI, env) is None  # no marker
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(text)
    marker.symlink_to(elsewhere)
    assert node_copy_files(URI, env) is None  # a marker that is a link is no marker
    marker.unlink()
    os.mkfifo(marker)
    assert node_copy_files(URI, env) is None  # nor a FIFO (opened without blocking)


def test_a_copy_that_cannot_be_listed_or_holds_no_weights_leaves_vllms_own_listing(tmp_path):
    assert node_copy_files(URI, {FOLDER_VARIABLE: str(tmp_path / "gone"), MODEL_VARIABLE: URI}) is None
    empty = tmp_path / "empty"
    empty.mkdir()
    _mark(empty)
    assert node_copy_files(URI, {FOLDER_VARIABLE: str(empty), MODEL_VARIABLE: URI}) is None
    not_a_folder = tmp_path / "file"
    not_a_folder.write_bytes(b"x")
    assert node_copy_files(URI, {FOLDER_VARIABLE: str(not_a_folder), MODEL_VARIABLE: URI}) is None


def test_without_the_entry_steps_choice_the_plugin_does_nothing(monkeypatch):
    """No vLLM here: the hook returns before it imports vLLM, as in every pod that streams from S3."""
    monkeypatch.delenv(FOLDER_VARIABLE, raising=False)
    monkeypatch.delenv(MODEL_VARIABLE, raising=False)
    register()
    assert "vllm" not in sys.modules


def test_a_copy_not_yet_on_disk_is_streamed_in_the_boot_that_published_it_only(tmp_path):
    """The agent publishes a copy from the page cache (`<key>.published`, naming the boot) and writes
    `<key>.complete` after its sync; a copy a crash or a reboot caught before the sync may hold lost bytes."""
    folder = _copy(tmp_path)
    env = {FOLDER_VARIABLE: str(folder), MODEL_VARIABLE: URI}
    complete = folder.with_name(f"{folder.name}.complete")
    published = folder.with_name(f"{folder.name}.published")
    document = json.loads(complete.read_text())
    complete.unlink()
    this_boot = current_boot_id()
    assert this_boot
    published.write_text(json.dumps({**document, "boot_id": this_boot}))
    assert node_copy_files(URI, env)
    published.write_text(json.dumps({**document, "boot_id": "another-boot"}))
    assert node_copy_files(URI, env) is None
    published.write_text(json.dumps(document))  # no boot named
    assert node_copy_files(URI, env) is None
    complete.write_text(json.dumps(document))  # synced: good in every boot
    assert node_copy_files(URI, env)
