"""The supported vLLM releases as data (warmstart/vllm_releases/, recorded from each release's packages by
tests/real_vllm/record_facts.py), and what synth takes from them: the release an image runs, its PyTorch, the
`vllm_env` values as that release parses them, `vllm serve`, and a note (never a refusal) beyond the table.

The real vLLM tier (tests/real_vllm/test_real_vllm.py) checks each data file against the installed release and each
offered fix in the release's own parser; here every refusal's fix is applied and accepted (tests/fixes.py)."""

from __future__ import annotations

import copy

import pytest

from tests.builders import only_problem, problems, raw
from tests.real_vllm.environment import LOCKS, pinned_version
from warmstart.checks.fix import UNSET
from warmstart.loader import parse_config
from warmstart.notes import config_notes
from warmstart.vllm_release import (
    DEFAULT_IMAGE,
    NEWEST,
    OLDEST,
    SUPPORTED,
    image_version,
    releases,
    serving_torch,
)
from warmstart.workload import plan_model, vllm_args


def _document(**model) -> dict:
    document = raw("dev")
    document["models"][0].update(model)
    return document


def test_the_oldest_and_the_newest_release_are_supported_and_the_shipped_configs_serve_the_newest():
    assert SUPPORTED == ("0.21.0", "0.34.0") and (OLDEST, NEWEST) == ("0.21.0", "0.34.0")
    assert DEFAULT_IMAGE == "vllm/vllm-openai:v0.34.0"
    for name in ("dev", "prod", "existing"):
        assert {m["image"] for m in raw(name)["models"]} == {DEFAULT_IMAGE}, name
        assert not any("torch_version" in m for m in raw(name)["models"]), name


@pytest.mark.parametrize("version", SUPPORTED)
def test_each_release_has_its_facts_and_the_tiers_lock_names_the_same_packages(version):
    """The data file and the real vLLM tier's lock come from one recording (the wheel's torch pin, the image's
    streamer): a lock that drifted from the facts would test another vLLM than synth reads."""
    known = releases()[version]
    assert known.version == version and known.image["reference"] == f"vllm/vllm-openai:v{version}"
    assert (LOCKS / f"vllm-{version}.txt").is_file()
    assert pinned_version(version, "vllm") == version
    assert pinned_version(version, "torch") == known.torch
    assert pinned_version(version, "runai-model-streamer") == known.image["streamer"]
    assert known.image["entrypoint"] == ["vllm", "serve"]
    assert known.hashed_env <= known.known_env | {n for n in known.hashed_env if n.startswith("RAY_")}
    assert known.released <= known.recorded


def test_what_the_two_releases_differ_in_is_read_from_them():
    """The changes issue 43 found between 0.21.0 and 0.34.0, each a recorded fact (vLLM's wheel metadata, envs.py,
    compilation/backends.py, entrypoints/openai/api_server.py)."""
    old, new = releases()["0.21.0"], releases()["0.34.0"]
    assert (old.torch, new.torch) == ("2.11.0", "2.14.0")
    assert (old.streamer_minimum, new.streamer_minimum) == ("0.15.7", "0.17.1")
    assert (old.image["streamer"], new.image["streamer"]) == ("0.15.9", "0.17.1")
    assert (len(old.known_env), len(new.known_env)) == (253, 333)
    assert (old.compile["config_factors"], new.compile["config_factors"]) == ("compute_hash", "compile_factors")
    assert (old.compile["folder_name"], new.compile["folder_name"]) == (
        "sha256-str-hash-list",
        "sha256-json-raw-factors",
    )
    assert not old.compile["mega_aot_artifact_default"] and new.compile["mega_aot_artifact_default"]
    assert not old.cli["module_server_deprecated"] and new.cli["module_server_deprecated"]


@pytest.mark.parametrize(
    "image, version",
    [
        ("vllm/vllm-openai:v0.34.0", "0.34.0"),
        ("vllm/vllm-openai:0.21.0", "0.21.0"),
        ("docker.io/vllm/vllm-openai:v0.34.0-cu130", "0.34.0"),
        ("vllm/vllm-openai:v0.34.0@sha256:" + "a" * 64, "0.34.0"),
        ("763104351884.dkr.ecr.us-west-2.amazonaws.com/vllm:0.21.0-gpu-py312-cu129-ubuntu22.04-ec2", "0.21.0"),
        ("vllm/vllm-openai:v0.8.5.post1", "0.8.5.post1"),
        ("vllm/vllm-openai@sha256:" + "a" * 64, None),  # a digest names no release
        ("acme/llm-server:1.2.3", None),  # another repository's tag says nothing of vLLM
        ("vllm/vllm-openai:nightly-2026-11-01", None),
    ],
)
def test_the_release_an_image_runs_is_read_from_its_tag(image, version):
    assert image_version(image) == version


def test_the_pytorch_follows_from_the_release_and_a_mismatch_is_refused_with_the_right_value():
    config = parse_config(raw("dev"))
    assert serving_torch(config.models[0]) == "2.14.0"
    plan = plan_model(config.models[0], config, _catalog())
    assert plan.factors.torch_version == "2.14.0"
    problem = only_problem(_document(torch_version="2.11.0"))
    assert problem.field == "models[0].torch_version" and "2.14.0" in problem.message
    # The image's own build of the same torch is the same PyTorch.
    assert parse_config(_document(torch_version="2.14.0+cu130")).models[0].torch_version == "2.14.0+cu130"


def test_an_image_whose_tag_names_no_release_says_which_it_runs():
    digest = "vllm/vllm-openai@sha256:" + "b" * 64
    problem = only_problem(_document(image=digest))
    assert problem.field == "models[0].vllm_version" and "names no vLLM release" in problem.message
    config = parse_config(_document(image=digest, vllm_version="0.21.0"))
    assert serving_torch(config.models[0]) == "2.11.0"
    problem = only_problem(_document(image="vllm/vllm-openai:v0.34.0", vllm_version="0.21.0"))
    assert "is not the release the image's tag names (0.34.0)" in problem.message


def test_a_release_older_than_the_oldest_supported_is_refused():
    problem = only_problem(_document(image="vllm/vllm-openai:v0.20.2"))
    assert problem.field == "models[0].image" and "older than the oldest release warmstart supports" in problem.message


def test_a_release_the_table_does_not_know_is_a_note_never_a_refusal():
    """0.35.0 (newer than the table) and 0.27.0 (between its releases) need the PyTorch in their image, and are then
    accepted with a note; the pods are rendered as the nearest older recorded release's are."""
    problem = only_problem(_document(image="vllm/vllm-openai:v0.35.0"))
    assert problem.field == "models[0].torch_version" and "record_facts 0.35.0" in problem.fix
    for version, shaped in (("0.35.0", "0.34.0"), ("0.27.0", "0.21.0")):
        config = parse_config(_document(image=f"vllm/vllm-openai:v{version}", torch_version="2.15.0"))
        (note,) = config_notes(config)
        assert f"vLLM {version} is" in note and f"rendered as {shaped}'s are" in note
        assert vllm_args(plan_model(config.models[0], config, _catalog()))[0].startswith("s3://")


def _catalog():
    from warmstart.catalog import default_catalog

    return default_catalog()


def test_a_variable_the_release_does_not_know_is_a_note():
    config = parse_config(_document(vllm_env={"VLLM_ALLOW_LONG_MAX_MODEL_LN": "1"}))
    (note,) = config_notes(config)
    assert "reads no variable named VLLM_ALLOW_LONG_MAX_MODEL_LN" in note


@pytest.mark.parametrize(
    "name, value, said, fixed",
    [
        # vllm/envs.py (0.34.0): VLLM_USE_DEEP_GEMM is bool(int(os.getenv(..., "1"))).
        ("VLLM_USE_DEEP_GEMM", "true", "with int(): 'true' stops the engine", "1"),
        ("VLLM_USE_DEEP_GEMM", "no", "with int()", "0"),
        # env_with_choices("VLLM_WORKER_MULTIPROC_METHOD", "fork", ["spawn", "fork"]).
        ("VLLM_WORKER_MULTIPROC_METHOD", "forkk", "one of fork, spawn", "fork"),
        # VLLM_ALLOW_LONG_MAX_MODEL_LEN: os.environ.get(...).strip().lower() in ("1", "true").
        ("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "yes", "'yes' would turn it off, not on", "1"),
        # env_set_with_choices: each comma-separated item one of its choices; the ones it takes are kept.
        (
            "VLLM_GPT_OSS_SYSTEM_TOOL_MCP_LABELS",
            "container,web_serch_preview",
            "'web_serch_preview' is not among them",
            "container,web_search_preview",
        ),
        # platforms/interface.py validate_environ (0.34.0): "Model Runner V1 has been removed".
        ("VLLM_USE_V2_MODEL_RUNNER", "0", "takes only '1'", "1"),
        # maybe_convert_json_str_or_file: JSON text or a JSON file's path.
        ("VLLM_HUMMING_INPUT_QUANT_CONFIG", "int8", "as JSON text or the path of a JSON file", None),
    ],
)
def test_vllm_env_values_are_checked_as_the_release_parses_them(name, value, said, fixed):
    problem = only_problem(_document(vllm_env={name: value}))  # each fix applied and accepted (tests/fixes.py)
    assert problem.field == f"models[0].vllm_env.{name}" and said in problem.message, problem
    values = [e.value for f in problem.fixes for e in f.edits]
    assert values[0] == fixed if fixed else values == [UNSET]


def test_yaml_values_in_vllm_env_are_fixed_to_a_spelling_the_release_takes():
    """YAML reads an unquoted true as a boolean: the fix is the release's own spelling of on for that variable
    ("1" for an int() getter, not "true", which it refuses), and an empty value is removed."""
    problem = only_problem(_document(vllm_env={"VLLM_USE_DEEP_GEMM": True}))
    assert '"1"' in problem.fix and [str(f) for f in problem.fixes][0].endswith('"1"')
    problem = only_problem(_document(vllm_env={"VLLM_WORKER_MULTIPROC_METHOD": None}))
    assert problem.message == "is empty (YAML read nothing there)"
    assert [str(f) for f in problem.fixes] == ["remove models[0].vllm_env.VLLM_WORKER_MULTIPROC_METHOD"]
    # The same value in the oldest release's image: its own parser decides.
    old = _document(image="vllm/vllm-openai:v0.21.0", vllm_env={"VLLM_USE_DEEP_GEMM": False})
    assert "vLLM 0.21.0 reads it" in only_problem(old).fix


def test_values_the_release_reads_as_written_are_accepted():
    env = {
        "VLLM_USE_DEEP_GEMM": "0",
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN": " TRUE",  # its getter strips and lowercases
        "VLLM_HUMMING_INPUT_QUANT_CONFIG": '{"dtype":"int8"}',  # what vLLM's own hint gives
        "VLLM_GPT_OSS_SYSTEM_TOOL_MCP_LABELS": "",  # an empty list: vLLM's default
        "VLLM_USE_V2_MODEL_RUNNER": "1",  # redundant (vLLM warns), not refused
    }
    config = parse_config(_document(vllm_env=env))
    assert config.models[0].vllm_env == env and config_notes(config) == []


def test_a_variable_the_release_removed_is_refused_with_vllms_own_hint():
    """vLLM 0.34.0 `removed_environment_variables`: its environment check stops the engine when one is set, and says
    what replaced it; 0.21.0 still read VLLM_MARLIN_INPUT_DTYPE, so a config moving to 0.34.0 meets this."""
    problem = only_problem(_document(vllm_env={"VLLM_MARLIN_INPUT_DTYPE": "int8"}))
    assert "vLLM 0.34.0 removed VLLM_MARLIN_INPUT_DTYPE" in problem.message
    assert "VLLM_HUMMING_INPUT_QUANT_CONFIG" in problem.message
    old = _document(image="vllm/vllm-openai:v0.21.0", vllm_env={"VLLM_MARLIN_INPUT_DTYPE": "int8"})
    assert parse_config(old).models[0].vllm_env == {"VLLM_MARLIN_INPUT_DTYPE": "int8"}


def test_pods_start_with_vllm_serve_and_the_model_first():
    config = parse_config(raw("prod"))
    plan = plan_model(config.models[0], config, _catalog())
    assert plan.server_command == ["vllm", "serve"]
    args = vllm_args(plan)
    assert args[0] == config.models[0].s3_uri and not any(a.startswith("--model=") for a in args)


def test_refusals_of_the_release_and_of_its_values_come_together_each_with_a_working_fix():
    """A digest with no vllm_version: the values cannot be checked (no release), so only the release is refused;
    once it is given, the value is refused by that release's parser. Each fix is applied (tests/fixes.py)."""
    document = _document(image="vllm/vllm-openai@sha256:" + "c" * 64, vllm_env={"VLLM_USE_DEEP_GEMM": "true"})
    assert [p.field for p in problems(copy.deepcopy(document))] == ["models[0].vllm_version"]
    document["models"][0]["vllm_version"] = "0.34.0"
    assert [p.field for p in problems(document)] == ["models[0].vllm_env.VLLM_USE_DEEP_GEMM"]
