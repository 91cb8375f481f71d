"""Autoscaling: the policy derived from a model's start time, the refusals, and the HPA controller's arithmetic
for an External metric, KEDA's (kubernetes pkg/controller/podautoscaler: replica_calculator.go, horizontal.go;
defaults from pkg/apis/autoscaling/v2/defaults.go), run over a load curve against a table computed by hand."""

from __future__ import annotations

import pytest

from tests.builders import only_problem, raw
from tests.synth import ROOT
from warmstart.autoscaling import ScalingPolicy, recommend, scale_down_window, scaling_policy, simulate
from warmstart.catalog import default_catalog
from warmstart.loader import load_config, parse_config


def test_the_shipped_policy_follows_the_models_start_time():
    config = load_config(ROOT / "config" / "prod.yaml")
    llama = next(m for m in config.models if m.name == "llama-3-3-70b")
    policy = scaling_policy(llama, config, default_catalog())
    assert (policy.min_replicas, policy.max_replicas, policy.target) == (2, 4, 5.0)
    assert (policy.source_metric, policy.metric) == ("vllm:num_requests_waiting", "s0-prometheus")
    assert (
        policy.query("llama-3-3-70b") == 'sum(avg_over_time(vllm:num_requests_waiting{namespace="llama-3-3-70b"}[1m]))'
    )
    assert policy.scale_up_window == 0
    # 1.5 x the estimated start on a new node with warmstart, in whole 15 s periods.
    assert policy.scale_down_window == scale_down_window(policy.start_seconds) >= 1.5 * policy.start_seconds
    assert scaling_policy(config.models[0], config, default_catalog()) is None  # qwen: fixed replicas


@pytest.mark.parametrize(("start", "window"), [(60, 300), (200, 300), (863, 1305), (3000, 3600)])
def test_the_scale_down_window_outlasts_a_start_within_the_apis_bounds(start, window):
    assert scale_down_window(start) == window


def test_the_kv_cache_target_defaults_to_four_fifths():
    document = raw("prod")
    document["models"][1]["autoscaling"] = {"min_replicas": 2, "max_replicas": 3, "metric": "kv_cache_usage"}
    config = parse_config(document)
    policy = scaling_policy(config.models[1], config, default_catalog())
    assert (policy.source_metric, policy.target) == ("vllm:kv_cache_usage_perc", 0.8)


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"min_replicas": 3, "max_replicas": 2}, "models[1].autoscaling.min_replicas", "above max_replicas"),
        ({"min_replicas": 1, "max_replicas": 2}, "models[1].autoscaling.min_replicas", "goes offline"),
        (
            {"min_replicas": 2, "max_replicas": 3, "metric": "kv_cache_usage", "target_value": 80},
            "models[1].autoscaling.target_value",
            "not a share of the KV cache",
        ),
    ],
)
def test_autoscaling_refusals_name_the_field(change, field, words):
    document = raw("prod")
    document["models"][1]["autoscaling"] = change
    problem = only_problem(document)
    assert problem.field == field and words in problem.message


def test_a_fixed_replica_count_beside_the_autoscaler_is_refused():
    document = raw("prod")
    document["models"][1]["replicas"] = 3
    problem = only_problem(document)
    assert problem.field == "models[1].replicas" and "remove replicas" in problem.fix


def test_one_replica_is_allowed_when_its_downtime_is_accepted():
    document = raw("prod")
    document["models"][1]["autoscaling"]["min_replicas"] = 1
    document["models"][1]["allow_single_replica_downtime"] = True
    assert parse_config(document).models[1].least_replicas == 1


# ---- the controller's arithmetic ----


@pytest.mark.parametrize(
    ("current", "load", "expected", "why"),
    [
        (2, 10.0, 2, "exactly on target: 10 / (5 x 2) = 1"),
        (2, 10.9, 2, "within the 10% tolerance"),
        (2, 40.0, 8, "ceil(40/5)"),
        (4, 5.0, 1, "ceil(5/5): min_replicas is applied after"),
        (6, 40.0, 8, "pending and loading pods count in the replicas: 40 / 30 = 1.33, then ceil(40/5)"),
        (6, 28.0, 6, "...so a load that 6 pods will carry is within the tolerance: 28 / 30 = 0.93"),
        (4, 0.0, 0, "no pod serving: the query's sum is empty, KEDA reports 0"),
    ],
)
def test_one_recommendation(current, load, expected, why):
    assert recommend(current, load, 5.0) == expected, why


def test_a_recorded_load_curve_gives_the_hand_computed_replicas():
    """Two pods on target, then 40 waiting requests for 3.5 minutes, then 5. Worked by hand:
    - t=30: 40 / (5 x 2) = 4: raw ceil(40/5) = 8, limited by the scale-up policies to max(2 x 2, 2 + 4) = 6;
    - t=45-75: the four new pods are pending (they start in 60 s) but count in the replicas: 40 / 30 = 1.33: 8,
      capped at 6 (max_replicas); t=90: all 6 serve;
    - t=240: raw ceil(5/5) = 1, but the scale-down window (120 s) still holds the 8s recommended until t=225:
      no change until t=345, then one pod a minute (t=345, 405, 465, 525) down to min_replicas 2."""
    policy = ScalingPolicy(
        model="m",
        min_replicas=2,
        max_replicas=6,
        metric="s0-prometheus",
        source_metric="vllm:num_requests_waiting",
        target=5.0,
        scale_up_window=0,
        scale_down_window=120,
        start_seconds=60,
    )
    load = [(0, 10.0), (30, 40.0), (240, 5.0), (600, 5.0)]
    steps = {s.t: s for s in simulate(policy, load, start=60, initial=2)}
    expected = {0: 2, 15: 2, 30: 6, 45: 6, 90: 6, 225: 6, 240: 6, 330: 6, 345: 5, 390: 5, 405: 4, 450: 4}
    expected |= {465: 3, 510: 3, 525: 2, 600: 2}
    assert {t: steps[t].replicas for t in expected} == expected
    assert [steps[t].ready for t in (30, 45, 75, 90)] == [2, 2, 2, 6]
    assert all(2 <= s.replicas <= 6 for s in steps.values())


def test_a_window_of_one_start_keeps_a_pod_through_a_short_dip():
    """A dip shorter than the scale-down window removes nothing: the pod would be needed again before a new
    one could start."""
    policy = ScalingPolicy("m", 2, 4, "x", "x", 5.0, 0, scale_down_window(400), 400)
    load = [(0, 20.0), (600, 2.0), (900, 20.0), (1500, 20.0)]  # a 5-minute dip
    steps = simulate(policy, load, start=400, initial=4)
    assert min(s.replicas for s in steps) == 4
