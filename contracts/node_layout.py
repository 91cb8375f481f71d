"""The compile-cache folders on a node, as the agent writes them and the pods' wait step and vLLM read them."""

from __future__ import annotations

import posixpath

# The folder inside a configuration's node folder that holds the cache itself. kubelet creates the mounted
# folder (hostPath DirectoryOrCreate) before the pod's containers start, so the agent can never rename a
# restored cache onto it; it renames it into this child instead, atomically, unless vLLM created it first.
COMPILE_CACHE_CONTENT = "cache"
# Under the compile-cache root on the node: the agent's markers, read by the pods' wait-for-restore step.
AGENT_STATE_FOLDER = ".warmstart"
DONE_MARKERS = "done"


def model_cache_folder(model_name: str, fingerprint: str) -> str:
    """Relative folder of one model configuration: a config change starts a fresh folder, never a mix."""
    return posixpath.join(model_name, fingerprint)


def done_marker_name(model_name: str, fingerprint: str) -> str:
    return f"{model_name}.{fingerprint}"
