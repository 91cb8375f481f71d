"""A vLLM plugin that has the Run:ai streamer read the node's copy as local files, with vLLM's arguments unchanged.

Why: the streamer's S3 client costs far more CPU per GB than its local-file reader (two copies of every byte,
fresh pool pages, TCP; docs/upstream-facts.md), so a pod that read its node copy through the loopback endpoint
(`node_copy_s3.py`) loaded at a fraction of the NVMe's rate. Passing `--model=<folder>` instead would change vLLM's
compile hash (the model path and `model_weights` are factors), so the arguments stay `--model=s3://...` and only
the list of files the loader streams changes: vLLM's loader config (`LoadConfig`) is no factor of the hash
(vLLM 0.21.0, vllm/config/load.py compute_hash), and neither is which files the streamer reads.

How vLLM finds it: the entry step, once it has chosen a verified node copy, puts the folder this file is in on
PYTHONPATH; the ConfigMap mounts a `*.dist-info` beside it whose entry point (group `vllm.general_plugins`) names
`register`. vLLM calls every general plugin in each of its processes, the workers included, before it builds a
loader (vllm/plugins/__init__.py load_general_plugins). `register` replaces the `runai_streamer` loader with a
subclass that, for this model's URI only, lists the copy's files; for anything else, or when the copy cannot be
listed, it is vLLM's own loader, and the streamer reads the loopback endpoint as before.

Standard library at import (the plugin is discovered by importing it); vLLM only inside `register`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

try:  # the serving image: the ConfigMap puts it beside this file
    from file_identity import holds_only, identities
except ImportError:  # the repository
    from contracts.file_identity import holds_only, identities

# Set by the entry step (vllm_entry.py) only when the agent vouches for the copy and its files are the ones the
# agent verified: the folder of the copy, and the model URI it is a copy of.
FOLDER_VARIABLE = "WARMSTART_NODE_COPY_DIR"
MODEL_VARIABLE = "WARMSTART_NODE_COPY_MODEL"
# The name vLLM knows the plugin by (entry point name, what VLLM_PLUGINS lists when a pod restricts plugins).
PLUGIN_NAME = "warmstart_node_copy"
LOAD_FORMAT = "runai_streamer"
_SUFFIX = ".safetensors"
# The agent's completion marker beside the copy (`<key>.complete`: files, bytes and each file's identity, about 100
# bytes a file; node_agent/runtime/weights.py MARKER_MAX_BYTES).
MARKER_MAX_BYTES = 4 * 2**20
# The kernel's boot id, the same in every container of the node (docs/upstream-facts.md).
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"


def local_weight_files(folder: str) -> list[str]:
    """The copy's weight files as the streamer lists the S3 prefix they came from (runai-model-streamer 0.15.9:
    the keys directly under the prefix, not below it, matching `*.safetensors`, dot-files included, which a local
    glob would skip), regular files only: a link, a FIFO or a folder named like a weights file is not a file the
    agent verified."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if not entry.name.endswith(_SUFFIX):
                continue
            if entry.is_file(follow_symlinks=False):
                found.append(os.path.join(folder, entry.name))
    return sorted(found)


def read_json_object(path: str, max_bytes: int) -> dict | None:
    """A small JSON object the agent wrote (its pointer, its marker); a link, a FIFO, a file over `max_bytes` or
    anything but a JSON object is none, and NaN or Infinity read as null (they are no count and no time)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(descriptor, max_bytes + 1)
    except OSError:
        return None
    finally:
        os.close(descriptor)
    if len(data) > max_bytes:
        return None
    try:
        found = json.loads(data, parse_constant=lambda name: None)
    except (ValueError, RecursionError):
        return None
    return found if isinstance(found, dict) else None


def copy_marker(folder: str) -> dict | None:
    """The agent's marker that vouches for the copy: `<key>.complete` (synced to disk), or `<key>.published` when it
    names this boot. The agent publishes a copy once every byte is verified in the page cache, and syncs it after;
    after a crash or a reboot, a copy that never reached the disk may have lost bytes. The agent reads them by the
    same rule (node_agent/runtime/weights.py WeightsLayout.read_marker)."""
    name = folder.rstrip("/")
    base = os.path.join(os.path.dirname(name), os.path.basename(name))
    durable = read_json_object(base + ".complete", MARKER_MAX_BYTES)
    if durable is not None:
        return durable
    published = read_json_object(base + ".published", MARKER_MAX_BYTES)
    boot_id = current_boot_id()
    if published is not None and boot_id is not None and published.get("boot_id") == boot_id:
        return published
    return None


def current_boot_id(path: str = BOOT_ID_PATH) -> str | None:
    try:
        with open(path) as handle:
            return handle.read(64).strip() or None
    except OSError:
        return None


def node_copy_files(requested: str, env: Mapping[str, str]) -> list[str] | None:
    """The files to stream in place of `requested`: the copy's, when `requested` is the model the entry step chose
    the copy for, the copy still holds exactly the files the agent verified, each the same file (its marker's
    identities: contracts/file_identity.py) and at least one weights file; None (vLLM's own listing, through the
    endpoint) in every other case. The check is made when the loader lists, not only when the entry step chose:
    vLLM's Run:ai loader does not check that every parameter was loaded, so a copy short of a file must never be
    streamed as if whole."""
    folder, model = env.get(FOLDER_VARIABLE), env.get(MODEL_VARIABLE)
    if not folder or not model or requested.rstrip("/") != model.rstrip("/"):
        return None
    marker = copy_marker(folder)
    table = identities(marker) if marker is not None else None
    try:
        if table is None or not holds_only(folder, table):
            return None
        files = local_weight_files(folder)
    except OSError:
        return None
    return files or None


def register() -> None:
    """vLLM's general-plugin hook (called once per process): nothing unless the entry step chose a node copy."""
    if not os.environ.get(FOLDER_VARIABLE) or not os.environ.get(MODEL_VARIABLE):
        return
    # vLLM calls a plugin's hook unguarded: an image whose vLLM moved these names must still start (the streamer
    # then reads the copy through the endpoint), never fail in every process.
    try:
        from vllm.model_executor.model_loader import register_model_loader
        from vllm.model_executor.model_loader.runai_streamer_loader import RunaiModelStreamerLoader

        class NodeCopyStreamerLoader(RunaiModelStreamerLoader):
            """vLLM's Run:ai streamer loader, streaming the node copy's local files for the chosen model."""

            def _prepare_weights(self, model_name_or_path: str, revision: str | None) -> list[str]:
                files = node_copy_files(model_name_or_path, os.environ)
                if files is None:
                    print(f"warmstart: no verified node copy for {model_name_or_path}: vLLM's own listing", flush=True)
                    return super()._prepare_weights(model_name_or_path, revision)
                print(f"warmstart: streaming {len(files)} weight files from the node copy as local files", flush=True)
                return files

        register_model_loader(LOAD_FORMAT)(NodeCopyStreamerLoader)
    except Exception as error:  # noqa: BLE001 - said, and vLLM's own loader stays
        print(f"warmstart: node-copy plugin not registered ({type(error).__name__}: {error})", flush=True)
