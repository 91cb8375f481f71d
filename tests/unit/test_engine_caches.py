"""The engine's caches (contracts/engine_caches.py) against every supported release's recorded facts
(warmstart/vllm_releases/, "caches": read from the packages by tests/real_vllm/record_caches.py), the pods'
variables, the archive's content and the per-start record."""

from __future__ import annotations

import copy
import os
import posixpath
import time

import pytest

from contracts.engine_caches import (
    ENGINE_CACHES,
    STARTUP_PLAN_VARIABLE,
    UNLISTED,
    USE_WORDS,
    VLLM_ROOT_FOLDER,
    Scope,
    cache_of,
    travels,
)
from contracts.node_layout import COMPILE_CACHE_CONTENT
from contracts.start_record import StartTimeline
from node_agent.runtime.archive import pack, packable_files
from node_agent.runtime.engine_cache_use import CacheFiles, cache_files, engine_cache_use
from node_agent.runtime.vllm_log import engine_cache_lines
from tests.builders import only_problem, raw, start_record
from tests.synth import ROOT
from tests.upstream.engine_caches_table import BEGIN, END, render, unnamed_folders
from warmstart.catalog import default_catalog
from warmstart.loader import parse_config
from warmstart.vllm_release import releases, version_key
from warmstart.workload import COMPILE_CACHE_MOUNT, VLLM_ASSETS_MOUNT, plan_model, vllm_env
from warmstart_cli.status import render_starts

CONTENT = f"{COMPILE_CACHE_MOUNT}/{COMPILE_CACHE_CONTENT}"


@pytest.mark.parametrize("version", list(releases()))
def test_every_folder_a_supported_release_writes_is_in_the_inventory(version):
    assert unnamed_folders(releases()[version].caches) == [], (
        f"vLLM {version} writes caches contracts/engine_caches.py does not name: say where each goes and whether "
        "it may travel"
    )


def test_the_inventory_check_fails_on_a_release_that_adds_a_folder():
    newest = releases()[max(releases(), key=version_key)].caches
    grown = copy.deepcopy(newest)
    grown["vllm_cache_root"]["kernel_plans"] = ["vllm/v1/worker/kernel_plans.py"]
    grown["defaults"].append(["quack", "$HOME/.cache/quack"])
    assert unnamed_folders(grown) == ["VLLM_CACHE_ROOT/kernel_plans", "library cache quack"]


def test_each_vllm_cache_is_recorded_from_the_release_the_inventory_says():
    for cache in (c for c in ENGINE_CACHES if c.vllm_name is not None):
        for version, release in releases().items():
            written = cache.vllm_name in release.caches["vllm_cache_root"]
            expected = cache.since is None or version_key(version) >= version_key(cache.since)
            assert written == expected, (cache.name, version)


def test_every_library_default_is_lost_with_the_pod():
    """Why warmstart moves them: each library's own default is in the pod's HOME or /tmp."""
    for version, release in releases().items():
        for name, path in release.caches["defaults"]:
            assert path is None or path.startswith(("$HOME/", "$TMPDIR/")), (version, name, path)


def _plans(name: str, **model_changes):
    document = raw(name)
    for model in document["models"]:
        model.update(model_changes)
    config = parse_config(document)
    return [plan_model(m, config, default_catalog()) for m in config.models]


@pytest.mark.parametrize("environment", ["dev", "prod", "existing"])
def test_every_cache_variable_points_into_the_nodes_compile_cache(environment):
    for plan in _plans(environment):
        if not plan.compile_cache:
            continue
        env = vllm_env(plan)
        assert env["VLLM_CACHE_ROOT"] == f"{CONTENT}/{VLLM_ROOT_FOLDER}"
        assert env["XDG_CACHE_HOME"] == CONTENT
        for cache in ENGINE_CACHES:
            if cache.variable is None:
                continue
            if cache.scope is Scope.MOVED:
                assert env[cache.variable] == VLLM_ASSETS_MOUNT
                continue
            assert env[cache.variable] == posixpath.join(CONTENT, cache.folder), cache.name
        for name, value in env.items():
            if value.startswith("/") and name not in ("VLLM_ASSETS_CACHE",):
                assert value.startswith(CONTENT + "/") or value == CONTENT, (name, value)


def test_the_startup_plan_is_on_where_the_release_has_it_and_the_model_may_turn_it_off():
    (plan, *_) = _plans("dev")
    assert STARTUP_PLAN_VARIABLE in releases()["0.34.0"].known_env
    assert vllm_env(plan)[STARTUP_PLAN_VARIABLE] == "1"
    (older, *_) = _plans("dev", image="vllm/vllm-openai:v0.21.0")
    assert STARTUP_PLAN_VARIABLE not in releases()["0.21.0"].known_env
    assert STARTUP_PLAN_VARIABLE not in vllm_env(older)
    (off, *_) = _plans("dev", vllm_env={STARTUP_PLAN_VARIABLE: "0"})
    assert vllm_env(off)[STARTUP_PLAN_VARIABLE] == "0"


def test_the_startup_plan_never_enters_the_compile_hash():
    for version, release in releases().items():
        assert STARTUP_PLAN_VARIABLE not in release.hashed_env, version


def test_a_model_may_not_move_flashinfers_autotune_cache_off_the_nvme():
    document = raw("dev")
    document["models"][0]["vllm_env"] = {"VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR": "/root/autotune"}
    problem = only_problem(document)
    assert problem.field == "models[0].vllm_env.VLLM_FLASHINFER_AUTOTUNE_CACHE_DIR"
    assert "NVMe" in problem.message


def _content(tmp_path):
    content = tmp_path / "cache"
    for cache in ENGINE_CACHES:
        file = content / cache.folder.replace("*", "0,1")
        if not cache.folder.endswith(".json"):
            file = file / "entry.bin"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(cache.name.encode())
    (content / "quack" / "entry.bin").parent.mkdir()
    (content / "quack" / "entry.bin").write_bytes(b"unlisted")
    return content


def test_the_archive_leaves_the_nodes_own_caches_on_the_node(tmp_path):
    content = _content(tmp_path)
    names = packable_files(content, max_files=100)
    assert names is not None
    packed = pack(content, tmp_path / "archive.tar.zst", max_files=100)
    assert sorted(packed.names) == names
    carried = {cache_of(name).name if cache_of(name) else UNLISTED for name in names}
    node_only = {cache.name for cache in ENGINE_CACHES if cache.scope is Scope.NODE}
    assert node_only >= {"gpu_p2p_access", "cuda_jit", "cutile", "huggingface"}
    # Only the portable caches the inventory names: not the node's own, not a folder no one checked (unlisted).
    assert carried == {cache.name for cache in ENGINE_CACHES if cache.scope is Scope.ARCHIVED}
    assert all(travels(name) for name in names)


def test_a_file_is_in_the_cache_whose_folder_holds_it():
    assert cache_of("vllm/deep_gemm/cache/kernel.cubin").name == "deep_gemm"
    assert cache_of("vllm/gpu_p2p_access_cache_for_0,1,2,3.json").name == "gpu_p2p_access"
    assert cache_of("vllm/deep_gemm_extra/x") is None  # a sibling sharing a prefix is not in it
    assert cache_of("flashinfer/.cache/flashinfer/0.7.4/90a/cached_ops/x.so").name == "flashinfer"
    assert not travels("nv-compute-cache/ComputeCache/index")
    assert not travels("quack/entry.bin") and not travels("huggingface/token")
    assert not travels("flashinfer/.cache/flashinfer/0.7.4/flashinfer_jit.log")
    assert not travels("flashinfer/.cache/flashinfer/cubins/abc/kernel.cubin")  # downloaded, not built
    assert travels("flashinfer/.cache/flashinfer/0.7.4/90a/cached_ops/norm/norm.so")


def _old(path, seconds_ago):
    stamp = time.time() - seconds_ago
    os.utime(path, (stamp, stamp))


def test_a_start_that_wrote_into_a_cache_filled_it_and_one_that_found_it_had_it(tmp_path):
    content = _content(tmp_path)
    for file in content.rglob("*"):
        if file.is_file():
            _old(file, 3600)
    started = time.time() - 60
    (content / "vllm" / "deep_gemm" / "new.cubin").write_bytes(b"jit")
    log = content / "flashinfer" / ".cache" / "flashinfer" / "0.7.4" / "flashinfer_jit.log"
    log.parent.mkdir(parents=True)
    log.write_text("appended on every import\n")  # FlashInfer's own log: no kernel compiled
    files, stopped = cache_files(content, started)
    assert not stopped
    assert files["deep_gemm"] == CacheFiles(files=2, written=1)
    use = engine_cache_use(files, {})
    assert use["deep_gemm"] == "written" and use["triton"] == "present" and use["cuda_jit"] == "present"
    assert use["flashinfer"] == "present"
    assert "torch_compile_cache" not in use and "dummy_cache" not in use  # judged apart / never read back
    assert use[UNLISTED] == "present"
    said = engine_cache_lines(
        [
            "(EngineCore pid=1) INFO 12-05 10:00:00 [startup_plan.py:155] Applying persisted startup plan "
            "(fingerprint 0123abcd0123abcd): kv_cache_memory_bytes=1 (0.00 GiB), recorded free-memory baseline "
            "70.00 GiB, current 70.10 GiB. Memory profiling will be skipped.",
        ]
    )
    assert engine_cache_use(files, said)["startup_plan"] == "loaded"


def test_vllms_lines_say_what_became_of_the_startup_plan_and_the_autotune_file():
    refused = [
        "INFO [startup_plan.py:125] Startup plan not applied: current free memory (60.00 GiB) is below the "
        "recorded baseline (70.00 GiB); falling back to full memory profiling.",
        "INFO [startup_plan.py:190] Saved startup plan to /compile-cache/cache/vllm/startup_plan/x.json",
    ]
    assert engine_cache_lines(refused) == {"startup_plan": "refused"}
    assert engine_cache_lines(refused[1:]) == {"startup_plan": "written"}
    file = "INFO [kernel_warmup.py:603] Using FlashInfer autotune cache file: /c/a.json. Pass --disable-flashinfer-"
    ran = "INFO [kernel_warmup.py:477] Running FlashInfer autotune with 8192 tokens and token buckets [1, 2]."
    assert engine_cache_lines([file]) == {"flashinfer_autotune_cache": "loaded"}
    # It tuned: whether it wrote anything (vLLM saves only what is new) the files tell; so on the managed path.
    assert engine_cache_lines([file, ran]) == {}
    assert engine_cache_lines([ran]) == {}


def test_the_walk_follows_no_link_and_stops_at_its_bound(tmp_path):
    content = tmp_path / "cache"
    (content / "triton").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    for index in range(5):
        (outside / f"f{index}").write_bytes(b"x")
    (content / "triton" / "link").symlink_to(outside)
    (content / "triton" / "file-link").symlink_to(outside / "f0")
    os.mkfifo(content / "triton" / "fifo")
    files, stopped = cache_files(content, 0.0)
    assert files == {} and not stopped
    for index in range(10):
        (content / "triton" / f"k{index}").write_bytes(b"k")
    files, stopped = cache_files(content, 0.0, max_files=4)
    assert stopped and sum(f.files for f in files.values()) <= 4
    assert cache_files(tmp_path / "gone", 0.0) == ({}, False)


def _record(**changes) -> dict:
    document = start_record("qwen3-4b", new_node=True, compile_cache="hit", phases={"compile": 6.0})
    document.update(changes)
    return document


@pytest.mark.parametrize(
    "caches",
    [
        "deep_gemm",
        ["deep_gemm"],
        {"deep_gemm": "compiled"},
        {"deep_gemm": 1},
        {"x" * 65: "written"},
        {f"cache{i}": "written" for i in range(33)},
        {"": "written"},
    ],
)
def test_a_start_record_with_a_hostile_engine_caches_field_is_skipped(caches):
    assert StartTimeline.from_dict(_record(engine_caches=caches)) is None


def test_a_start_record_says_which_caches_it_filled_and_status_shows_them():
    timeline = StartTimeline.from_dict(
        _record(engine_caches={"deep_gemm": "written", "startup_plan": "loaded", "triton": "present"})
    )
    assert timeline is not None and timeline.engine_caches["deep_gemm"] == "written"
    assert StartTimeline.from_dict({k: v for k, v in _record().items() if k != "engine_caches"}) is not None
    shown = render_starts(parse_config(raw("dev")), [timeline])
    assert "written deep_gemm" in shown and "loaded startup_plan" in shown
    assert set(USE_WORDS) == {"loaded", "written", "present", "refused"}


def test_the_documents_table_is_the_one_rendered_from_the_recorded_releases():
    document = (ROOT / "docs" / "upstream-facts.md").read_text()
    recorded = {version: {"caches": release.caches} for version, release in releases().items()}
    section = document[document.index(BEGIN) : document.index(END) + len(END)]
    assert section == render(recorded), "run: python -m tests.real_vllm.record_caches <versions>"
