import json

from contracts.cache_key import parse_key_prefix
from tests.builders import only_problem, raw
from tests.synth import ROOT
from warmstart.active_set import active_keys, active_set_documents
from warmstart.catalog import default_catalog
from warmstart.loader import load_config, parse_config
from warmstart.plan import key_rows
from warmstart.workload import plan_model


def test_active_keys_are_well_formed_and_match_what_plan_prints():
    config = load_config(ROOT / "config" / "prod.yaml")
    keys = active_keys(config, default_catalog())
    assert keys and all(parse_key_prefix(k) == k for k in keys)
    printed = " ".join(
        value
        for m in config.models
        for _, value in key_rows(plan_model(m, config, default_catalog()), config, default_catalog())
    )
    assert all(k in printed for k in keys)


def test_one_key_per_gpu_type_a_model_may_land_on():
    document = raw("prod")
    document["compute"]["gpu_pool"]["instance_types"] = ["p5.48xlarge", "p5en.48xlarge"]
    keys = active_keys(parse_config(document), default_catalog())
    assert len(keys) == 4 and {k.split("/")[2] for k in keys} == {"h100-sm_90", "h200-sm_90"}


def test_models_without_compile_cache_publish_no_key():
    document = raw()
    document["caches"]["compile"] = False
    assert [json.loads(d)["keys"] for d in active_set_documents(parse_config(document), default_catalog())] == [[]]


def test_an_active_set_beyond_the_parts_the_pruner_reads_is_refused():
    document = raw("prod")
    document["compute"]["gpu_pool"]["instance_types"] = [
        "p5.48xlarge",
        "p5e.48xlarge",
        "p6-b200.48xlarge",
        "p6-b300.48xlarge",
    ]
    base = document["models"][0]
    document["models"] = [
        {**base, "name": f"model-with-a-long-name-{i:03d}", "s3_uri": f"s3://acme-llm-weights-prod/m{i:03d}/"}
        for i in range(500)
    ]
    document["caches"]["weights"] = False
    document["compute"]["gpu_pool"]["gpu_limit"] = 500 * 2 * 8 + 8  # every replica on its own node, and a surge
    problem = only_problem(document)
    assert problem.field == "models" and "over the 20 the pruner reads" in problem.message


def test_extra_active_set_names_are_checked():
    document = raw()
    document["pruning"]["extra_active_set_parameters"] = ["/other/thing"]
    assert only_problem(document).field == "pruning.extra_active_set_parameters[0]"
    document["pruning"]["extra_active_set_parameters"] = ["/warmstart/qa/compile-cache/active-keys"]
    assert parse_config(document).pruning.extra_active_set_parameters == ["/warmstart/qa/compile-cache/active-keys"]


def test_a_large_active_set_is_split_into_parameters_the_pruner_reads_whole():
    from contracts.active_set_format import ADVANCED_LIMIT, active_set_part_name
    from pruner.runtime.selection import parse_active_set_part
    from warmstart.active_set import active_set_documents

    document = raw("prod")
    document["compute"]["gpu_pool"]["instance_types"] = ["p5.48xlarge", "p5e.48xlarge", "p6-b200.48xlarge"]
    base = document["models"][0]
    document["models"] = [
        {**base, "name": f"m{i:02d}", "s3_uri": f"s3://acme-llm-weights-prod/m{i:02d}/"} for i in range(60)
    ]
    document["caches"]["weights"] = False
    document["compute"]["gpu_pool"]["gpu_limit"] = 60 * 2 * 8 + 8
    config = parse_config(document)
    parts = active_set_documents(config, default_catalog())
    assert len(parts) > 1 and all(len(p.encode()) <= ADVANCED_LIMIT for p in parts)
    keys, count = parse_active_set_part(parts[0], "first")
    assert count == len(parts)
    for number, part in enumerate(parts[1:], start=2):
        keys |= parse_active_set_part(part, active_set_part_name("/p", number))[0]
    assert sorted(keys) == active_keys(config, default_catalog())
    assert active_set_part_name("/warmstart/prod/compile-cache/active-keys", 2).endswith("active-keys-2")
