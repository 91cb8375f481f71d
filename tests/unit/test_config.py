"""The config model and every synth-time refusal: each names the field and the fix."""

import copy

import pytest
import yaml

from tests.builders import only_problem, problems, raw
from tests.fixes import refused
from tests.synth import ROOT, SHIPPED_ENVIRONMENTS
from warmstart.catalog import Catalog
from warmstart.config.compute import AutoModeCompute, KarpenterCompute
from warmstart.config_file import ConfigError
from warmstart.loader import load_config, parse_config
from warmstart.sizing import derived_tensor_parallel_size


@pytest.mark.parametrize("name", SHIPPED_ENVIRONMENTS)
def test_shipped_environments_load(name):
    assert load_config(ROOT / "config" / f"{name}.yaml").name == name


def test_shipped_environments_cover_both_modes_and_the_seed_sizes(catalog):
    configs = [load_config(ROOT / "config" / f"{n}.yaml") for n in SHIPPED_ENVIRONMENTS]
    assert {type(c.compute) for c in configs} == {AutoModeCompute, KarpenterCompute}
    sizes = {(m.size_gb, derived_tensor_parallel_size(m, c, catalog)) for c in configs for m in c.models}
    assert (10, 1) in sizes
    assert (67, 2) in sizes
    assert 140 in {size for size, _ in sizes}
    p5 = [c for c in configs if "p5.48xlarge" in c.compute.gpu_pool.instance_types]
    assert any(m.size_gb == 67 and derived_tensor_parallel_size(m, c, catalog) == 2 for c in p5 for m in c.models)


def test_defaults_from_the_brief():
    config = parse_config(raw())
    assert config.streamer.chunk_bytes == 4 * 2**30
    assert config.streamer.request_timeout_ms == 3000
    assert config.streamer.low_speed_limit_bytes_per_s == 2**20
    assert config.pruning.retention_days == 14


def test_config_is_frozen():
    config = parse_config(raw())
    with pytest.raises(Exception):
        config.name = "other"


def test_unknown_field_is_refused_with_the_allowed_ones():
    document = raw()
    document["compute"]["ephemeral_storage"] = 80
    problem = only_problem(document)
    assert problem.field == "compute.ephemeral_storage"
    assert "ephemeral_storage_gib" in problem.fix


def test_an_unknown_compute_mode_names_the_modes_whose_settings_were_given():
    document = raw()
    document["compute"]["mode"] = "fargate"
    problem = only_problem(document)
    assert problem.field == "compute"
    # dev's compute settings are Auto Mode's (ephemeral_storage_gib): setting 'karpenter' would be refused next.
    assert problem.fix == "set compute.mode to 'auto' (EKS Auto Mode)"
    document["compute"] = {"mode": "fargate", "gpu_pool": document["compute"]["gpu_pool"]}
    assert "'auto'" in only_problem(document).fix and "'karpenter'" in only_problem(document).fix


def test_missing_field_is_named():
    document = raw()
    del document["models"][0]["size_gb"]
    assert only_problem(document).field == "models[0].size_gb"


def test_tensor_parallel_size_accepts_int_or_auto_only():
    document = raw()
    document["models"][0]["tensor_parallel_size"] = "two"
    problem = only_problem(document)
    assert problem.field == "models[0].tensor_parallel_size"
    assert problem.message == "'two' is not a whole number or 'auto'"


def test_ephemeral_storage_at_or_above_nvme_is_refused():
    document = raw()
    document["compute"]["ephemeral_storage_gib"] = 233  # g6e.xlarge has 250 GB = 232.8 GiB
    problem = only_problem(document)
    assert problem.field == "compute.ephemeral_storage_gib"
    assert "g6e.xlarge (250 GB)" in problem.message
    assert "at most 232" in problem.fix


def test_ephemeral_storage_just_below_the_smallest_nvme_is_accepted():
    document = raw()
    document["compute"]["ephemeral_storage_gib"] = 232
    assert parse_config(document).compute.ephemeral_storage_gib == 232


def test_instance_type_missing_from_catalog_is_refused():
    document = raw()
    document["compute"]["gpu_pool"]["instance_types"].append("g4dn.xlarge")
    problem = only_problem(document)
    assert problem.field == "compute.gpu_pool.instance_types[2]"
    assert "g4dn.xlarge" in problem.message and "catalog.yaml" in problem.fix


def test_model_larger_than_nvme_with_weights_cache_is_refused():
    document = raw()
    document["caches"]["weights"] = True
    document["models"][0]["size_gb"] = 260
    document["models"][0]["tensor_parallel_size"] = "auto"
    document["compute"]["gpu_pool"]["instance_types"] = ["g6e.xlarge", "g6e.48xlarge"]
    found = problems(document)
    nvme = [p for p in found if p.field == "models[0].size_gb"]
    assert len(nvme) == 1 and "250 GB NVMe of g6e.xlarge" in nvme[0].message
    assert "weights_cache: false" in nvme[0].fix


def test_nvme_rule_applies_only_with_the_weights_cache_on():
    # No real instance has less NVMe than GPU memory, so a small-disk catalog entry stands in.
    catalog = Catalog.model_validate(
        {
            "gpus": {"H200": {"architecture": "sm_90", "memory_gb": 141, "device_name": "NVIDIA H200"}},
            "instances": {
                "small-disk.48xlarge": {
                    "gpu": "H200",
                    "gpu_count": 8,
                    "nvme_gb": 200,
                    "vcpus": 192,
                    "memory_gib": 2048,
                    "network_gbit_per_s": 3200,
                    "max_pods": 100,
                }
            },
        }
    )
    document = raw("prod")
    document["compute"]["gpu_pool"]["instance_types"] = ["small-disk.48xlarge"]
    document["models"] = document["models"][1:]  # 140 GB fits 200 GB NVMe; make it not fit:
    document["models"][0]["size_gb"] = 300
    document["caches"]["weights"] = False
    assert parse_config(document, catalog=catalog).models[0].size_gb == 300
    document["caches"]["weights"] = True
    assert any("does not fit the 200 GB NVMe of small-disk.48xlarge" in p.message for p in refused(document, catalog))
    with pytest.raises(ConfigError, match="does not fit the 200 GB NVMe of small-disk.48xlarge"):
        parse_config(document, catalog=catalog)


def test_tensor_parallel_size_larger_than_the_gpus_is_refused():
    document = raw("prod")
    document["models"][0]["tensor_parallel_size"] = 16
    problem = only_problem(document)
    assert problem.field == "models[0].tensor_parallel_size"
    assert "larger than the 8 GPUs of p5.48xlarge" in problem.message
    # Only the sizes that also hold the 140 GB of weights (1 x 80 GB would not).
    assert problem.fix == "use 2 or 4 or 8, or 'auto'"


def test_tensor_parallel_size_not_dividing_the_gpus_is_refused():
    document = raw("prod")
    document["models"][0]["tensor_parallel_size"] = 3
    assert "does not divide the 8 GPUs" in only_problem(document).message


def test_tensor_parallel_size_too_small_for_the_weights_is_refused():
    document = raw("prod")
    document["models"][0]["tensor_parallel_size"] = 1  # 67 GB on one 80 GB H100
    assert "KV cache" in only_problem(document).message


def test_weights_too_big_for_auto_tensor_parallel_size_are_refused():
    document = raw("prod")
    document["models"][0]["size_gb"] = 700
    problem = only_problem(document)
    assert problem.field == "models[0].tensor_parallel_size"
    assert "700 GB" in problem.message


def test_model_restricted_to_types_outside_the_pool_is_refused():
    document = raw()
    document["models"][0]["instance_types"] = ["p5.48xlarge"]
    assert only_problem(document).field == "models[0].instance_types"


@pytest.mark.parametrize("image", ["vllm/vllm-openai", "vllm/vllm-openai:latest", "registry:5000/vllm"])
def test_floating_image_tags_are_refused(image):
    document = raw()
    document["models"][0]["image"] = image
    problem = only_problem(document)
    assert problem.field == "models[0].image" and "pin" in problem.fix


@pytest.mark.parametrize(
    "image, tagged",
    [
        ("vllm/vllm-openai:v0.21.0", True),
        ("vllm/vllm-openai:v0.34.0", True),
        ("registry:5000/vllm:1.2", False),
        ("vllm/vllm-openai@sha256:" + "a" * 64, False),
    ],
)
def test_pinned_images_are_accepted(image, tagged):
    """An image whose tag names no vLLM release (a digest, a tag of one's own) says which release it runs."""
    document = raw()
    document["models"][0]["image"] = image
    if not tagged:
        document["models"][0]["vllm_version"] = "0.34.0"
    assert parse_config(document).models[0].image == image


def test_model_outside_the_model_bucket_is_refused():
    document = raw()
    document["models"][0]["s3_uri"] = "s3://someone-else/qwen3-4b/"
    problem = only_problem(document)
    assert problem.field == "models[0].s3_uri"
    assert "s3://warmstart-dev-models-123456789012/" in problem.fix


def test_availability_zone_of_another_region_is_refused():
    document = raw()
    document["network"]["availability_zones"] = ["us-west-2a", "eu-west-1b"]
    problem = only_problem(document)
    assert problem.field == "network.availability_zones[1]"


def test_duplicate_model_names_are_refused():
    document = raw()
    document["models"].append(copy.deepcopy(document["models"][0]))
    assert only_problem(document).field == "models[1].name"


def test_private_endpoint_with_public_cidrs_is_refused():
    document = raw()
    document["cluster"]["endpoint_access"] = "private"
    assert only_problem(document).field == "cluster.public_access_cidrs"


def test_kms_key_on_a_created_bucket_is_refused():
    document = raw()
    document["buckets"]["models"]["kms_key_arn"] = (
        "arn:aws:kms:us-west-2:123456789012:key/11111111-2222-3333-4444-555555555555"
    )
    assert only_problem(document).field == "buckets.models.kms_key_arn"


def test_unsupported_kubernetes_version_is_refused():
    document = raw()
    document["cluster"]["kubernetes_version"] = "1.29"
    assert only_problem(document).field == "cluster.kubernetes_version"


def test_every_problem_is_reported_at_once():
    document = raw("prod")
    document["models"][0]["tensor_parallel_size"] = 3
    document["models"][1]["image"] = "vllm/vllm-openai:latest"
    document["network"]["availability_zones"][0] = "eu-west-1a"
    assert len(problems(document)) == 3


def test_error_message_lists_field_and_fix(tmp_path):
    path = tmp_path / "bad.yaml"
    document = raw()
    document["compute"]["ephemeral_storage_gib"] = 500
    path.write_text(yaml.safe_dump(document))
    refused(document)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    text = str(caught.value)
    assert str(path) in text
    assert "compute.ephemeral_storage_gib:" in text and "fix: set ephemeral_storage_gib to at most 232" in text


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


# Issue 10: configurations that would deploy and then fail or go offline on a real cluster.


def test_reserved_capacity_without_selected_reservations_is_refused():
    document = raw("prod")
    del document["compute"]["gpu_pool"]["capacity_reservations"]
    problem = only_problem(document)
    assert problem.field == "compute.gpu_pool.capacity_types" and "capacity_reservations" in problem.fix


def test_selected_reservations_without_reserved_capacity_are_refused():
    document = raw("prod")
    document["compute"]["gpu_pool"]["capacity_types"] = ["on-demand"]
    assert only_problem(document).field == "compute.gpu_pool.capacity_reservations"


@pytest.mark.parametrize(
    "term, message",
    [
        ({}, "either id"),
        ({"id": "cr-0123456789abcdef0", "tags": {"a": "b"}}, "keep one: id (cr-...) or tags"),
        ({"id": "cr-0123456789abcdef0", "owner_id": "123456789012"}, "owner_id goes with tags"),
        ({"id": "reservation-1"}, "cr-"),
        ({"tags": {"team": ""}}, "an empty tag key or value"),
    ],
)
def test_malformed_reservation_terms_are_refused(term, message):
    document = raw("prod")
    document["compute"]["gpu_pool"]["capacity_reservations"] = [term]
    problem = only_problem(document)
    assert problem.field.startswith("compute.gpu_pool.capacity_reservations") and message in str(problem)


def test_reservations_by_id_and_by_shared_tags_are_accepted():
    document = raw("prod")
    document["compute"]["gpu_pool"]["capacity_reservations"] = [
        {"id": "cr-0123456789abcdef0"},
        {"tags": {"pool": "gpu"}, "owner_id": "111122223333"},
    ]
    assert len(parse_config(document).compute.gpu_pool.capacity_reservations) == 2


def test_reservations_in_auto_mode_are_refused():
    document = raw("dev")
    document["compute"]["gpu_pool"]["capacity_types"] = ["on-demand", "reserved"]
    assert only_problem(document).field == "compute.gpu_pool.capacity_types"


@pytest.mark.parametrize(
    "expire_after, grace, most", [("720h", "24h", "480h"), ("500h", "5h", "499h"), ("Never", "24h", "480h")]
)
def test_auto_mode_node_lifetime_above_21_days_is_refused(expire_after, grace, most):
    document = raw("dev")
    document["compute"]["gpu_pool"].update({"expire_after": expire_after, "termination_grace_period": grace})
    problem = only_problem(document)
    assert problem.field == "compute.gpu_pool.expire_after" and f"at most {most}" in problem.fix


def test_auto_mode_lifetime_of_exactly_21_days_and_karpenter_beyond_it_are_accepted():
    document = raw("dev")
    document["compute"]["gpu_pool"].update({"expire_after": "480h", "termination_grace_period": "24h"})
    assert parse_config(document).compute.gpu_pool.expire_after == "480h"
    document = raw("prod")
    document["compute"]["gpu_pool"]["expire_after"] = "720h"
    assert parse_config(document).compute.gpu_pool.expire_after == "720h"


def test_node_lifetime_defaults_expire_within_auto_modes_limit():
    pool = parse_config(raw("prod")).compute.gpu_pool
    assert (pool.expire_after, pool.termination_grace_period) == ("336h", "24h")


def test_a_single_replica_is_refused_unless_its_downtime_is_accepted():
    document = raw("prod")
    document["models"][0]["replicas"] = 1
    problem = only_problem(document)
    assert problem.field == "models[0].replicas" and "allow_single_replica_downtime: true" in problem.fix
    document["models"][0]["allow_single_replica_downtime"] = True
    assert parse_config(document).models[0].replicas == 1


def test_an_environment_name_too_long_for_its_role_names_is_refused():
    document = raw("dev")
    document["name"] = "d" * 37
    assert only_problem(document).field == "name"


def test_emails_beside_an_existing_alarm_topic_are_refused():
    document = raw("dev")
    document["alerts"] = {"topic_arn": "arn:aws:sns:us-west-2:123456789012:oncall", "emails": ["a@example.com"]}
    assert only_problem(document).field == "alerts.emails"


@pytest.mark.parametrize("alerts", [{"emails": ["on call@example.com"]}, {"topic_arn": "arn:aws:sqs:us-west-2:1:q"}])
def test_malformed_alert_targets_are_refused(alerts):
    document = raw("dev")
    document["alerts"] = alerts
    assert only_problem(document).field.startswith("alerts.")


def test_client_namespaces_must_be_namespace_names():
    document = raw("dev")
    document["serving"] = {"client_namespaces": ["Default"]}
    assert only_problem(document).field.startswith("serving.client_namespaces")


def test_the_compute_modes_are_read_from_the_union_once():
    """The loader's messages and the compute constructs know the modes from the config's union only."""
    from warmstart.config.compute import COMPUTE_MODES, AutoModeCompute, KarpenterCompute

    assert COMPUTE_MODES == {"auto": AutoModeCompute, "karpenter": KarpenterCompute}
    pool = {"instance_types": ["p5.48xlarge"]}
    assert AutoModeCompute(mode="auto", gpu_pool=pool).node_os.name == "auto-mode"
    bottlerocket = KarpenterCompute(mode="karpenter", gpu_pool=pool, ami_alias="bottlerocket@v1.57.0").node_os
    assert (bottlerocket.name, bottlerocket.release) == ("bottlerocket", (1, 57, 0))
    assert KarpenterCompute(mode="karpenter", gpu_pool=pool).node_os.name == "al2023"
