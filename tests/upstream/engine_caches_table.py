"""docs/upstream-facts.md's "Engine caches" section, rendered from the recorded releases (warmstart/vllm_releases/,
"caches") and the inventory (contracts/engine_caches.py). tests/real_vllm/record_caches.py writes it;
tests/unit/test_engine_caches.py checks the document holds what this renders."""

from __future__ import annotations

from contracts.engine_caches import ENGINE_CACHES, EngineCache, Scope, named, named_under_vllm_root

BEGIN = "<!-- engine-caches: rendered by python -m tests.real_vllm.record_caches; edit contracts/engine_caches.py -->"
END = "<!-- engine-caches: end -->"
# The driver's JIT cache has no Python code to read; its default is the CUDA documentation's.
DRIVER_DEFAULT = "`$HOME/.nv/ComputeCache` (CUDA Programming Guide, CUDA environment variables)"
TESTS = (
    "`tests/unit/test_engine_caches.py` (every recorded folder named, the pods' variables); "
    "`tests/real_vllm/test_real_vllm.py::test_every_engine_cache_the_installed_release_writes_is_on_the_nodes_nvme`; "
    "`tests/engine/test_engine.py::test_the_archive_carries_the_engines_portable_caches_and_another_gpu_gets_none`"
)


LIBRARY_ROOT = "vllm"  # the reader's name for VLLM_CACHE_ROOT itself among the library folders


def unnamed_folders(caches: dict) -> list[str]:
    """What a release's recorded "caches" section holds that the inventory does not name."""
    unknown = [f"VLLM_CACHE_ROOT/{name}" for name in caches["vllm_cache_root"] if not named_under_vllm_root(name)]
    for name, _ in caches["defaults"]:
        cache = named(name)
        if name != LIBRARY_ROOT and (cache is None or cache.variable is None):
            unknown.append(f"library cache {name}")
    return unknown


def _where_recorded(cache: EngineCache, releases: dict[str, dict]) -> list[str]:
    """The releases whose recorded facts name the cache (its VLLM_CACHE_ROOT name, or its library's folder)."""
    found = []
    for version, document in releases.items():
        caches = document["caches"]
        if cache.vllm_name is not None and cache.vllm_name in caches["vllm_cache_root"]:
            found.append(version)
        elif any(name == cache.name for name, _ in caches["defaults"]):
            found.append(version)
    return found


def _default(cache: EngineCache, releases: dict[str, dict]) -> str:
    newest = releases[max(releases, key=lambda v: tuple(int(p) for p in v.split(".")))]["caches"]
    paths = [path for name, path in newest["defaults"] if name == cache.name and path]
    if cache.vllm_name is not None:
        root = next((path for name, path in newest["defaults"] if name == "vllm"), None)
        return f"`{root}/{cache.vllm_name}`" if root else ""
    return ", ".join(f"`{path}`" for path in paths)


def render(releases: dict[str, dict]) -> str:
    versions = sorted(releases, key=lambda v: tuple(int(p) for p in v.split(".")))
    libraries = "; ".join(
        f"{version}: "
        + ", ".join(f"{name} {ver}" for name, ver in sorted(releases[version]["caches"]["libraries"].items()) if ver)
        for version in versions
    )
    lines = [
        BEGIN,
        "",
        f"Read from each release's packages (vLLM {', '.join(versions)}; the image's kernel libraries, {libraries}): "
        "the folders vLLM's code joins under `VLLM_CACHE_ROOT`, each library's default folder with `HOME` and "
        "`TMPDIR` as markers. Where warmstart puts each: under the configuration's cache folder on the node's NVMe "
        "(`/compile-cache/cache/<folder>` in the pod). Scope: *archived* travels to new nodes in the compile "
        "archive (keyed by GPU name and architecture, image, PyTorch and the compile factors); *node* stays on the "
        "node; *unused* is never read back or not written on NVIDIA GPUs; *moved* is put elsewhere on purpose.",
        "",
        "| cache | writer | default folder (newest release) | warmstart folder | variable | key | scope | "
        "recorded in |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for cache in ENGINE_CACHES:
        where = _where_recorded(cache, releases)
        folder = "(its own mount)" if cache.scope is Scope.MOVED else f"`{cache.folder}`"
        variable = f"`{cache.variable}`" if cache.variable else "follows `VLLM_CACHE_ROOT`"
        default = _default(cache, releases) or DRIVER_DEFAULT
        recorded = ", ".join(where) or "not read: no Python code (CUDA documentation, environment variables)"
        lines.append(
            f"| {cache.name} | {cache.writer} | {default} | {folder} | {variable} | {cache.key} | "
            f"{cache.scope.value}: {cache.why} | {recorded} |"
        )
    lines += ["", f"Mirrored by {TESTS}.", "", END]
    return "\n".join(lines)


def replace_section(document: str, releases: dict[str, dict]) -> str:
    """The document with its rendered section replaced (or added before the first section after the vLLM one)."""
    section = render(releases)
    if BEGIN in document and END in document:
        head, rest = document.split(BEGIN, 1)
        return head + section + rest.split(END, 1)[1]
    anchor = "\n## Run:ai Model Streamer"
    head, rest = document.split(anchor, 1)
    return f"{head}\n## Engine caches (issue 48)\n\n{section}\n{anchor}{rest}"
