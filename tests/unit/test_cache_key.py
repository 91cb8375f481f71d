"""The compile-cache key: equal inputs give equal keys; any single factor changed gives another key."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.cache_key import KEY_ROOT, ModelFactors, compile_cache_key, parse_key_prefix

names = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)
factors_strategy = st.builds(
    ModelFactors,
    model=names,
    weights_revision=st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,15}", fullmatch=True),
    image=st.sampled_from(
        ["vllm/vllm-openai:v0.21.0", "vllm/vllm-openai:v0.20.1", "vllm/vllm-openai@sha256:" + "a" * 64]
    ),
    torch_version=st.sampled_from(["2.11.0", "2.10.1", "2.11.0+cu128"]),
    tensor_parallel=st.sampled_from([1, 2, 4, 8]),
    pipeline_parallel=st.just(1),
    max_model_len=st.integers(256, 131072),
    max_num_batched_tokens=st.none() | st.integers(256, 65536),
    dtype=st.sampled_from(["auto", "bfloat16", "float16"]),
    quantization=st.none() | st.sampled_from(["fp8", "awq"]),
    kv_cache_dtype=st.sampled_from(["auto", "fp8"]),
    compilation_config=st.none() | st.fixed_dictionaries({"level": st.integers(0, 3)}),
    vllm_env=st.dictionaries(
        st.from_regex(r"VLLM_[A-Z]{1,8}", fullmatch=True), st.text("abc01", max_size=4), max_size=2
    ),
)
gpus = st.sampled_from([("H100", "sm_90"), ("H200", "sm_90"), ("L40S", "sm_89"), ("A10G", "sm_86")])

# A different value for each factor, to change exactly one at a time.
OTHER = {
    "model": lambda v: v + "x",
    "weights_revision": lambda v: v + "1",
    "image": lambda v: v + "-patched",
    "torch_version": lambda v: v + ".post1",
    "tensor_parallel": lambda v: v * 2,
    "pipeline_parallel": lambda v: v + 1,
    "max_model_len": lambda v: v + 1,
    "max_num_batched_tokens": lambda v: 1 if v is None else v + 1,
    "dtype": lambda v: "float32" if v != "float32" else "auto",
    "quantization": lambda v: "gptq" if v != "gptq" else None,
    "kv_cache_dtype": lambda v: "fp8_e5m2" if v != "fp8_e5m2" else "auto",
    "compilation_config": lambda v: {"level": 9} if v != {"level": 9} else None,
    "vllm_env": lambda v: {**v, "VLLM_EXTRA_SETTING": "1"},
}


def test_every_factor_has_a_mutation():
    assert set(OTHER) == {f.name for f in dataclasses.fields(ModelFactors)}


@settings(max_examples=60, deadline=None)
@given(factors=factors_strategy, gpu=gpus)
def test_equal_inputs_give_equal_keys(factors, gpu):
    copy = ModelFactors.from_dict(dataclasses.asdict(factors))
    assert compile_cache_key(factors, gpu=gpu[0], architecture=gpu[1]) == compile_cache_key(
        copy, gpu=gpu[0], architecture=gpu[1]
    )


@settings(max_examples=60, deadline=None)
@given(factors=factors_strategy, gpu=gpus, field=st.sampled_from(sorted(OTHER)))
def test_any_single_factor_changed_gives_another_key(factors, gpu, field):
    changed = dataclasses.replace(factors, **{field: OTHER[field](getattr(factors, field))})
    before = compile_cache_key(factors, gpu=gpu[0], architecture=gpu[1])
    after = compile_cache_key(changed, gpu=gpu[0], architecture=gpu[1])
    assert before.digest != after.digest and before.prefix != after.prefix
    assert factors.fingerprint() != changed.fingerprint()


@settings(max_examples=40, deadline=None)
@given(factors=factors_strategy)
def test_another_gpu_gives_another_key_but_the_same_node_folder(factors):
    h100 = compile_cache_key(factors, gpu="H100", architecture="sm_90")
    l40s = compile_cache_key(factors, gpu="L40S", architecture="sm_89")
    h200 = compile_cache_key(factors, gpu="H200", architecture="sm_90")
    assert len({h100.prefix, l40s.prefix, h200.prefix}) == 3
    assert factors.fingerprint() == ModelFactors.from_dict(dataclasses.asdict(factors)).fingerprint()


@settings(max_examples=40, deadline=None)
@given(factors=factors_strategy, gpu=gpus)
def test_key_layout_is_readable_and_parses_back(factors, gpu):
    key = compile_cache_key(factors, gpu=gpu[0], architecture=gpu[1])
    assert key.prefix.startswith(
        f"{KEY_ROOT}/{factors.model}/{gpu[0].lower()}-{gpu[1]}/tp{factors.tensor_parallel}-pp1/torch"
    )
    assert parse_key_prefix(key.manifest_key(["torch_compile_cache/0123456789"])) == key.prefix
    assert key.manifest_key(["b", "a"]) == key.manifest_key(["a", "b"]) != key.manifest_key(["a"])
    archive = key.archive_key("0" * 64, "0123456789abcdef")
    assert parse_key_prefix(archive) == key.prefix and key.names_archive(archive, "0" * 64)
    assert not key.names_archive(archive, "1" * 64) and not key.names_archive(key.manifest_key(["a"]), "0" * 64)
    assert key.manifest_key(["a"]).startswith(key.manifest_prefix) and key.manifest_key(["a"]).endswith(".json")


def test_malformed_object_keys_belong_to_no_key():
    assert parse_key_prefix("compile-cache/model/h100-sm_90/tp2-pp1/torch2.11.0/not-hex/manifest.json") is None
    assert parse_key_prefix("elsewhere/file") is None
