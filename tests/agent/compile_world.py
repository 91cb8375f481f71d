"""The compile-cache world the agent's tests share with the pruner's and the hostile ones: the model's key factors
and keys, a clock, a node's cache layout, publishing and restoring as a node, and reading a folder back."""

from __future__ import annotations

from pathlib import Path

from contracts.cache_key import ModelFactors, compile_cache_key
from node_agent.runtime.layout import NodeCacheLayout
from node_agent.runtime.s3.compile_store import CacheStore
from tests.agent.weights_world import model_bucket  # noqa: F401 - the weights tests' fixture

FACTORS = ModelFactors(
    model="qwen3-6-35b-a3b",
    weights_revision="2026-02-rc1",
    image="vllm/vllm-openai:v0.21.0",
    torch_version="2.11.0",
    tensor_parallel=2,
    pipeline_parallel=1,
    max_model_len=8192,
    max_num_batched_tokens=8192,
    dtype="bfloat16",
    quantization=None,
    kv_cache_dtype="auto",
    compilation_config=None,
)
H100_KEY = compile_cache_key(FACTORS, gpu="H100", architecture="sm_90")
L40S_KEY = compile_cache_key(FACTORS, gpu="L40S", architecture="sm_89")


def publish_as(store, layout, clock, log, key=H100_KEY, node="node-a"):
    """The agent's publish of FACTORS' configuration from one node."""
    from node_agent.runtime.compile_cache import publish

    return publish(
        store=store,
        layout=layout,
        key=key,
        model=FACTORS.model,
        fingerprint=FACTORS.fingerprint(),
        node=node,
        clock=clock,
        log=log,
    )


def restore_as(store, layout, clock, log, key=H100_KEY, node="node-b"):
    """The agent's restore of FACTORS' configuration on one node."""
    from node_agent.runtime.compile_cache import restore

    return restore(
        store=store,
        layout=layout,
        key=key,
        model=FACTORS.model,
        fingerprint=FACTORS.fingerprint(),
        node=node,
        clock=clock,
        log=log,
    )


class Clock:
    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def fill_compile_cache(
    folder: Path, *, seed: int = 1, large_bytes: int = 0, vllm_hash: int | None = None
) -> dict[str, bytes]:
    """A tree shaped like vLLM's: Inductor sources, Triton binaries, vLLM's per-rank graph folder. Its vLLM
    hash folder is named by `vllm_hash` (by `seed` when not given): two nodes of one configuration compile
    the same folder name with their own bytes."""
    vllm_hash = seed if vllm_hash is None else vllm_hash
    rng = __import__("random").Random(seed)
    files = {
        "inductor/fx/ab/cabcdef.py": f"# generated kernel {seed}\n".encode() * 40,
        "inductor/triton/0/xy/kernel.cubin": rng.randbytes(70_000),
        "triton/AbCd/triton_.json": b'{"num_warps": 4}',
        f"vllm/torch_compile_cache/{vllm_hash:08x}/rank_0_0/backbone/computation_graph.py": b"graph = 1\n" * 100,
        "vllm/torch_compile_cache/empty-marker": b"",
    }
    if large_bytes:
        files["inductor/large.bin"] = rng.randbytes(large_bytes)
    for relative, content in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return files


def read_tree(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def pruner_deletes(store: CacheStore, key: str) -> None:
    """What only the pruner may do (the bucket policy denies nodes any delete): remove one object."""
    store._s3.delete_object(Bucket=store.bucket, Key=key)


def node_layout(tmp_path: Path, name: str) -> NodeCacheLayout:
    root = tmp_path / name / "compile-cache"
    root.mkdir(parents=True, exist_ok=True)
    return NodeCacheLayout(root)


FINGERPRINT = FACTORS.fingerprint()
MODEL = FACTORS.model
