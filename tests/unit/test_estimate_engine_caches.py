"""The estimate's engine caches: DeepGEMM's JIT kernels (the `kernels` phase) and vLLM's startup plan (memory
profiling taken out of the engine's start), each from a cited figure (docs/estimate.md, "Parameters")."""

from __future__ import annotations

import pytest

from tests.builders import raw
from warmstart.catalog import default_catalog
from warmstart.estimate import CASES, MODELLED, PUBLISHED, estimate_model, jit_compiles_deep_gemm
from warmstart.estimate_report import advise, render_estimates
from warmstart.loader import parse_config

FP8_URI = "s3://acme-llm-weights-prod/qwen3-30b-a3b-fp8/"


def _config(instance_type: str = "p5.48xlarge", **model_changes):
    document = raw("prod")
    document["models"] = document["models"][:1]
    document["models"][0].update(model_changes)
    document["compute"]["gpu_pool"]["instance_types"] = [instance_type]
    return parse_config(document)


@pytest.mark.parametrize(
    ("instance_type", "changes", "expected"),
    [
        ("p5.48xlarge", {"s3_uri": FP8_URI}, True),  # H100, sm_90
        ("p5.48xlarge", {"quantization": "fp8"}, True),
        ("p5.48xlarge", {}, False),  # a bf16 model
        ("p6-b200.48xlarge", {"s3_uri": FP8_URI}, True),  # B200, sm_100
        ("g6e.12xlarge", {"s3_uri": FP8_URI}, False),  # L40S, sm_89: no DeepGEMM
        ("p4d.24xlarge", {"s3_uri": FP8_URI}, False),  # A100, sm_80
    ],
)
def test_deep_gemm_compiles_for_fp8_models_on_hopper_and_blackwell(instance_type, changes, expected):
    config = _config(instance_type, **changes)
    instance = default_catalog().instance(instance_type)
    assert jit_compiles_deep_gemm(config.models[0], instance) is expected


def test_a_node_without_the_cache_pays_for_the_kernels_and_warmstart_restores_them():
    config = _config(s3_uri=FP8_URI)
    cold, new, warm = estimate_model(config.models[0], config, default_catalog()).cases
    assert cold.phase("kernels").seconds == config.estimate.deep_gemm_jit_seconds == 93.7
    assert cold.phase("kernels").basis == PUBLISHED
    assert new.phase("kernels").seconds == warm.phase("kernels").seconds == 0
    document = raw("prod")
    document["models"] = document["models"][:1]
    document["models"][0]["s3_uri"] = FP8_URI
    document["caches"]["compile"] = False
    off = parse_config(document)
    _, new_off, warm_off = estimate_model(off.models[0], off, default_catalog()).cases
    assert new_off.phase("kernels").seconds == warm_off.phase("kernels").seconds == 93.7
    advice = advise(estimate_model(off.models[0], off, default_catalog()), off, default_catalog(), CASES[1])
    assert advice.phase == "kernels" and advice.setting == "caches.compile: true" and advice.saving
    shown = render_estimates([estimate_model(config.models[0], config, default_catalog())], config, default_catalog())
    assert "JIT-compiles DeepGEMM's kernels on a node that has none (94 s)" in shown


def test_the_startup_plan_spares_a_node_its_profiling_where_the_release_has_it():
    config = _config()
    cold, new, warm = estimate_model(config.models[0], config, default_catalog()).cases
    full, saved = config.estimate.engine_seconds, config.estimate.profiling_seconds
    assert cold.phase("engine").seconds == full
    assert new.phase("engine").seconds == warm.phase("engine").seconds == pytest.approx(full - saved)
    assert new.phase("engine").basis == MODELLED and "startup plan" in new.phase("engine").how
    for older in (_config(image="vllm/vllm-openai:v0.21.0"), _config(vllm_env={"VLLM_ENABLE_STARTUP_PLAN": "0"})):
        _, new_older, _ = estimate_model(older.models[0], older, default_catalog()).cases
        assert new_older.phase("engine").seconds == full


def test_the_plan_never_takes_more_than_the_engine_start():
    document = raw("prod")
    document["models"] = document["models"][:1]
    document["estimate"] = {"engine_seconds": 5, "profiling_seconds": 12}
    config = parse_config(document)
    _, new, _ = estimate_model(config.models[0], config, default_catalog()).cases
    assert new.phase("engine").seconds == 0
