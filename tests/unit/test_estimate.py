"""`warmstart plan --estimate`: each phase on its own, the three cases, and the calibration against the published
figures (docs/estimate.md lists them and says how each maps onto our phases)."""

from __future__ import annotations

import struct

import pytest
import yaml

from tests.synth import ROOT
from warmstart.catalog import default_catalog
from warmstart.config import EnvironmentConfig, ModelSpec, StartEstimate
from warmstart.estimate import (
    CASES,
    PHASES,
    baseline_weights_seconds,
    compile_seconds,
    estimate_environment,
    estimate_model,
    image_pull_seconds,
    nat_share_gb_per_s,
    node_copy_weights_seconds,
    render_estimates,
    streamed_weights_seconds,
)
from warmstart.loader import load_config

DEFAULTS = StartEstimate()
TOLERANCE = 0.25  # the bound: within 25% of each published figure


def _prod(**model_changes) -> EnvironmentConfig:
    raw = yaml.safe_load((ROOT / "config" / "prod.yaml").read_text())
    model = {**raw["models"][1], **model_changes}  # llama-3-3-70b, without measured compile times
    raw["models"] = [model]
    return EnvironmentConfig.model_validate(raw)


def _model(size_gb: float, **extra) -> ModelSpec:
    return _prod(size_gb=size_gb, **extra).models[0]


def within(estimate: float, published: float) -> bool:
    return abs(estimate - published) <= TOLERANCE * published


# ---- each phase ----


def test_compile_defaults_grow_with_size_and_measured_times_win():
    assert compile_seconds(_model(60), DEFAULTS, cached=False) == pytest.approx(50.2 + 0.0466 * 60)
    assert compile_seconds(_model(60), DEFAULTS, cached=True) == 6
    measured = _model(60, compile_seconds={"cold": 65, "cached": 16})
    assert (compile_seconds(measured, DEFAULTS, cached=False), compile_seconds(measured, DEFAULTS, cached=True)) == (
        65,
        16,
    )


def test_image_pull_scales_with_size_and_parallel_pull_only_by_its_setting():
    model = _model(10)
    assert image_pull_seconds(model, DEFAULTS, parallel_pull=False) == 10 * 36
    assert image_pull_seconds(_model(10, image_size_gb=5), DEFAULTS, parallel_pull=False) == 5 * 36
    faster = StartEstimate(parallel_pull_speedup=2.0)
    assert image_pull_seconds(model, faster, parallel_pull=True) == 180
    assert image_pull_seconds(model, faster, parallel_pull=False) == 360  # off: no speed-up


def test_the_nat_is_shared_by_the_nodes_scaling_out_and_the_gateway_is_not():
    p5 = default_catalog().instance("p5.48xlarge")
    assert nat_share_gb_per_s(DEFAULTS, 1) == pytest.approx(10 / 8)
    assert nat_share_gb_per_s(DEFAULTS, 5) == pytest.approx(10 / 8 / 5)
    one, _ = baseline_weights_seconds(100, p5, DEFAULTS, 1)
    five, how = baseline_weights_seconds(100, p5, DEFAULTS, 5)
    assert one == pytest.approx(100 / 1.25 + 100 / 1.0) and five == pytest.approx(100 / 0.25 + 100 / 1.0)
    assert "NAT 0.25 GB/s" in how
    streamed, how = streamed_weights_seconds(100, p5, DEFAULTS, concurrency=25, processes=2)
    assert streamed == pytest.approx(100 / 5.0) and "gateway" in how


def test_the_instance_network_caps_every_path():
    small = default_catalog().instance("g6e.xlarge")  # 2.5 Gbit/s
    streamed, _ = streamed_weights_seconds(10, small, DEFAULTS, concurrency=100, processes=1)
    assert streamed == pytest.approx(10 / (2.5 / 8))
    baseline, _ = baseline_weights_seconds(10, small, DEFAULTS, 1)
    assert baseline == pytest.approx(10 / (2.5 / 8) + 10)


def test_the_node_copy_reads_at_the_catalogs_nvme_figure_or_the_default():
    catalog = default_catalog()
    assert node_copy_weights_seconds(60, catalog.instance("p5.48xlarge"), DEFAULTS)[0] == pytest.approx(2)
    assert node_copy_weights_seconds(60, catalog.instance("g6e.xlarge"), DEFAULTS)[0] == pytest.approx(30)


# ---- the three cases ----


def test_three_cases_with_every_phase_in_order():
    estimate = estimate_model(_prod().models[0], _prod(), default_catalog())
    assert [case.case for case in estimate.cases] == list(CASES)
    for case in estimate.cases:
        assert [phase.name for phase in case.phases] == list(PHASES)
    cold, new, warm = estimate.cases
    assert cold.seconds("restore") == 0 and new.seconds("restore") == DEFAULTS.restore_seconds
    assert warm.seconds("node") == 0 and warm.seconds("image") == DEFAULTS.image_present_seconds
    assert cold.total_seconds > new.total_seconds > warm.total_seconds


def test_an_image_snapshot_puts_the_image_on_a_new_node_and_a_prepull_does_not():
    snapshot = _prod(instance_types=None)
    raw = snapshot.model_dump()
    raw["compute"]["ami_alias"] = "bottlerocket@v1.50.0"
    raw["image_preload"] = {"mode": "snapshot"}
    with_snapshot = EnvironmentConfig.model_validate(raw)
    new = estimate_model(with_snapshot.models[0], with_snapshot, default_catalog()).cases[1]
    assert new.seconds("image") == DEFAULTS.image_present_seconds
    prepull = estimate_model(snapshot.models[0], snapshot, default_catalog()).cases[1]
    assert prepull.seconds("image") == 360  # the pod pulls beside the DaemonSet: no gain on its first node


def test_without_the_compile_cache_a_new_node_compiles_from_nothing_and_eager_never_compiles():
    raw = _prod().model_dump()
    raw["caches"]["compile"] = False
    no_cache = EnvironmentConfig.model_validate(raw)
    new = estimate_model(no_cache.models[0], no_cache, default_catalog()).cases[1]
    assert new.seconds("restore") == 0 and new.seconds("compile") == pytest.approx(50.2 + 0.0466 * 140)
    raw["models"][0]["enforce_eager"] = True
    eager = EnvironmentConfig.model_validate(raw)
    assert all(case.seconds("compile") == 0 for case in estimate_model(eager.models[0], eager, default_catalog()).cases)


def test_a_warm_node_without_the_weights_cache_streams_from_s3():
    config = load_config(ROOT / "config" / "dev.yaml")  # caches.weights: false
    warm = estimate_model(config.models[0], config, default_catalog()).cases[2]
    assert "streamer" in next(p.how for p in warm.phases if p.name == "weights")


def test_the_shipped_configs_estimate_offline_and_render():
    for env in ("dev", "prod"):
        config = load_config(ROOT / "config" / f"{env}.yaml")
        estimates = estimate_environment(config, default_catalog(), nodes=3)
        text = render_estimates(estimates)
        for estimate in estimates:
            assert f"model {estimate.model} on {estimate.instance_type}, 3 node(s)" in text
        assert text.count("cold node, no warmstart") == len(config.models)


# ---- calibration against the published figures ----


def _cold_total(size_gb: float, instance_type: str, nodes: int = 1) -> float:
    config = _prod(size_gb=size_gb, instance_types=[instance_type])
    return estimate_model(config.models[0], config, default_catalog(), nodes=nodes).cases[0].total_seconds


@pytest.mark.parametrize(("size_gb", "published_s"), [(60, 53), (140, 60), (640, 80)])
def test_calibration_first_compile_by_model_size(size_gb, published_s):
    """torch.compile of the first pod: ~53 s (60 GB), ~60 s (140 GB), ~80 s (640 GB)."""
    assert within(compile_seconds(_model(size_gb), DEFAULTS, cached=False), published_s)


def test_calibration_later_pods_compile_in_about_six_seconds():
    assert within(compile_seconds(_model(140), DEFAULTS, cached=True), 6)


def test_calibration_qwen_on_p5_with_and_without_the_cross_node_cache():
    """Qwen3.6-35B-A3B, 67 GB, TP 2 on p5.48xlarge: a new node compiles 65 s without the cross-node cache, 16 s
    with it (the shipped prod config carries these measured times)."""
    config = load_config(ROOT / "config" / "prod.yaml")
    qwen = next(m for m in config.models if m.name == "qwen3-6-35b-a3b")
    cold, new, _ = estimate_model(qwen, config, default_catalog()).cases
    assert within(cold.seconds("compile"), 65) and within(new.seconds("compile"), 16)


def test_calibration_cold_starts_of_large_models_without_caches():
    """A 145 GB model from S3 on a cold node: more than 20 minutes; 600 GB and more: more than 30 minutes."""
    assert within(_cold_total(145, "p5.48xlarge"), 20 * 60)
    assert within(_cold_total(600, "p5e.48xlarge"), 30 * 60)


def test_calibration_five_pods_scaling_out_at_once_share_the_nat():
    """An HPA adding 5 pods at once waits 25-30 minutes (the 145 GB model, five new nodes on one NAT)."""
    five = _cold_total(145, "p5.48xlarge", nodes=5)
    assert within(five, 27.5 * 60)
    assert five > _cold_total(145, "p5.48xlarge")


def test_calibration_image_pull_and_the_image_cache():
    """An image pull is typically 5-7 minutes; a cached image saves more than 2 minutes, up to 97%."""
    pull = image_pull_seconds(_model(10), DEFAULTS, parallel_pull=False)
    assert within(pull, 6 * 60)
    assert pull - DEFAULTS.image_present_seconds > 120
    assert within(1 - DEFAULTS.image_present_seconds / pull, 0.97)


def test_the_chart_is_a_png_with_a_bar_per_model_and_case(tmp_path):
    from warmstart.estimate_plot import plot_estimates

    config = load_config(ROOT / "config" / "prod.yaml")
    path = plot_estimates(estimate_environment(config, default_catalog()), tmp_path / "chart.png", "prod")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 600 and height >= 500
