"""Streamer tuning, pod sizing and compile-cache paths, and the refusals they feed."""

import json

import pytest

from tests.builders import only_problem, problems, raw
from tests.fixes import refused
from warmstart.catalog import default_catalog
from warmstart.config.base import GIB
from warmstart.loader import parse_config
from warmstart.sizing import default_requests
from warmstart.workload import (
    is_under,
    plan_model,
    streamer_buffer_bytes,
    streamer_concurrency,
    vllm_args,
    vllm_env,
)

FOUR_GIB = 4 * GIB


@pytest.mark.parametrize("size_gb, expected", [(10, 3), (67, 17), (140, 35), (4, 1), (4.1, 2), (0.5, 1)])
def test_concurrency_is_size_over_chunk_rounded_up(size_gb, expected):
    assert streamer_concurrency(size_gb, FOUR_GIB, ceiling=64) == expected


def test_concurrency_respects_the_ceiling_and_smaller_chunks():
    assert streamer_concurrency(600, FOUR_GIB, ceiling=64) == 64
    assert streamer_concurrency(10, 2 * GIB, ceiling=64) == 5


def test_streamer_buffer_is_capped_by_the_memory_limit_per_process():
    assert streamer_buffer_bytes(3, FOUR_GIB, 40 * 10**9, 1) == 12 * GIB
    assert streamer_buffer_bytes(17, FOUR_GIB, 40 * 10**9, 2) == 2 * 40 * 10**9


def test_from_streamer_0_17_0_the_memory_limit_is_the_nodes_total_shared_by_its_ranks():
    """runai-model-streamer 0.17.0 distributed_streamer.py `rank_memory_limit`: each rank of the node buffers
    max(limit // ranks, its largest range) (its test_rank_memory_limit.py: 8000 over 8 ranks is 1000 each)."""
    from warmstart.workload import limit_is_node_total

    assert streamer_buffer_bytes(17, FOUR_GIB, 40 * 10**9, 2, node_total=True) == 40 * 10**9
    assert streamer_buffer_bytes(35, FOUR_GIB, 8 * GIB, 4, node_total=True) == 4 * FOUR_GIB  # floored at a chunk
    assert streamer_buffer_bytes(3, FOUR_GIB, 40 * 10**9, 1, node_total=True) == 12 * GIB  # one process: as before
    assert (limit_is_node_total("0.15.9"), limit_is_node_total("0.17.0"), limit_is_node_total("0.17.1")) == (
        False,
        True,
        True,
    )
    config = parse_config(raw("prod"))  # vLLM 0.34.0's image ships 0.17.1
    plans = {m.name: plan_model(m, config, default_catalog()) for m in config.models}
    assert all(p.streamer_limit_per_node == (p.tensor_parallel_size > 1) for p in plans.values())


def test_default_requests_take_the_gpu_share_of_the_smallest_candidate(catalog):
    assert default_requests([catalog.instance("g6e.xlarge")], 1) == (3, 24)
    assert default_requests([catalog.instance("p5.48xlarge")], 2) == (36, 384)
    both = [catalog.instance("g6e.xlarge"), catalog.instance("g6e.2xlarge")]
    assert default_requests(both, 1) == (3, 24)


@pytest.mark.parametrize(
    "path, root, expected",
    [
        ("/mnt/.ephemeral/compile-cache", "/mnt/.ephemeral", True),
        ("/mnt/.ephemeral/a/b/", "/mnt/.ephemeral", True),
        ("/mnt/.ephemeral", "/mnt/.ephemeral", False),
        ("/mnt/.ephemeral/../etc", "/mnt/.ephemeral", False),
        ("/mnt/.ephemeral-other/x", "/mnt/.ephemeral", False),
        ("/var/lib/compile-cache", "/mnt/k8s-disks/0", False),
        ("/mnt/k8s-disks/0//x", "/mnt/k8s-disks/0", False),
    ],
)
def test_is_under(path, root, expected):
    assert is_under(path, root) is expected


def _plans(name):
    from warmstart.catalog import default_catalog

    config = parse_config(raw(name))
    return {m.name: plan_model(m, config, default_catalog()) for m in config.models}


def test_seed_models_plan_as_the_brief_says():
    dev = _plans("dev")["qwen3-4b"]
    assert (dev.tensor_parallel_size, dev.concurrency, dev.distributed) == (1, 3, False)
    prod = _plans("prod")
    assert (prod["qwen3-6-35b-a3b"].tensor_parallel_size, prod["qwen3-6-35b-a3b"].concurrency) == (2, 17)
    assert prod["qwen3-6-35b-a3b"].distributed is True
    assert (prod["llama-3-3-70b"].tensor_parallel_size, prod["llama-3-3-70b"].concurrency) == (4, 35)


def test_vllm_args_follow_the_reference_deployment():
    plan = _plans("prod")["qwen3-6-35b-a3b"]
    args = vllm_args(plan)
    # `vllm serve <model>` (0.34.0's CLI; --model is deprecated there).
    assert plan.server_command == ["vllm", "serve"]
    assert args[:2] == ["s3://acme-llm-weights-prod/qwen3.6-35b-a3b/", "--load-format=runai_streamer"]
    extra = next(a for a in args if a.startswith("--model-loader-extra-config="))
    assert json.loads(extra.split("=", 1)[1]) == {"concurrency": 17, "distributed": True}
    for expected in (
        "--tensor-parallel-size=2",
        "--max-model-len=8192",
        "--host=0.0.0.0",
        "--port=8000",
        "--served-model-name=qwen3-6-35b-a3b",
    ):
        assert expected in args
    assert "--enforce-eager" not in args


def test_single_gpu_models_never_ask_for_distributed_streaming():
    args = vllm_args(_plans("dev")["qwen3-4b"])
    extra = next(a for a in args if a.startswith("--model-loader-extra-config="))
    assert json.loads(extra.split("=", 1)[1]) == {"concurrency": 3}


def test_environment_carries_streamer_tuning_and_one_compile_cache_root():
    env = vllm_env(_plans("dev")["qwen3-4b"])
    assert env["RUNAI_STREAMER_CHUNK_BYTESIZE"] == "4294967296"
    assert env["RUNAI_STREAMER_S3_REQUEST_TIMEOUT_MS"] == "3000"
    assert env["RUNAI_STREAMER_S3_LOW_SPEED_LIMIT"] == "1048576"
    # Inside the folder the agent restores into the one kubelet made: /compile-cache/cache.
    assert env["XDG_CACHE_HOME"] == "/compile-cache/cache"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == "/compile-cache/cache/inductor"
    assert env["TRITON_CACHE_DIR"] == "/compile-cache/cache/triton"
    assert env["VLLM_CACHE_ROOT"] == "/compile-cache/cache/vllm"
    # One fixed path for the model's config and tokenizer: part of the model path vLLM hashes.
    assert env["VLLM_ASSETS_CACHE"] == "/warmstart-assets"


def test_compile_cache_host_path_follows_the_compute_mode_and_the_configuration():
    dev = _plans("dev")["qwen3-4b"]
    assert dev.compile_cache_root == "/mnt/.ephemeral/compile-cache"
    assert dev.compile_host_path == f"/mnt/.ephemeral/compile-cache/qwen3-4b/{dev.factors.fingerprint()}"
    prod = _plans("prod")["llama-3-3-70b"]
    assert prod.compile_host_path == f"/mnt/k8s-disks/0/compile-cache/llama-3-3-70b/{prod.factors.fingerprint()}"


def test_a_compile_relevant_change_moves_the_model_to_a_fresh_folder():
    document = raw()
    before = _plan_of(document)
    document["models"][0]["max_model_len"] = 4096
    after = _plan_of(document)
    assert before.compile_host_path != after.compile_host_path
    document = raw()
    document["models"][0]["autoscaling"]["max_replicas"] = 3  # not compile-relevant
    assert _plan_of(document).compile_host_path == before.compile_host_path


def _plan_of(document):
    from warmstart.catalog import default_catalog

    config = parse_config(document)
    return plan_model(config.models[0], config, default_catalog())


def test_compile_cache_override_under_the_mount_is_used():
    document = raw()
    document["caches"]["compile_host_path"] = "/mnt/.ephemeral/warmstart/compile"
    plan = _plan_of(document)
    assert plan.compile_cache_root == "/mnt/.ephemeral/warmstart/compile"
    assert plan.compile_host_path.startswith("/mnt/.ephemeral/warmstart/compile/qwen3-4b/")


def test_compile_relevant_settings_reach_vllm():
    document = raw()
    model = document["models"][0]
    model.update(
        max_num_batched_tokens=4096,
        dtype="bfloat16",
        quantization="fp8",
        kv_cache_dtype="fp8",
        compilation_config={"cudagraph_capture_sizes": [1, 2, 4]},
        vllm_env={"VLLM_USE_V1": "1"},
    )
    plan = _plan_of(document)
    args = vllm_args(plan)
    for expected in (
        "--max-num-batched-tokens=4096",
        "--dtype=bfloat16",
        "--quantization=fp8",
        "--kv-cache-dtype=fp8",
        '--compilation-config={"cudagraph_capture_sizes":[1,2,4]}',
    ):
        assert expected in args
    assert vllm_env(plan)["VLLM_USE_V1"] == "1"
    assert plan.factors.vllm_env == {"VLLM_USE_V1": "1"}


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("VLLM_HOST_IP", "10.0.0.1", "differs per pod"),
        ("VLLM_CACHE_ROOT", "/elsewhere", "differs per pod"),
        ("VLLM_ASSETS_CACHE", "/elsewhere", "model path vLLM hashes"),
        ("VLLM_API_KEY", "sk-123", "clear text"),
        ("VLLM_TAG", "$(POD_NAME)", "no $(...) expansion"),
        ("CUDA_VISIBLE_DEVICES", "0", "only VLLM_"),
    ],
)
def test_vllm_env_that_would_break_the_compile_hash_is_refused(name, value, message):
    document = raw()
    document["models"][0]["vllm_env"] = {name: value}
    problem = only_problem(document)
    assert problem.field == f"models[0].vllm_env.{name}" and message in problem.message


def test_a_plugin_list_that_leaves_out_warmstarts_is_refused_where_the_weights_cache_is_on():
    document = raw()
    document["caches"]["weights"] = True
    document["models"][0]["vllm_env"] = {"VLLM_PLUGINS": "lora_filesystem_resolver"}
    problem = only_problem(document)
    assert problem.field == "models[0].vllm_env.VLLM_PLUGINS"
    assert "warmstart_node_copy" in problem.message and "local files" in problem.message
    assert "add warmstart_node_copy" in problem.fix
    document["models"][0]["vllm_env"] = {"VLLM_PLUGINS": "lora_filesystem_resolver,warmstart_node_copy"}
    parse_config(document)  # listed: accepted
    document["models"][0]["vllm_env"] = {"VLLM_PLUGINS": "lora_filesystem_resolver"}
    document["models"][0]["weights_cache"] = False
    parse_config(document)  # no node copy, nothing to read through the plugin


def test_the_plugin_name_the_config_asks_for_is_the_one_vllm_finds():
    from model_workload.pod_spec import ENTRY_FILES, PLUGIN_DIST_INFO
    from model_workload.runtime.node_copy_loader import PLUGIN_NAME
    from warmstart.reserved_vllm_env import NODE_COPY_PLUGIN

    entry_points = ENTRY_FILES[f"{PLUGIN_DIST_INFO}/entry_points.txt"].read_text().splitlines()
    assert entry_points == ["[vllm.general_plugins]", f"{NODE_COPY_PLUGIN} = node_copy_loader:register"]
    assert PLUGIN_NAME == NODE_COPY_PLUGIN


# Refusals


def test_compile_cache_override_outside_the_nvme_mount_is_refused():
    document = raw()
    document["caches"]["compile_host_path"] = "/mnt/k8s-disks/0/compile-cache"  # Karpenter's mount, not Auto Mode's
    problem = only_problem(document)
    assert problem.field == "caches.compile_host_path"
    assert "EBS" in problem.message and "/mnt/.ephemeral/" in problem.fix


def test_enforce_eager_with_compile_cache_is_refused():
    document = raw()
    document["models"][0]["enforce_eager"] = True
    problem = only_problem(document)
    assert problem.field == "models[0].enforce_eager"
    assert "caches.compile: false" in problem.fix


def test_enforce_eager_without_compile_cache_is_allowed_and_warned():
    document = raw()
    document["models"][0]["enforce_eager"] = True
    document["caches"]["compile"] = False
    config = parse_config(document)
    from warmstart.catalog import default_catalog

    plan = plan_model(config.models[0], config, default_catalog())
    assert "--enforce-eager" in vllm_args(plan)
    assert "XDG_CACHE_HOME" not in vllm_env(plan)
    assert plan.compile_host_path is None
    assert any("enforce_eager" in w for w in plan.warnings)


def test_enforce_eager_with_auto_tensor_parallel_size_of_one_is_allowed():
    document = raw()
    document["caches"]["compile"] = False
    document["models"][0]["enforce_eager"] = True
    document["models"][0]["tensor_parallel_size"] = "auto"  # 10 GB on one L40S
    assert parse_config(document).models[0].enforce_eager


def test_enforce_eager_with_tensor_parallel_size_is_refused():
    document = raw("prod")
    document["caches"]["compile"] = False
    document["models"][0]["enforce_eager"] = True
    problem = only_problem(document)
    assert problem.field == "models[0].enforce_eager"
    assert "distributed" in problem.message


def test_streamer_buffers_over_the_memory_request_are_refused_with_the_numbers():
    document = raw()
    document["models"][0]["memory_gib"] = 16  # 3 x 4 GiB buffers + 8 GiB headroom = 20 GiB
    problem = only_problem(document)
    assert problem.field == "models[0].memory_gib"
    assert "1 x min(3 x 4 GiB, 37.3 GiB) = 12.0 GiB" in problem.message
    assert "at least 20" in problem.fix


def test_requests_larger_than_the_instance_are_refused():
    document = raw()
    document["models"][0]["cpu"] = 16
    found = problems(document)
    assert [p.field for p in found] == ["models[0].cpu", "models[0].cpu"]
    assert "g6e.xlarge (4 vCPUs): a node offers 3.819 CPU" in found[0].message
    assert "g6e.2xlarge (8 vCPUs)" in found[1].message
    assert "request at most 3 " in found[0].fix  # what g6e.xlarge offers, in whole CPUs
    document["models"][0]["cpu"] = 3
    assert parse_config(document).models[0].cpu == 3
    document["models"][0]["cpu"] = 3.82  # above what the node offers, below its 3.92 allocatable
    assert [p.field for p in problems(document)] == ["models[0].cpu"]


# Issue 10: startup budget and rollout strategy, derived from the model and the pool.


def test_startup_budget_grows_with_the_weights_and_shrinks_with_parallel_streaming():
    from warmstart.workload import startup_budget_seconds

    config = parse_config(raw("prod"))
    llama = next(m for m in config.models if m.name == "llama-3-3-70b")
    # 140 GB over 4 streaming processes at 0.1 GB/s each, plus compile and engine start, with 1.5x headroom.
    assert startup_budget_seconds(llama, 4) == round((140 / 0.4 + 190) * 1.5)
    assert startup_budget_seconds(llama, 1) > startup_budget_seconds(llama, 4)
    bigger = llama.model_copy(update={"size_gb": 280})
    assert startup_budget_seconds(bigger, 4) > startup_budget_seconds(llama, 4)


def test_startup_budget_has_a_floor_an_eager_discount_and_an_override():
    from warmstart.workload import STARTUP_MINIMUM_SECONDS, startup_budget_seconds

    model = parse_config(raw("dev")).models[0]  # 10 GB, one GPU
    assert startup_budget_seconds(model, 1) == 435  # (100 s + 190 s) x 1.5
    eager = model.model_copy(update={"enforce_eager": True})
    assert startup_budget_seconds(eager, 1) == STARTUP_MINIMUM_SECONDS  # (100 + 60) x 1.5 = 240, below the floor
    assert startup_budget_seconds(model.model_copy(update={"startup_budget_seconds": 1500}), 1) == 1500


def test_the_startup_probe_covers_the_budget():
    for plan in [*_plans("dev").values(), *_plans("prod").values()]:
        covered = 30 + 10 * plan.startup_failure_threshold
        assert plan.startup_budget_seconds <= covered < plan.startup_budget_seconds + 10


def _with_gpu_limit(name: str, limit: int, **model_changes):
    document = raw(name)
    document["compute"]["gpu_pool"]["gpu_limit"] = limit
    for model in document["models"]:
        model.update(model_changes)
    return document


def _plan_named(document, model_name):
    from warmstart.catalog import default_catalog

    config = parse_config(document)
    return plan_model(next(m for m in config.models if m.name == model_name), config, default_catalog())


def test_rollout_surges_into_the_room_the_gpu_budget_keeps():
    # prod on 8-GPU p5 nodes: llama's up to 4 TP-4 replicas on 4 nodes, qwen's 2 TP-2 replicas beside two of
    # them (32 GPUs); each model's rollout pod at once: a fifth node for llama's, qwen's beside a third (40).
    roomy = _plan_named(_with_gpu_limit("prod", 40), "llama-3-3-70b")
    assert roomy.surge and "40 of the pool's 40 GPUs" in roomy.rollout
    assert any(p.fix.startswith("set gpu_limit to at least 40") for p in refused(_with_gpu_limit("prod", 39)))


def test_without_surge_rollouts_replace_one_pod_at_a_time_and_say_what_it_costs():
    document = _with_gpu_limit("prod", 32)
    document["compute"]["gpu_pool"]["surge"] = False
    tight = _plan_named(document, "llama-3-3-70b")
    assert not tight.surge and "one pod at a time" in tight.rollout
    assert "no surge: rollouts run one replica short" in tight.warnings
    single = _with_gpu_limit("dev", 2)  # room for max_replicas 2 on 1-GPU nodes, none for a surge
    single["compute"]["gpu_pool"]["surge"] = False
    assert "no surge: the model is offline during every rollout" in _plan_named(single, "qwen3-4b").warnings


def test_the_deployment_strategy_follows_the_plan(tmp_path):
    import yaml

    from render import render_workloads

    strategies = {}
    for surge in (False, True):
        document = _with_gpu_limit("dev", 8)
        document["compute"]["gpu_pool"]["surge"] = surge
        (path,) = [p for p in render_workloads(parse_config(document), tmp_path / str(surge)) if p.stem == "qwen3-4b"]
        (deployment,) = [o for o in yaml.safe_load_all(path.read_text()) if o["kind"] == "Deployment"]
        strategies[surge] = deployment["spec"]["strategy"]["rollingUpdate"]
    assert strategies == {False: {"maxSurge": 0, "maxUnavailable": 1}, True: {"maxSurge": 1, "maxUnavailable": 0}}


def test_the_agent_selects_exactly_the_pods_the_chart_labels():
    from contracts.pod_labels import model_labels
    from node_agent.runtime.agent import VLLM_POD_SELECTOR

    wanted = dict(pair.split("=") for pair in VLLM_POD_SELECTOR.split(","))
    for name in ("qwen3-4b", "llama-3-3-70b"):
        labels = model_labels(name)
        assert all(labels[key] == value for key, value in wanted.items())
    assert "app.kubernetes.io/instance" not in wanted  # every model's pods, not one model's
