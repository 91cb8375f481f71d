"""Entry step of the vLLM container (standard library only; runs in the serving image from a ConfigMap).

1. Records, before it looks at anything, that this pod is choosing (so the agent never evicts a copy a
   pod may be about to pick), then what it chose: the weights source and the compile folders present.
2. Picks the weights source. The vLLM arguments never change (the model is `s3://...` always, so vLLM's compile
   hash is the same whichever way the weights arrive). When the node's copy is fresh (confirmed against S3
   by the agent recently, its check time not in the future), complete and of this very S3 source, a
   read-only S3 endpoint on the pod's loopback serves it and the streamer is pointed there
   (`node_copy_s3.py`), and vLLM's plugin (`node_copy_loader.py`, found through PYTHONPATH) has the streamer read
   the copy's weight files as local files; otherwise the streamer reads S3 as before.
3. Execs the vLLM command.

Usage: python3 vllm_entry.py vllm serve s3://... --served-model-name=<name> ... (or <command...> --model=s3://...)
Environment: PYTHONPATH (extended for vLLM's plugin), WARMSTART_WEIGHTS_ROOT, WARMSTART_WEIGHTS_MAX_AGE,
WARMSTART_POD_RECORDS, WARMSTART_FINGERPRINT, VLLM_CACHE_ROOT (WARMSTART_POD_RECORDS is the pod's own folder: kubelet
mounts it by the pod's UID).
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import re
import signal
import sys
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# 2: the record is `record.json` in the pod's own folder (kubelet names it after the pod's UID), no identity inside.
RECORD_VERSION = 2
RECORD_FILE = "record.json"
# The agent's weights pointer: a few hundred bytes; a weights key is 16 hex digits (node_agent/runtime/weights.py).
POINTER_MAX_BYTES = 64 * 1024
_WEIGHTS_KEY = re.compile(r"^[0-9a-f]{16}$")
# A vLLM hash folder's name as the agent accepts it (one plain path component).
_FOLDER_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# A pointer confirmed "later than now" means the node clock stepped back: its age cannot be judged.
CLOCK_SKEW_TOLERANCE_SECONDS = 5.0
# Points the streamer's S3 clients at the loopback endpoint (runai-model-streamer 0.15.9, what the serving image
# ships: the AWS SDK for C++ streams the tensors, boto3 pulls the config and tokenizer files), path-style. UNSIGNED
# is read by the boto3 side only: the C++ reader still signs with the pod's credentials, which the endpoint ignores.
# AWS_EC2_METADATA_DISABLED, as the Run:ai docs ask for S3-compatible endpoints: no SDK falls back to the instance
# metadata service for a region or credentials (Pod Identity's container credentials come first anyway). None of
# these variables enters vLLM's compile hash (vllm/envs.py 0.21.0 knows no AWS_* or RUNAI_* variable; the real vLLM
# tier checks it).
# RUNAI_STREAMER_S3_TARGET_GBPS (an integer, read as unsigned long in 0.15.9): each S3 client opens connections for
# its throughput target (aws-c-s3: one per 0.4 Gbit/s, at least 10); S3 needs many, the loopback endpoint does not,
# and every connection is a socket and a thread of the endpoint. At 2 Gbit/s a client opens 10 instead of 25 (the
# default 10 Gbit/s). On 2 cores the two read the node copy at the same speed within the runs' spread (2.7 s and
# 3.0 s for 2 GB, 3 pairs): the setting is kept for the sockets, not for speed.
# This script's folder as mounted (the ConfigMap's files and the plugin's dist-info), not its resolved revision.
ENTRY_FOLDER = os.path.dirname(os.path.abspath(__file__))
NODE_COPY_ENV = {
    "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING": "0",
    "RUNAI_STREAMER_S3_UNSIGNED": "1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "RUNAI_STREAMER_S3_TARGET_GBPS": "2",
}


@dataclass(frozen=True)
class WeightsChoice:
    source: str  # node | s3
    key: str | None
    reason: str


def _arg(args: list[str], flag: str) -> str | None:
    found = next((a for a in args if a.startswith(flag + "=")), None)
    return found.split("=", 1)[1] if found else None


def _model(args: list[str]) -> str | None:
    """The model vLLM serves: `--model=<uri>`, or the first argument after `serve` (`vllm serve <uri> ...`, which
    vLLM's own argument parser gives precedence, vllm/entrypoints/cli/serve.py)."""
    if "serve" in args:
        after = args[args.index("serve") + 1 :]
        if after and not after[0].startswith("-"):
            return after[0]
    return _arg(args, "--model")


def _siblings() -> None:
    """The other scripts of the ConfigMap (the endpoint, vLLM's plugin) sit beside this one: importable by name."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)


def _read_pointer(path: Path) -> dict | None:
    """The agent's pointer or marker (a small JSON object); anything else, a link or an oversized file, is none."""
    _siblings()
    from node_copy_loader import read_json_object

    return read_json_object(str(path), POINTER_MAX_BYTES)


def choose_weights(name: str, s3_uri: str, weights_root: Path, max_age_seconds: float, now: float) -> WeightsChoice:
    """The node copy only while the agent vouches for it; S3 in every other case."""
    pointer = _read_pointer(weights_root / ".warmstart" / "current" / name)
    if pointer is None:
        return WeightsChoice("s3", None, f"no local copy of {name}: streaming from {s3_uri}")
    key = pointer.get("key")
    if pointer.get("s3_uri") != s3_uri:
        return WeightsChoice(
            "s3", None, f"local copy of {name} is of another S3 source than {s3_uri}: streaming from S3"
        )
    checked_at = pointer.get("checked_at")
    if isinstance(checked_at, bool) or not isinstance(checked_at, (int, float)) or not math.isfinite(checked_at):
        return WeightsChoice("s3", None, f"local copy of {name} has no check time: streaming from S3")
    if checked_at > now + CLOCK_SKEW_TOLERANCE_SECONDS:
        return WeightsChoice(
            "s3",
            None,
            f"local copy of {name} was checked {checked_at - now:.0f}s in the future "
            "(the node clock stepped back): streaming from S3",
        )
    if now - checked_at > max_age_seconds:
        return WeightsChoice(
            "s3", None, f"local copy of {name} not confirmed against S3 for {max_age_seconds:.0f}s: streaming from S3"
        )
    incomplete = WeightsChoice("s3", None, f"local copy of {name} is incomplete: streaming from {s3_uri}")
    if not isinstance(key, str) or not _WEIGHTS_KEY.fullmatch(key):
        return incomplete
    from node_copy_loader import copy_marker

    if copy_marker(str(weights_root / name / key)) is None:
        if (weights_root / name / f"{key}.published").exists():
            return WeightsChoice(
                "s3", None, f"local copy of {name} was not on disk when the node restarted: streaming from {s3_uri}"
            )
        return incomplete
    if not (weights_root / name / key).is_dir():
        return incomplete
    return WeightsChoice("node", key, f"serving {s3_uri} from the node-local copy {weights_root / name / key}")


def vllm_hash_dirs(cache_root: Path) -> list[str]:
    """vLLM's compile-cache folders under VLLM_CACHE_ROOT, relative to it (vLLM 0.21.0,
    vllm/compilation/backends.py and decorators.py): torch_compile_cache/<hash10>/ and, with AOT compile
    (on by default with torch >= 2.10), torch_compile_cache/torch_aot_compile/<hash64>/."""
    found = []
    compile_root = cache_root / "torch_compile_cache"
    for folder, nested in ((compile_root, False), (compile_root / "torch_aot_compile", True)):
        try:
            with os.scandir(folder) as listing:  # real folders only: a link is no hash folder
                entries = sorted(e.name for e in listing if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
        for entry in entries:
            if (not nested and entry == "torch_aot_compile") or not _FOLDER_NAME.fullmatch(entry):
                continue
            found.append(str((folder / entry).relative_to(cache_root)))
    return found


def write_record(folder: Path, record: dict) -> None:
    """Atomically (temp file, rename) into the pod's own folder: the agent never reads half a record."""
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{RECORD_FILE}.{uuid.uuid4().hex}.tmp"
    temporary.write_text(json.dumps(record, sort_keys=True))
    os.replace(temporary, folder / RECORD_FILE)


def start_node_copy_endpoint(bucket: str, prefix: str, folder: Path) -> str:
    """Serves the copy on 127.0.0.1 from a child process that dies with the container's main process."""
    _siblings()
    from node_copy_loader import copy_marker, holds_only, identities
    from node_copy_s3 import NodeCopyServer  # beside this script in the ConfigMap

    # The agent's marker lists every file it verified, with its identity: a copy that holds anything else, or a
    # file that is no longer the one verified, is not served (the pods stream from S3).
    marker = copy_marker(str(folder))
    verified = identities(marker) if marker is not None else None
    if verified is None or not holds_only(str(folder), verified):
        raise OSError("the copy is not the one the agent verified (its files or their identities differ)")
    server = NodeCopyServer(bucket=bucket, prefix=prefix, folder=folder, verified=verified)  # bound before the fork
    parent = os.getpid()
    if os.fork() == 0:
        try:
            ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: gone when vLLM (our exec) exits
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(0)
            server.serve_forever()
        finally:
            os._exit(0)
    endpoint = server.endpoint
    server.socket.close()  # the child serves; vLLM must not hold the listening socket
    # The child could still die (a failed prctl, a crash): vLLM gets the endpoint only once it answers.
    query = urllib.parse.urlencode({"list-type": "2", "prefix": prefix, "max-keys": "1"})
    with urllib.request.urlopen(f"{endpoint}/{bucket}?{query}", timeout=5) as answer:
        if answer.status != 200:
            raise OSError(f"node-copy endpoint answered {answer.status}")
    return endpoint


def node_copy_loader_env(folder: Path, s3_uri: str, env: dict[str, str]) -> dict[str, str]:
    """What vLLM needs to find the plugin (this script's folder, where the ConfigMap puts it and its dist-info, on
    PYTHONPATH after the image's own entries, so nothing of ours shadows a module of the image) and what the plugin
    needs (the copy and the URI it stands for). The folder is the mount path, not the ConfigMap's resolved revision
    folder, which kubelet replaces when the ConfigMap changes."""
    _siblings()
    from node_copy_loader import FOLDER_VARIABLE, MODEL_VARIABLE  # beside this script in the ConfigMap

    inherited = env.get("PYTHONPATH")
    return {
        "PYTHONPATH": (inherited + os.pathsep if inherited else "") + ENTRY_FOLDER,
        FOLDER_VARIABLE: str(folder),
        MODEL_VARIABLE: s3_uri,
    }


def plugin_reader(env: dict[str, str]) -> str:
    """How the streamer will read the copy, as far as the entry step can tell: the plugin needs its dist-info
    beside this script (a pod of a spec from before the plugin has none) and VLLM_PLUGINS, when set, to list it
    (vllm/plugins/__init__.py 0.21.0). The plugin's own line at load time says what happened."""
    from node_copy_loader import PLUGIN_NAME

    entry_points = Path(ENTRY_FOLDER).glob("*.dist-info/entry_points.txt")  # our own read-only ConfigMap files
    found = any(PLUGIN_NAME in p.read_text(errors="replace") for p in entry_points)
    listed = env.get("VLLM_PLUGINS")
    if not found:
        return "the weights through the loopback endpoint (no plugin dist-info beside the entry step)"
    if listed is not None and PLUGIN_NAME not in listed.split(","):
        return "the weights through the loopback endpoint (VLLM_PLUGINS leaves out the local-file plugin)"
    return "the weight files as local files"


def prepare(args: list[str], env: dict[str, str], now: float) -> tuple[dict[str, str], WeightsChoice | None, dict]:
    """What the pod will run with: the environment for vLLM, the weights choice, and the record written."""
    name, s3_uri = _arg(args, "--served-model-name"), _model(args)
    # The pod's own folder (kubelet mounts <records root>/<pod UID> here): the folder says whose record it is.
    records = Path(env["WARMSTART_POD_RECORDS"]) if env.get("WARMSTART_POD_RECORDS") else None
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "model": name,
        "phase": "choosing",
        "started_at": now,
        "boot": uuid.uuid4().hex,  # tells two starts of one container apart without trusting the clock
    }
    if records is not None:
        write_record(records, record)  # before any pointer is read
    new_env = dict(env)
    choice = None
    if s3_uri and s3_uri.startswith("s3://") and not env.get("WARMSTART_WEIGHTS_ROOT"):
        # No node copy for this model: it streams from S3, and the agent holds its downloads back meanwhile.
        choice = WeightsChoice("s3", None, f"no weights cache for this model: streaming from {s3_uri}")
    elif env.get("WARMSTART_WEIGHTS_ROOT") and name and s3_uri and s3_uri.startswith("s3://"):
        choice = choose_weights(
            name, s3_uri, Path(env["WARMSTART_WEIGHTS_ROOT"]), float(env.get("WARMSTART_WEIGHTS_MAX_AGE", "90")), now
        )
        if choice.source == "node" and choice.key is not None:  # a node choice always names its copy
            bucket, _, prefix = s3_uri.removeprefix("s3://").partition("/")
            folder = Path(env["WARMSTART_WEIGHTS_ROOT"]) / name / choice.key
            try:
                endpoint = start_node_copy_endpoint(bucket, prefix, folder)
                new_env |= {"AWS_ENDPOINT_URL": endpoint, **NODE_COPY_ENV}
            except Exception as error:  # never fail the pod: S3 is always there
                choice = WeightsChoice(
                    "s3", None, f"node-local endpoint failed ({type(error).__name__}: {error}): streaming from S3"
                )
            else:  # the endpoint checked the copy against the agent's marker: its files are the verified ones
                try:
                    new_env |= node_copy_loader_env(folder, s3_uri, env)
                    reader = plugin_reader(env)
                except Exception as error:  # the endpoint still serves the copy
                    reader = f"the weights through the loopback endpoint (plugin: {type(error).__name__}: {error})"
                choice = WeightsChoice(choice.source, choice.key, f"{choice.reason}; the streamer reads {reader}")
    cache_root = env.get("VLLM_CACHE_ROOT")
    record |= {
        "phase": "started",
        "weights": asdict(choice) if choice else None,
        "compile": {
            "fingerprint": env.get("WARMSTART_FINGERPRINT"),
            "hash_dirs": vllm_hash_dirs(Path(cache_root)) if cache_root else [],
        },
    }
    if records is not None:
        write_record(records, record)
    return new_env, choice, record


def main() -> None:
    command = sys.argv[1:]
    try:
        env, choice, _ = prepare(command, dict(os.environ), time.time())
        if choice is not None:
            print(f"warmstart: {choice.reason}", flush=True)
    except Exception as error:  # the entry step must never stop the pod from serving
        print(f"warmstart: entry step failed ({type(error).__name__}: {error}); starting vLLM as is", flush=True)
        env = dict(os.environ)
    os.execvpe(command[0], command, env)


if __name__ == "__main__":
    main()
