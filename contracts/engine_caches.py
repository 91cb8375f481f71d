"""Every cache the engine writes at start, where warmstart puts it, and whether it may travel to another node.

One table for synth (the variables each pod gets), the node agent (what the archive carries, what each start
used) and the tests that hold it to the installed packages: `make test-vllm` reads, from each supported vLLM
release and the kernel libraries its image pins, every folder vLLM joins under VLLM_CACHE_ROOT and every
library's default cache folder (tests/real_vllm/read_caches.py); warmstart/vllm_releases/<version>.json records
them and tests/unit/test_engine_caches.py fails on a folder this table does not name. docs/upstream-facts.md
("Engine caches") is rendered from both.

All of them live in a configuration's cache content folder on the node's NVMe (the compile-cache hostPath):
`vllm/` is VLLM_CACHE_ROOT, the rest are one folder per library. An archive is keyed by GPU name and
architecture, serving image, PyTorch and every compile factor (contracts/cache_key.py), so a cache whose entries
depend on no more than those is portable; one that depends on the node itself (its GPUs' wiring, its driver)
stays on the node.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from enum import StrEnum

VLLM_ROOT_FOLDER = "vllm"  # VLLM_CACHE_ROOT inside the content folder
# torch.compile's cache: its files are counted per vLLM hash folder and judged apart from the other caches.
TORCH_COMPILE_CACHE = "torch_compile_cache"
# What a manifest or a start record may list (the inventory names fewer), and the longest name it may hold.
MAX_LISTED_CACHES = 32
MAX_CACHE_NAME = 64
# vLLM 0.34.0's opt-in for the startup plan (vllm/v1/worker/startup_plan.py); outside its compile hash.
STARTUP_PLAN_VARIABLE = "VLLM_ENABLE_STARTUP_PLAN"


# What a start record says of each cache the start had (node_agent/runtime/engine_cache_use.py): vLLM said it
# loaded it, the start wrote into it (compiled, tuned, profiled), its files were there and none changed, or vLLM
# refused it (a startup plan measured with more free memory).
USE_WORDS = ("loaded", "written", "present", "refused")
UNLISTED = "unlisted"  # files in a folder of the content folder this table does not name (they stay on the node)


class Scope(StrEnum):
    ARCHIVED = "archived"  # kept on the node and carried in the archive to new nodes
    NODE = "node"  # kept on the node only: another node measures or builds its own
    UNUSED = "unused"  # never read back (scratch), or not written on the NVIDIA GPUs warmstart serves
    MOVED = "moved"  # warmstart points it outside the cache folder on purpose (the entry says where and why)


@dataclass(frozen=True)
class EngineCache:
    name: str  # the word in events, the start record and metrics
    folder: str  # under the content folder; a glob for a file pattern (fnmatch)
    writer: str  # the package whose code writes it
    variable: str | None  # what warmstart sets to put it there; None: it follows VLLM_CACHE_ROOT
    key: str  # what its entries depend on, by the writer's own key
    scope: Scope
    why: str
    vllm_name: str | None = None  # its name under VLLM_CACHE_ROOT as the release reader reports it
    since: str | None = None  # the first supported vLLM release that writes it (None: all of them)
    log_evidence: bool = False  # vLLM prints whether this start used it (node_agent/runtime/vllm_log.py)
    # Files in its folder that are no cache entry (fnmatch, relative to the content folder): the writer's log,
    # appended on every start, and what it downloads rather than builds. They stay on the node and tell nothing of
    # what the start compiled.
    not_entries: tuple[str, ...] = ()

    def holds(self, relative: str) -> bool:
        """Whether a path relative to the content folder is in this cache."""
        return fnmatch.fnmatch(relative, self.folder) or relative.startswith(self.folder.rstrip("/") + "/")


def _vllm(vllm_name: str, *, name: str | None = None, **fields) -> EngineCache:
    """A cache vLLM joins under VLLM_CACHE_ROOT."""
    fields.setdefault("writer", "vllm")
    return EngineCache(name=name or vllm_name, folder=f"{VLLM_ROOT_FOLDER}/{vllm_name}", vllm_name=vllm_name, **fields)


ENGINE_CACHES: tuple[EngineCache, ...] = (
    _vllm(
        TORCH_COMPILE_CACHE,
        variable=None,
        key="vLLM's compile hash: its config factors, hashed environment, traced code, compiler (Inductor names "
        "the GPU)",
        scope=Scope.ARCHIVED,
        why="the compiled graphs and vLLM's AOT artifact (self-contained with VLLM_USE_MEGA_AOT_ARTIFACT)",
        log_evidence=True,
    ),
    _vllm(
        "deep_gemm",
        writer="deep_gemm (vLLM points it under VLLM_CACHE_ROOT unless the variable is set)",
        variable="DG_JIT_CACHE_DIR",
        key="DeepGEMM's kernel source, its install path and NVCC version, the GPU architecture",
        scope=Scope.ARCHIVED,
        why="DeepGEMM's JIT kernels (FP8 linear and MoE layers on Hopper and Blackwell); valid on any node with the "
        "same image and GPU",
    ),
    _vllm(
        "flashinfer_autotune_cache",
        variable=None,
        key="FlashInfer's version and GPU architecture (its workspace's folder names), vLLM's config factors",
        scope=Scope.ARCHIVED,
        why="FlashInfer's autotuned kernel choices per rank (multi-rank and pipeline-parallel deployments)",
        since="0.34.0",
        log_evidence=True,
    ),
    _vllm(
        "startup_plan",
        variable=None,
        key="vLLM's own fingerprint: version, config hash, device name, memory and capability, torch, CUDA, rank "
        "and world size; applied only if the GPU has at least the free memory it was measured with",
        scope=Scope.ARCHIVED,
        why="the memory-profiling result: a matching boot skips profiling and the CUDA-graph memory estimate "
        "(VLLM_ENABLE_STARTUP_PLAN=1, which warmstart sets where the release has it)",
        since="0.34.0",
        log_evidence=True,
    ),
    _vllm(
        "modelinfos",
        variable=None,
        key="the model class's module file hash",
        scope=Scope.ARCHIVED,
        why="what vLLM's model registry learned by importing a model class in a subprocess",
    ),
    _vllm(
        "gpu_p2p_access_cache_for_*.json",
        name="gpu_p2p_access",
        variable=None,
        key="the GPUs the pod was given (CUDA_VISIBLE_DEVICES or their physical ids)",
        scope=Scope.NODE,
        why="which GPU pairs of this node reach each other (custom all-reduce): another node tests its own wiring",
    ),
    _vllm(
        "dummy_cache",
        variable=None,
        key="none: an empty folder for a disabled compiler cache",
        scope=Scope.UNUSED,
        why="created empty when vLLM loads a standalone compile artifact; nothing is written into it",
    ),
    _vllm(
        "rocm_segmented_attention",
        variable=None,
        key="the ROCm attention kernel's tuning inputs",
        scope=Scope.UNUSED,
        why="written on AMD GPUs only (ROCm segmented attention); warmstart serves NVIDIA GPUs",
        since="0.34.0",
    ),
    _vllm(
        "xla_cache",
        variable=None,
        key="the XLA graphs of a TPU",
        scope=Scope.UNUSED,
        why="VLLM_XLA_CACHE_PATH's default: written on TPUs only",
    ),
    _vllm(
        "assets",
        variable="VLLM_ASSETS_CACHE",
        key="the s3:// model's URI (vLLM hashes the folder it pulls config and tokenizer files into)",
        scope=Scope.MOVED,
        why="config and tokenizer files of an s3:// model: warmstart gives every pod a fresh emptyDir at one fixed "
        "path (/warmstart-assets), since vLLM hashes that path and a stale file must not survive a restart",
    ),
    EngineCache(
        name="inductor",
        folder="inductor",
        writer="torch",
        variable="TORCHINDUCTOR_CACHE_DIR",
        key="Inductor's own: graph, PyTorch version, device name",
        scope=Scope.ARCHIVED,
        why="Inductor's FX graph and kernel caches (default: /tmp/torchinductor_<user>, lost with the pod)",
    ),
    EngineCache(
        name="triton",
        folder="triton",
        writer="triton",
        variable="TRITON_CACHE_DIR",
        key="Triton's own: kernel source, Triton version, target GPU",
        scope=Scope.ARCHIVED,
        why="compiled Triton kernels (default: ~/.triton/cache, in the pod's HOME)",
    ),
    EngineCache(
        name="flashinfer",
        folder="flashinfer",
        writer="flashinfer",
        variable="FLASHINFER_WORKSPACE_BASE",
        key="FlashInfer's version and the GPU architecture (its folder names), each kernel's source",
        scope=Scope.ARCHIVED,
        why="FlashInfer's JIT workspace and its managed autotune store (default: ~/.cache/flashinfer, in the "
        "pod's HOME)",
        # flashinfer/jit/core.py: its logger's file, written on every import; flashinfer/jit/env.py: the cubins it
        # downloads on demand where the image's flashinfer-cubin package does not match (GBs, published artifacts).
        not_entries=("flashinfer/*/flashinfer_jit.log", "flashinfer/*/cubins/*"),
    ),
    EngineCache(
        name="cute_dsl",
        folder="cute-dsl",
        writer="nvidia-cutlass-dsl",
        variable="CUTE_DSL_CACHE_DIR",
        key="the CuTe DSL's version and each kernel's generated IR",
        scope=Scope.ARCHIVED,
        why="CuTe DSL kernels compiled by FlashInfer and vLLM (default: /tmp or FlashInfer's workspace)",
    ),
    EngineCache(
        name="tilelang",
        folder="tilelang",
        writer="tilelang",
        variable="TILELANG_CACHE_DIR",
        key="TileLang's version, each kernel's source and target",
        scope=Scope.ARCHIVED,
        why="TileLang's JIT kernels (default: ~/.tilelang/cache, in the pod's HOME)",
    ),
    EngineCache(
        name="torch_extensions",
        folder="torch-extensions",
        writer="torch",
        variable="TORCH_EXTENSIONS_DIR",
        key="each extension's sources and build flags, the Python and CUDA versions (its folder name)",
        scope=Scope.ARCHIVED,
        why="C++/CUDA extensions PyTorch builds at run time (default: under the user's cache folder or /tmp)",
    ),
    EngineCache(
        name="cutile",
        folder="cutile",
        writer="cuda-tile (cutile_cache)",
        variable="CUDA_TILE_CACHE_DIR",
        key="cuTile's own, in one SQLite database",
        scope=Scope.NODE,
        why="a live SQLite database rewritten on every lookup: packed while a pod runs it could travel half-written",
    ),
    EngineCache(
        name="b12x",
        folder="b12x",
        writer="flashinfer (experimental b12x kernels)",
        variable="B12X_COMPILE_CACHE_DIR",
        key="not read: its compile cache's key is not documented",
        scope=Scope.NODE,
        why="CuTe kernels of FlashInfer's b12x path (default: under XDG_CACHE_HOME or ~/.cache); kept on the node "
        "until its key is known to name what it depends on",
    ),
    EngineCache(
        name="flashinfer_moe_ep_knobs",
        folder="flashinfer-moe-ep-knobs.json",
        writer="flashinfer (expert-parallel MoE)",
        variable="FLASHINFER_MOE_EP_KNOB_CACHE",
        key="not read: one file of tuned knobs",
        scope=Scope.NODE,
        why="FlashInfer's expert-parallel MoE tuning file (default: ~/.cache/flashinfer/moe_ep_knob_cache.json, "
        "outside its workspace); kept on the node until its key is known",
    ),
    EngineCache(
        name="huggingface",
        folder="huggingface",
        writer="huggingface_hub",
        variable="HF_HOME",
        key="the Hub's own (repository and revision); may hold a token",
        scope=Scope.NODE,
        why="the Hugging Face cache (default: under XDG_CACHE_HOME or ~/.cache); never travels, since it may hold "
        "a token",
    ),
    EngineCache(
        name="cuda_jit",
        folder="nv-compute-cache",
        writer="the NVIDIA driver",
        variable="CUDA_CACHE_PATH",
        key="the PTX and the driver version (the driver drops entries of another driver)",
        scope=Scope.NODE,
        why="the driver's JIT of PTX kernels (default: ~/.nv/ComputeCache); its entries follow the node's driver, "
        "which the archive's key does not name",
    ),
)


def cache_name_ok(name: object) -> bool:
    """A cache name as a node may write it into a manifest or a start record: short text (not necessarily one this
    table names: another agent's release may know more)."""
    return isinstance(name, str) and 0 < len(name) <= MAX_CACHE_NAME


def named(name: str) -> EngineCache | None:
    return next((cache for cache in ENGINE_CACHES if cache.name == name), None)


def cache_of(relative: str) -> EngineCache | None:
    """The cache a path relative to the content folder is in; None for anything the table does not name."""
    return next((cache for cache in ENGINE_CACHES if cache.holds(relative)), None)


def not_an_entry(relative: str) -> bool:
    """Whether a file of the content folder is a writer's log or download, not a cache entry."""
    return any(fnmatch.fnmatch(relative, pattern) for cache in ENGINE_CACHES for pattern in cache.not_entries)


def travels(relative: str) -> bool:
    """Whether a file of the content folder goes into the archive: the portable caches this table names, and only
    they, less their writers' logs and downloads. What it does not name (a library writing under XDG_CACHE_HOME)
    stays on the node: nothing travels to other nodes that no one has checked may."""
    cache = cache_of(relative)
    return cache is not None and cache.scope is Scope.ARCHIVED and not not_an_entry(relative)


def named_under_vllm_root(name: str) -> bool:
    """Whether a name vLLM joins under VLLM_CACHE_ROOT (a release reader's pattern) is in the table."""
    return any(cache.vllm_name == name for cache in ENGINE_CACHES)


def cache_variables(content: str) -> dict[str, str]:
    """Each library cache's variable, pointing into the content folder (a container path)."""
    return {
        cache.variable: f"{content}/{cache.folder}"
        for cache in ENGINE_CACHES
        if cache.variable is not None and cache.scope is not Scope.MOVED
    }
