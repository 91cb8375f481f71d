"""Reads, inside an installed vLLM, where the engine writes its caches at start (record_caches.py and the real vLLM
tier run it). Standard library and the installed packages only; prints one JSON document.

- `vllm_cache_root`: every name vLLM's own code joins under VLLM_CACHE_ROOT (`os.path.join(envs.VLLM_CACHE_ROOT,
  "x", ...)`, `Path(envs.VLLM_CACHE_ROOT) / "x"`, an f-string's constant head with `*` for the rest), found by
  walking the syntax of every module of the installed package, with the modules that name it. Code that only
  sets the variable (vllm/benchmarks/startup.py) or matches a path against the root joins nothing and is not
  listed.
- `libraries`: the installed versions of the kernel libraries the image pins (torch, triton, flashinfer-python,
  nvidia-cutlass-dsl, tilelang; DeepGEMM is built into vLLM's image and vLLM points it).
- `folders`: each library's cache folder as its own code resolves it in this process's environment: the caller
  sets HOME and TMPDIR to markers (where they would go by default) or the pod's variables (where they go in a
  warmstart pod). A library that is not installed or cannot be imported here is listed with null.

    python read_caches.py [environment.json]   (a JSON object of variables set before anything is imported)
"""

from __future__ import annotations

import ast
import getpass
import importlib.metadata
import importlib.util
import json
import os
import sys
from pathlib import Path

LIBRARIES = ("torch", "triton", "flashinfer-python", "nvidia-cutlass-dsl", "tilelang")
ROOT_NAME = "VLLM_CACHE_ROOT"


def _is_root(node: ast.AST) -> bool:
    """`envs.VLLM_CACHE_ROOT`, a bare `VLLM_CACHE_ROOT`, or `Path(...)`/`str(...)` of either."""
    if isinstance(node, ast.Attribute) and node.attr == ROOT_NAME:
        return True
    if isinstance(node, ast.Name) and node.id == ROOT_NAME:
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("Path", "str"):
        return len(node.args) == 1 and _is_root(node.args[0])
    return False


def _head(node: ast.AST) -> str | None:
    """The first path part a join adds: a string constant, or an f-string as a pattern (`*` for each value)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split("/", 1)[0]
    if isinstance(node, ast.JoinedStr):
        text = "".join(
            v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "*" for v in node.values
        )
        return text.split("/", 1)[0]
    return None


def _joins(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            joined = (isinstance(func, ast.Attribute) and func.attr == "join") or (
                isinstance(func, ast.Name) and func.id == "join"
            )
            if joined and len(node.args) >= 2 and _is_root(node.args[0]):
                head = _head(node.args[1])
                if head:
                    found.add(head)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and _is_root(node.left):
            head = _head(node.right)
            if head:
                found.add(head)
    return found


def vllm_cache_root_names() -> dict[str, list[str]]:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("vllm is not installed here")
    package = Path(next(iter(spec.submodule_search_locations)))
    names: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        source = path.read_text(encoding="utf-8", errors="replace")
        if ROOT_NAME not in source:
            continue
        for name in _joins(ast.parse(source)):
            names.setdefault(name, []).append(str(path.relative_to(package.parent)))
    return {name: sorted(modules) for name, modules in sorted(names.items())}


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _resolved(read) -> str | None:
    try:
        value = read()
    except Exception as error:  # noqa: BLE001 - a library that cannot be imported here is reported, not fatal
        print(f"read_caches: {type(error).__name__}: {error}", file=sys.stderr)
        return None
    return None if value is None else str(value)


def _cute_dsl() -> str:
    # Before FlashInfer is imported (it points the DSL into its own workspace when the variable is unset).
    import cutlass.base_dsl.cache_helpers as helpers

    reader = getattr(helpers, "get_default_generated_ir_path", None)
    return reader() if reader is not None else helpers.default_generated_ir_path


def _inductor() -> str:
    from torch._inductor.runtime import cache_dir_utils

    return os.environ.get("TORCHINDUCTOR_CACHE_DIR") or cache_dir_utils.default_cache_dir()


def _triton() -> str:
    import triton.knobs

    return triton.knobs.cache.dir


def _flashinfer() -> str:
    import flashinfer.jit.env

    return flashinfer.jit.env.FLASHINFER_WORKSPACE_DIR


def _flashinfer_autotune() -> str | None:
    """FlashInfer's managed autotune store (its autotune_v2), where the release has one."""
    if importlib.util.find_spec("flashinfer.autotune_cache") is None:
        return None
    import flashinfer.autotune_cache

    return flashinfer.autotune_cache.get_default_cache_root()


def _tilelang() -> str:
    from tilelang.env import env

    return env.TILELANG_CACHE_DIR


def _torch_extensions() -> str:
    from torch.utils.cpp_extension import get_default_build_root

    return os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root()


def _cutile() -> str | None:
    from cutile_cache._env import get_cache_dir_from_env

    return get_cache_dir_from_env()


def _b12x() -> str:
    from flashinfer.experimental.b12x._lib.compiler import _cute_compile_cache_dir

    return str(_cute_compile_cache_dir())


def _moe_ep_knobs() -> str | None:
    from flashinfer.moe_ep.kernel_src.sm100.cutedsl_megamoe.shim.knob_cache import knob_cache_path

    return knob_cache_path()


def _huggingface() -> str:
    from huggingface_hub import constants

    return constants.HF_HOME


def _vllm_root() -> str:
    import vllm.envs as envs

    return envs.VLLM_CACHE_ROOT


def folders() -> list[list]:
    """[cache name (contracts/engine_caches.py), folder] per library cache, in a fixed order."""
    readers = (
        ("cute_dsl", _cute_dsl),
        ("inductor", _inductor),
        ("triton", _triton),
        ("flashinfer", _flashinfer),
        ("flashinfer", _flashinfer_autotune),
        ("tilelang", _tilelang),
        ("torch_extensions", _torch_extensions),
        ("cutile", _cutile),
        ("b12x", _b12x),
        ("flashinfer_moe_ep_knobs", _moe_ep_knobs),
        ("huggingface", _huggingface),
        ("vllm", _vllm_root),
    )
    # Readers of modules a release may not have: listed only where the module is there.
    optional = {
        "flashinfer": _flashinfer_autotune,
        "cutile": _cutile,
        "b12x": _b12x,
        "flashinfer_moe_ep_knobs": _moe_ep_knobs,
    }
    found = []
    for name, read in readers:
        value = _resolved(read)
        if value is not None or read not in optional.values():
            found.append([name, value])
    return found


def main() -> int:
    if len(sys.argv) > 1:
        with open(sys.argv[1]) as handle:
            os.environ.update(json.load(handle))
    import vllm

    document = {
        "vllm": vllm.__version__,
        "vllm_cache_root": vllm_cache_root_names(),
        "libraries": {name: _version(name) for name in LIBRARIES},
        "folders": folders(),
        "user": getpass.getuser(),
    }
    print("VLLM-CACHES " + json.dumps(document, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
