"""The configurations the real vLLM tier starts: both shipped environments and a set that covers both compute
modes, both load paths (S3, the node copy), tensor parallel 1/2/4/8, an fp8 KV cache, a compilation config and
`vllm_env` entries, each pointed at the test S3 server.

The models are their published Hugging Face configs (config.json, generation_config.json) without weights, which
vLLM's start reads before any weight (tests/real_vllm/models/): Qwen/Qwen3-4B for dev's qwen3-4b,
meta-llama/Llama-3.3-70B-Instruct for prod's llama-3-3-70b, and the Qwen3 MoE architecture of Qwen/Qwen3-30B-A3B
for prod's qwen3-6-35b-a3b (the Qwen3.6 file is not reachable from here; what the tier checks, where the caches
go and which inputs move the hash, does not depend on the layer counts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from warmstart.config.environment import EnvironmentConfig
from warmstart.loader import parse_config, read_yaml
from warmstart.vllm_release import releases

ROOT = Path(__file__).resolve().parents[2]
MODELS = Path(__file__).resolve().parent / "models"
# Which fixture stands for each configured model.
FIXTURES = {"qwen3-4b": "qwen3-4b", "qwen3-6-35b-a3b": "qwen3-moe", "llama-3-3-70b": "llama-3-70b"}


@dataclass(frozen=True)
class Case:
    name: str
    config: EnvironmentConfig
    loads: tuple[str, ...]  # "s3" (no node copy) and/or "node" (the agent's fresh copy, served on loopback)
    # The pod spec as warmstart rendered it before issue 21 (service links left on): the tier must refuse it.
    service_links: bool = False


def _document(name: str, models_bucket: str, compile_bucket: str, version: str) -> dict:
    """A shipped config, its buckets and model URIs moved to the test S3 server's buckets, serving the release under
    test (its image; the PyTorch follows from it)."""
    document = read_yaml(ROOT / "config" / f"{name}.yaml")
    document["buckets"]["compile_cache"] = compile_bucket
    document["buckets"]["models"]["name"] = models_bucket
    for model in document["models"]:
        model["s3_uri"] = f"s3://{models_bucket}/{model['name']}/"
        model["image"] = releases()[version].image["reference"]
        model.pop("torch_version", None)
    return document


def _only(document: dict, model: str, **changes) -> dict:
    (found,) = [m for m in document["models"] if m["name"] == model]
    return {**document, "models": [{**found, **changes}]}


def cases(models_bucket: str, compile_bucket: str, version: str) -> list[Case]:
    dev = _document("dev", models_bucket, compile_bucket, version)
    prod = _document("prod", models_bucket, compile_bucket, version)
    dev_node_copy = _only(
        {**dev, "caches": {**dev["caches"], "weights": True}},
        "qwen3-4b",
        compilation_config={"cudagraph_capture_sizes": [1, 2, 4, 8, 16]},
        vllm_env={"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"},
    )
    wide = _only(prod, "llama-3-3-70b", tensor_parallel_size=8, max_num_batched_tokens=16384)
    documents = [
        ("dev", dev, ("s3",)),
        ("prod", prod, ("s3", "node")),
        # Auto Mode with the weights cache: TP 1, a compilation config and a vLLM variable, both load paths.
        ("dev-node-copy", dev_node_copy, ("s3", "node")),
        # Karpenter at TP 8 with another batch budget (the fp8 KV cache stays from prod).
        ("prod-tp8", wide, ("s3", "node")),
    ]
    built = [Case(name, parse_config(document, source=name), loads) for name, document, loads in documents]
    return built + [Case("prod-before-the-fix", built[1].config, ("s3",), service_links=True)]


def model_files(model: str) -> dict[str, bytes]:
    folder = MODELS / FIXTURES[model]
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


# The weights the tier streams: a small safetensors file per model, deterministic, in the format's own layout
# (8-byte little-endian header length, the JSON header, the tensors' bytes); not the model's real tensors, which
# vLLM's start does not read before it builds the model (the tier stops before).
WEIGHTS_FILE = "model.safetensors"


def weights_file(model: str) -> bytes:
    import hashlib
    import json
    import struct

    tensors = {"lm_head.weight": ("F16", [4, 8]), "model.norm.weight": ("F16", [8])}
    header: dict = {"__metadata__": {"format": "pt"}}
    body = b""
    for name, (dtype, shape) in tensors.items():
        size = 2 * shape[0] * (shape[1] if len(shape) > 1 else 1)
        data = hashlib.shake_256(f"{model}/{name}".encode()).digest(size)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + size]}
        body += data
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the header padded to 8 bytes, as the format allows
    return struct.pack("<Q", len(encoded)) + encoded + body
