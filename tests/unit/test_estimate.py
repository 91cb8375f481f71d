"""`warmstart plan --estimate`: each phase on its own (the physics of its path), the three cases, the advice, the
chart and the calibration from a cluster's start records. The published figures are checked in
tests/unit/test_estimate_figures.py."""

from __future__ import annotations

import json
import math
import struct

import pytest
import yaml

from tests.builders import start_record
from tests.synth import ROOT
from warmstart.catalog import default_catalog
from warmstart.config.environment import EnvironmentConfig
from warmstart.config.models import ModelSpec, StartEstimate
from warmstart.estimate import (
    CASES,
    MODELLED,
    PHASES,
    baseline_weights_seconds,
    compile_seconds,
    estimate_environment,
    estimate_model,
    image_pull_seconds,
    node_copy_weights_seconds,
    s3_prefix_gb_per_s,
    streamed_weights_seconds,
)
from warmstart.estimate_report import advise, render_estimates
from warmstart.loader import load_config
from warmstart.workload import plan_model
from warmstart_cli.__main__ import main
from warmstart_cli.calibrate import calibrate, calibrated_config, read_records

DEFAULTS = StartEstimate()
CATALOG = default_catalog()


def _prod(**model_changes) -> EnvironmentConfig:
    raw = yaml.safe_load((ROOT / "config" / "prod.yaml").read_text())
    raw["models"] = [{**raw["models"][1], **model_changes}]  # llama-3-3-70b
    return EnvironmentConfig.model_validate(raw)


def _model(size_gb: float, **extra) -> ModelSpec:
    return _prod(size_gb=size_gb, **extra).models[0]


# ---- each phase ----


def test_compile_grows_with_the_log_of_the_size_and_measured_times_win():
    assert compile_seconds(_model(60), DEFAULTS, cached=False) == pytest.approx(4.34 + 11.61 * math.log(60))
    assert compile_seconds(_model(640), DEFAULTS, cached=False) - compile_seconds(
        _model(60), DEFAULTS, cached=False
    ) == pytest.approx(11.61 * math.log(640 / 60))
    assert compile_seconds(_model(60), DEFAULTS, cached=True) == 6
    measured = _model(60, compile_seconds={"cold": 65, "cached": 16})
    assert compile_seconds(measured, DEFAULTS, cached=False) == 65
    assert compile_seconds(measured, DEFAULTS, cached=True) == 16


def test_a_pull_is_bounded_by_the_runtimes_rate_and_the_instance_network():
    fast_network = CATALOG.instance("p5.48xlarge")
    assert image_pull_seconds(9.8, 98, fast_network) == (pytest.approx(100), pytest.approx(0.098))
    slow = CATALOG.instance("g6e.xlarge")  # 2.5 Gbit/s = 0.3125 GB/s
    seconds, rate = image_pull_seconds(10, 403, slow)
    assert rate == pytest.approx(0.3125) and seconds == pytest.approx(32)


def test_the_streamer_is_bounded_by_its_clients_the_network_and_the_s3_prefix():
    p5, g6e = CATALOG.instance("p5.48xlarge"), CATALOG.instance("g6e.4xlarge")
    # 3 clients of 10 Gbit/s: 3.75 GB/s, above g6e.4xlarge's 20 Gbit/s.
    seconds, how = streamed_weights_seconds(10, g6e, DEFAULTS, clients=3, processes=1)
    assert seconds == pytest.approx(10 / 2.5) and "instance network" in how
    # One client alone: its target.
    seconds, how = streamed_weights_seconds(10, p5, DEFAULTS, clients=1, processes=1)
    assert seconds == pytest.approx(10 / 1.25) and "1 x 1 clients" in how
    # 35 clients x 4 ranks on a P5: its 3,200 Gbit/s count the EFA cards; S3 traffic has one 100 Gbit/s card.
    seconds, how = streamed_weights_seconds(140, p5, DEFAULTS, clients=35, processes=4)
    assert seconds == pytest.approx(140 / 12.5) and "instance network" in how
    # S3's 5,500 GET/s of 8 MiB parts per prefix bound a stream only above 46 GB/s.
    assert s3_prefix_gb_per_s(DEFAULTS) == pytest.approx(5500 * 8 * 2**20 / 1e9)
    # Pods streaming on one node share its network.
    shared, _ = streamed_weights_seconds(10, g6e, DEFAULTS, clients=3, processes=1, pods=2)
    assert shared == pytest.approx(10 / 1.25)


def test_the_node_copy_reads_at_the_arrays_rate_or_the_readers():
    p5, g6e = CATALOG.instance("p5.48xlarge"), CATALOG.instance("g6e.xlarge")
    assert node_copy_weights_seconds(60, p5, DEFAULTS, readers=200, processes=1)[0] == pytest.approx(60 / 30)
    assert node_copy_weights_seconds(60, p5, DEFAULTS, readers=4, processes=2)[0] == pytest.approx(60 / (8 * 0.3377))
    assert node_copy_weights_seconds(60, g6e, DEFAULTS, readers=64, processes=1)[0] == pytest.approx(60 / 2.0)


def test_without_warmstart_the_download_shares_the_nat_and_the_loader_reads_it_back():
    p5 = CATALOG.instance("p5.48xlarge")
    one, how = baseline_weights_seconds(100, p5, DEFAULTS, 1)
    assert one == pytest.approx(100 / 0.875 + 100 / 0.3347) and "download 0.88 GB/s" in how
    # 100 Gbit/s of NAT shared by 20 nodes: 0.625 GB/s each, below the downloader's 0.875.
    twenty, how = baseline_weights_seconds(100, p5, DEFAULTS, 20)
    assert twenty == pytest.approx(100 / 0.625 + 100 / 0.3347)


# ---- the three cases ----


def test_three_cases_with_every_phase_in_order_and_each_figure_said_where_it_comes_from():
    config = _prod()
    estimate = estimate_model(config.models[0], config, CATALOG)
    assert [case.case for case in estimate.cases] == list(CASES)
    for case in estimate.cases:
        assert [phase.name for phase in case.phases] == list(PHASES)
        assert all(phase.basis in ("published", "modelled", "measured") for phase in case.phases)
    cold, new, warm = estimate.cases
    assert cold.seconds("restore") == 0 and new.seconds("restore") == DEFAULTS.restore_seconds
    assert warm.seconds("node") == 0 and warm.seconds("image") == DEFAULTS.image_present_seconds
    assert cold.total_seconds > new.total_seconds > warm.total_seconds
    assert new.phase("weights").basis == MODELLED


def test_the_streams_are_the_rendered_concurrency_and_ranks():
    config = _prod()
    model = config.models[0]
    plan = plan_model(model, config, CATALOG)
    new = estimate_model(model, config, CATALOG).cases[1]
    expected, _ = streamed_weights_seconds(
        140, CATALOG.instance("p5.48xlarge"), DEFAULTS, clients=plan.concurrency, processes=plan.tensor_parallel_size
    )
    assert new.seconds("weights") == pytest.approx(expected)


def test_the_pull_follows_the_node_os_and_auto_mode_pulls_in_parallel_even_without_warmstart():
    dev = load_config(ROOT / "config" / "dev.yaml")  # Auto Mode, g6e: SOCI parallel pull always on
    cold, new, _ = estimate_model(dev.models[0], dev, CATALOG).cases
    assert "parallel pull 182 MB/s" in cold.phase("image").how and new.seconds("image") == cold.seconds("image")
    prod = _prod()  # AL2023 with FastImagePull: plain without warmstart, parallel with it
    cold, new, _ = estimate_model(prod.models[0], prod, CATALOG).cases
    assert "plain pull 98 MB/s" in cold.phase("image").how and "parallel pull 236 MB/s" in new.phase("image").how


def test_an_image_snapshot_puts_the_image_on_a_new_node():
    raw = _prod().model_dump(mode="json", exclude_unset=True)
    raw["compute"]["ami_alias"] = "bottlerocket@v1.57.0"
    raw["image_preload"] = {"mode": "snapshot"}
    snapshot = EnvironmentConfig.model_validate(raw)
    new = estimate_model(snapshot.models[0], snapshot, CATALOG).cases[1]
    assert new.seconds("image") == DEFAULTS.image_present_seconds


def test_without_the_compile_cache_a_new_node_compiles_from_nothing_and_eager_never_compiles():
    raw = _prod().model_dump(mode="json", exclude_unset=True)
    raw["caches"]["compile"] = False
    no_cache = EnvironmentConfig.model_validate(raw)
    new = estimate_model(no_cache.models[0], no_cache, CATALOG).cases[1]
    assert new.seconds("restore") == 0 and new.seconds("compile") == pytest.approx(4.34 + 11.61 * math.log(140))
    raw["models"][0]["enforce_eager"] = True
    eager = EnvironmentConfig.model_validate(raw)
    cases = estimate_model(eager.models[0], eager, CATALOG).cases
    assert all(case.seconds("compile") == 0 and case.seconds("engine") == 27.9 for case in cases)


# ---- advice ----


def test_advice_names_the_dominant_phase_and_an_accepted_setting_with_its_saving():
    prod = load_config(ROOT / "config" / "prod.yaml")
    estimate = estimate_model(prod.models[1], prod, CATALOG)
    advice = advise(estimate, prod, CATALOG, CASES[1])
    assert advice.phase == "image" and "image_preload.mode: snapshot" in advice.setting
    new = estimate.case(CASES[1])
    # The saving is the changed config's own estimate: the pull goes, the image is on the node.
    assert advice.saving == pytest.approx(new.seconds("image") - DEFAULTS.image_present_seconds)


def test_advice_without_a_setting_says_why():
    dev = load_config(ROOT / "config" / "dev.yaml")
    advice = advise(estimate_model(dev.models[0], dev, CATALOG), dev, CATALOG, CASES[1])
    assert advice.phase == "image" and advice.saving is None and "pulled in parallel already" in advice.why


def test_advice_turns_the_compile_cache_on_where_it_is_off():
    raw = _prod().model_dump(mode="json", exclude_unset=True)
    raw["caches"]["compile"] = False
    raw["compute"]["ami_alias"] = "bottlerocket@v1.57.0"
    raw["image_preload"] = {"mode": "snapshot"}
    config = EnvironmentConfig.model_validate(raw)
    advice = advise(estimate_model(config.models[0], config, CATALOG), config, CATALOG, CASES[1])
    assert advice.phase == "compile" and advice.setting == "caches.compile: true" and advice.saving > 50


def test_the_shipped_configs_show_a_saving_and_what_still_dominates():
    for env in ("dev", "prod"):
        config = load_config(ROOT / "config" / f"{env}.yaml")
        estimates = estimate_environment(config, CATALOG, nodes=3)
        text = render_estimates(estimates, config, CATALOG)
        for estimate in estimates:
            assert f"model {estimate.model} on {estimate.instance_type}, 3 node(s)" in text
            cold, new, _ = estimate.cases
            assert new.total_seconds < cold.total_seconds
        assert text.count("advice, new node, warmstart:") == len(config.models)


# ---- the chart ----


def test_the_chart_is_a_png_whose_title_carries_the_inputs(tmp_path):
    from warmstart_cli.estimate_plot import chart_title, plot_estimates

    config = load_config(ROOT / "config" / "prod.yaml")
    estimates = estimate_environment(config, CATALOG, nodes=2)
    assert chart_title("prod", estimates) == (
        "warmstart prod: estimated pod start on p5.48xlarge, 2 node(s) scaling out at once"
    )
    data = plot_estimates(estimates, tmp_path / "chart.png", "prod").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 700 and height >= 500


def test_calibration_fits_the_clusters_rates_and_shows_them_beside_the_starts(tmp_path, capsys):
    dev = load_config(ROOT / "config" / "dev.yaml")
    name = dev.models[0].name  # 10 GB, 3 streams on g6e.2xlarge (5 Gbit/s)
    records = [
        start_record(
            name,
            new_node=True,
            compile_cache="hit",
            phases={"node": 80, "scheduling": 4, "image": 100, "weights": 40, "compile": 9, "engine": 50, "other": 6},
        ),
        start_record(
            name,
            new_node=True,
            compile_cache="miss",
            phases={"node": 90, "scheduling": 2, "image": 80, "weights": 40, "compile": 70, "engine": 40, "other": 6},
        ),
        start_record(
            name,
            new_node=False,
            compile_cache="hit",
            phases={"image": 1, "weights": 40, "compile": 7, "engine": 45, "other": 5},
            image="present",
        ),
    ]
    calibration = calibrate(dev, CATALOG, read_records(_write(tmp_path, records)))
    assert calibration.starts == 3
    assert calibration.settings["node_ready_seconds"] == 88  # median of 84 and 92
    assert calibration.settings["engine_seconds"] == 45
    assert calibration.settings["compile_cached_seconds"] == 8  # hits: 9 and 7
    assert calibration.settings["parallel_pull_mb_per_s"] == 112.5  # Auto Mode, 10 GB in 100 s and in 80 s
    # 10 GB in 40 s is 0.25 GB/s, below the 0.625 GB/s network: the 3 clients bound it.
    assert calibration.settings["streamer_client_gbit_per_s"] == pytest.approx(0.25 * 8 / 3, rel=1e-3)
    assert calibration.compile_seconds[name].cold == 70
    fitted = calibrated_config(dev, calibration)
    new = estimate_model(fitted.models[0], fitted, CATALOG).cases[1]
    assert new.seconds("node") == 88 and new.seconds("weights") == pytest.approx(40, rel=1e-3)
    assert new.phase("compile").basis == "measured"
    # Through the command line: estimate and measured, phase by phase, and the settings to keep.
    assert main(["plan", "--env", "dev", "--estimate", "--calibrate", str(_write(tmp_path, records))]) == 0
    out = capsys.readouterr().out
    assert "calibrated from 3 ready start(s)" in out and "measured" in out and "node_ready_seconds: 88" in out


def test_calibration_reads_the_agents_config_maps_as_kubectl_prints_them(tmp_path):
    dev = load_config(ROOT / "config" / "dev.yaml")
    record = start_record(dev.models[0].name, new_node=True, compile_cache="hit", phases={"node": 60, "engine": 30})
    config_maps = {"items": [{"data": {"starts.json": json.dumps([record, {"version": 99}])}}]}
    assert len(read_records(_write(tmp_path, config_maps))) == 1


def test_a_records_file_that_is_not_json_is_refused_with_its_name(tmp_path, capsys):
    path = tmp_path / "starts.json"
    path.write_text("not json")
    assert main(["plan", "--env", "dev", "--estimate", "--calibrate", str(path)]) == 2
    assert "starts.json: not a JSON file of start records" in capsys.readouterr().err


def _write(tmp_path, document) -> object:
    path = tmp_path / f"records-{len(list(tmp_path.iterdir()))}.json"
    path.write_text(json.dumps(document))
    return path


def _good(**changes) -> dict:
    record = start_record(
        "qwen3-4b", new_node=True, compile_cache="hit", phases={"node": 40, "image": 50, "engine": 30}
    )
    return {**record, **changes}


HOSTILE_RECORDS = [
    ("phases a list", [_good(phases=[1, 2])]),
    ("phases a string", [_good(phases="fast")]),
    ("a phase as text", [_good(phases={"node": "50"})]),
    ("a phase true", [_good(phases={"node": True})]),
    ("a negative phase", [_good(phases={"node": -500, "image": -5})]),
    ("a phase of 1e308", [_good(phases={"image": 1e308})]),
    ("a huge integer", [_good(phases={"image": 10**400})]),
    ("model a list", [_good(model=["qwen3-4b"])]),
    ("ready as text", [_good(ready="soon")]),
    ("new_node as text", [_good(new_node="false")]),
    ("an unknown phase", [_good(phases={"teleport": 1})]),
    ("a list of numbers", [1, 2, 3]),
    ("items not a list", {"items": "abc"}),
    ("an item not a mapping", {"items": [5]}),
    ("data a list", {"items": [{"data": []}]}),
    ("starts not text", {"items": [{"data": {"starts.json": 5}}]}),
]


@pytest.mark.parametrize("case, document", HOSTILE_RECORDS, ids=[c[0] for c in HOSTILE_RECORDS])
def test_hostile_start_records_are_skipped_never_fitted_and_never_crash(tmp_path, capsys, case, document):
    """A node's ConfigMap is untrusted: a record of the wrong shape or range is skipped, and nothing fitted from it."""
    assert main(["plan", "--env", "dev", "--estimate", "--calibrate", str(_write(tmp_path, document))]) == 0
    out = capsys.readouterr().out
    assert "calibrated from 0 ready start(s)" in out and "nan" not in out and "inf" not in out


def test_a_phase_too_short_to_measure_a_rate_fits_none(tmp_path, capsys):
    assert (
        main(
            [
                "plan",
                "--env",
                "dev",
                "--estimate",
                "--calibrate",
                str(_write(tmp_path, [_good(phases={"image": 1e-320})])),
            ]
        )
        == 0
    )
    assert "parallel_pull_mb_per_s" not in capsys.readouterr().out


@pytest.mark.parametrize("text", ["[NaN]", '[{"phases": {"node": Infinity}}]', "[" * 100_000, "not json", "5"])
def test_records_that_are_not_strict_json_are_refused(tmp_path, capsys, text):
    path = tmp_path / "starts.json"
    path.write_text(text)
    assert main(["plan", "--env", "dev", "--estimate", "--calibrate", str(path)]) == 2
    assert "start records" in capsys.readouterr().err


def test_the_physical_floor_is_below_every_new_node_estimate_and_the_network_bounds_it():
    from warmstart.estimate import physical_floor

    for env in ("dev", "prod", "existing"):
        config = load_config(ROOT / "config" / f"{env}.yaml")
        for model in config.models:
            floor = physical_floor(model, config, CATALOG)
            new = estimate_model(model, config, CATALOG).case(CASES[1])
            assert floor.total_seconds <= new.total_seconds
            assert [p.name for p in floor.phases] == list(PHASES)
    prod = load_config(ROOT / "config" / "prod.yaml")
    llama = physical_floor(prod.models[1], prod, CATALOG)
    assert llama.seconds("weights") == pytest.approx(140 / 12.5)  # one 100 Gbit/s card, below the 30 GB/s array
    assert llama.seconds("image") == pytest.approx(10 / 12.5)
