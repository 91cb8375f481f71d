"""Every vLLM container warmstart renders, started in the real vLLM of every supported release (make test-vllm):
0.21.0, the oldest, and 0.34.0, the newest (warmstart/vllm_releases/); each test runs once per release.

Each pod runs as the cluster would run it: the rendered Deployment on a stand-in node (kubelet's order, volumes at
their container paths, the environment kubelet and containerd build, service links included), the real entry step,
the real agent's node copy served on the pod's loopback or the test S3 server, and in place of the server's start
vLLM's own argument parser, environment, engine config and compile-hash functions (tests/real_vllm/probe.py). No
GPU: only the CUDA driver library and the platform object stand in (tests/real_vllm/environment.py, probe.py).

It checks, for every container: vLLM accepts the arguments, every variable vLLM knows evaluates, the engine config
is built and says what warmstart rendered, the compile cache is where the agent restores and publishes it, the S3
and node-copy starts of one configuration give equal compile-hash parts (as they stand once the engine config is
built: vLLM finishes them while it builds the model, from the same inputs; tests/real_vllm/probe.py), every change
a config can express moves both those parts and warmstart's key, and the fast tier's stand-in
(tests/standins/vllm.py) derives what vLLM derives.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

import pytest

from contracts.node_layout import COMPILE_CACHE_CONTENT
from model_workload.pod_spec import WEIGHTS_MOUNT
from node_agent.runtime.compile_manifest import VLLM_FOLDER
from tests.agent.cluster_world import World
from tests.real_vllm import cases as case_set
from tests.real_vllm import pods
from tests.real_vllm.environment import VllmEnvironment
from tests.standins import vllm as standin
from tests.standins.kubelet import PodRun
from warmstart.catalog import default_catalog
from warmstart.checks.fix import UNSET
from warmstart.reserved_vllm_env import RESERVED_VLLM_ENV
from warmstart.sizing import candidate_instances
from warmstart.vllm_release import releases
from warmstart.workload import COMPILE_CACHE_MOUNT, VLLM_ASSETS_MOUNT, plan_model

pytestmark = pytest.mark.real_vllm
# What the entry step sets for the node-copy load (model_workload/runtime/vllm_entry.py), and what the test
# cluster sets for S3 (on EKS: Pod Identity's variables): none of them may be a variable vLLM knows.
LOAD_PATH_VARIABLES = {
    "PYTHONPATH",
    "WARMSTART_NODE_COPY_DIR",
    "WARMSTART_NODE_COPY_MODEL",
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_EC2_METADATA_DISABLED",
    "RUNAI_STREAMER_S3_UNSIGNED",
    "RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING",
}


@dataclass
class Start:
    version: str  # the vLLM release the pod's image runs
    case: str
    model: str
    load: str
    fingerprint: str
    pod: PodRun
    report: dict
    node_cache: Path  # where the agent restores and publishes this configuration's cache on the node

    @property
    def label(self) -> str:
        return f"vLLM {self.version}: {self.case}/{self.model} container vllm ({self.load} load)"

    @property
    def folder(self) -> tuple:
        """What decides vLLM's compile folders, at config time: the backend folder's parts and the AOT folder's."""
        parts = self.report["hash"]["parts"]
        return parts["env"], parts["config"], parts["compiler"], self.report["hash"]["aot_hash"]


@pytest.fixture(scope="session")
def starts(vllm_environment, s3_server, tmp_path_factory) -> list[Start]:
    """Every container of every case, started once (about 20 s each on 2 cores)."""
    models_bucket, compile_bucket = s3_server.new_bucket(), s3_server.new_bucket()
    client = s3_server.client()
    uploaded = set()
    done = []
    for case in case_set.cases(models_bucket, compile_bucket, vllm_environment.version):
        for model in case.config.models:
            if model.name not in uploaded:
                files = {**case_set.model_files(model.name), case_set.WEIGHTS_FILE: case_set.weights_file(model.name)}
                for name, body in files.items():
                    key = f"{model.name}/{name}"
                    client.put_object(Bucket=models_bucket, Key=key, Body=body, ChecksumAlgorithm="CRC64NVME")
                uploaded.add(model.name)
            for load in case.loads:
                scratch = tmp_path_factory.mktemp(f"{vllm_environment.version}-{case.name}-{model.name}-{load}")
                done.append(_start(case, model.name, load, vllm_environment, s3_server, scratch))
    summary = tmp_path_factory.getbasetemp() / f"real-vllm-{vllm_environment.version}-starts.json"
    summary.write_text(json.dumps([_summary(s) for s in done], indent=1, sort_keys=True))
    print(f"\nreal vLLM starts: {summary}")
    return done


def _summary(start: Start) -> dict:
    """One line of the tier's record (its path is printed): what each start gave, for a person to read."""
    report = start.report
    return {
        "start": start.label,
        "seconds": report["seconds"],
        "errors": [f"{e['stage']}: {e.get('variable', '')} {e['error']}" for e in report["errors"]],
        "config": report.get("config"),
        "hash": {k: v for k, v in report.get("hash", {}).items() if k != "env_factors"},
        "entry": report["entry_output"],
        "warmstart_fingerprint": start.fingerprint,
    }


def _start(case, model_name: str, load: str, vllm_env: VllmEnvironment, server, scratch: Path) -> Start:
    config, catalog = case.config, default_catalog()
    model = next(m for m in config.models if m.name == model_name)
    plan = plan_model(model, config, catalog)
    instance = candidate_instances(model, config, catalog)[0]
    world = World(server=server, scratch=scratch, config=config, image_env={})
    node = world.node(f"node-{load}", config, instance.instance_type)
    if load == "node":
        assert node.agent.weights_tick()[model_name] == "downloaded"
    node.agent.start()  # nothing published yet: the done marker says so and the pod compiles
    pod = pods.schedule(
        world, node, config, model_name, vllm_env=vllm_env, instance=instance, service_links_on=case.service_links
    )
    env = pods.cluster_env(world)
    pods.run_init_containers(pod, env)
    started = time.monotonic()
    report = pods.probe_report(pod, env)
    report["seconds"] = round(time.monotonic() - started, 1)
    return Start(
        version=vllm_env.version,
        case=case.name,
        model=model_name,
        load=load,
        fingerprint=plan.factors.fingerprint(),
        pod=pod,
        report=report,
        node_cache=node.layout.model_dir(model_name, plan.factors.fingerprint()),
    )


def _failures(start: Start) -> str:
    return "\n".join(
        f"{start.label}: {e['stage']}"
        + (f", variable {e['variable']}" if "variable" in e else "")
        + f": vLLM says {e['error']}"
        for e in start.report["errors"]
    )


def _fixed(starts: list[Start]) -> list[Start]:
    return [s for s in starts if s.case != "prod-before-the-fix"]


def test_every_container_starts_in_vllm(starts):
    failures = [_failures(s) for s in _fixed(starts) if s.report["errors"]]
    assert not failures, "\n".join(failures)
    assert {s.case for s in starts} >= {"dev", "prod"}
    assert {s.report["config"]["tensor_parallel_size"] for s in _fixed(starts)} == {1, 2, 4, 8}
    assert {s.load for s in _fixed(starts)} == {"s3", "node"}


def test_the_tier_refuses_the_pods_rendered_before_the_fix(starts):
    """Service links on: kubelet gives every pod VLLM_PORT=tcp://<ip>:8000 from the Service `vllm`, and vLLM
    refuses it; the failure names the container, the variable and vLLM's own message."""
    before = [s for s in starts if s.case == "prod-before-the-fix"]
    assert before
    for start in before:
        message = _failures(start)
        assert "variable VLLM_PORT" in message and "appears to be a URI" in message, message
        assert start.label in message


def test_vllm_runs_what_warmstart_rendered(starts):
    for start in _fixed(starts):
        config, plan = start.report["config"], start.pod.spec
        (container,) = plan["containers"]
        args = {a.split("=", 1)[0]: a.split("=", 1)[1] for a in container["args"] if "=" in a}
        assert config["tensor_parallel_size"] == int(args["--tensor-parallel-size"]), start.label
        assert config["max_model_len"] == int(args["--max-model-len"]), start.label
        assert config["load_format"] == "runai_streamer", start.label
        assert config["model_loader_extra_config"] == json.loads(args["--model-loader-extra-config"]), start.label
        assert config["kv_cache_dtype"] == args.get("--kv-cache-dtype", "auto"), start.label
        if "--max-num-batched-tokens" in args:
            assert config["max_num_batched_tokens"] == int(args["--max-num-batched-tokens"]), start.label
        assert not config["enforce_eager"] and "NONE" not in config["compilation_mode"], start.label
        assert config["compilation_cache_dir"] in ("", None), start.label  # vLLM's own hashed folders, its guard on


def test_the_model_path_is_the_one_vllm_hashes_for_the_s3_uri_on_both_loads(starts):
    for start in _fixed(starts):
        config = start.report["config"]
        uri = config["model_weights"]
        assert uri.startswith("s3://") and uri.endswith(f"/{start.model}/"), start.label
        expected = f"{VLLM_ASSETS_MOUNT}/model_streamer/{hashlib.sha256(uri.encode()).hexdigest()[:8]}"
        assert config["model"] == config["tokenizer"] == expected, start.label
        # vLLM 0.21.0 pulls every file but the weights when the tokenizer is the model
        # (maybe_pull_model_tokenizer_for_runai).
        assert config["pulled_files"] == sorted(case_set.model_files(start.model)), start.label
        expected_load = "node-local copy" if start.load == "node" else "streaming from"
        assert any(expected_load in line for line in start.report["entry_output"]), (
            start.label,
            start.report["entry_output"],
        )


def test_the_compile_cache_is_where_the_agent_restores_and_publishes_it(starts):
    content = f"{COMPILE_CACHE_MOUNT}/{COMPILE_CACHE_CONTENT}"
    for start in _fixed(starts):
        config = start.report["config"]
        assert config["vllm_cache_root"] == f"{content}/{VLLM_FOLDER}", start.label
        assert config["inductor_cache_dir"].startswith(content + "/"), start.label
        assert config["triton_cache_dir"].startswith(content + "/"), start.label
        # The container path maps, through the pod's hostPath volume, onto the agent's folder for this configuration.
        mounted = start.pod.volumes["compile-cache"] / COMPILE_CACHE_CONTENT
        assert mounted.resolve() == start.node_cache.resolve(), start.label
        # vLLM itself wrote there at config time (its model-info cache under VLLM_CACHE_ROOT).
        assert (start.node_cache / VLLM_FOLDER).is_dir(), start.label


def test_both_loads_of_one_configuration_give_one_compile_folder(starts):
    by_config: dict[tuple, list[Start]] = {}
    for start in _fixed(starts):
        by_config.setdefault((start.case, start.model), []).append(start)
    pairs = [group for group in by_config.values() if len(group) == 2]
    assert len(pairs) >= 4
    for s3, node in pairs:
        assert s3.folder == node.folder, (s3.label, s3.folder, node.folder)
        assert s3.report["hash"]["env_factors"] == node.report["hash"]["env_factors"], s3.label
        assert s3.report["config"]["model"] == node.report["config"]["model"], s3.label


def test_a_node_copy_start_streams_the_copys_files_as_local_files_and_the_same_tensors(starts):
    """vLLM finds the plugin (PYTHONPATH, the ConfigMap's dist-info), uses its loader for `runai_streamer`, lists
    the copy's files at their container path, and the real streamer yields the tensors an S3 start yields; an S3
    start keeps vLLM's own loader and S3 URIs."""
    by_config: dict[tuple, dict[str, Start]] = {}
    for start in _fixed(starts):
        by_config.setdefault((start.case, start.model), {})[start.load] = start
    pairs = [loads for loads in by_config.values() if len(loads) == 2]
    assert len(pairs) >= 4
    for loads in pairs:
        s3, node = loads["s3"].report["weights"], loads["node"].report["weights"]
        label = loads["node"].label
        assert s3["loader"].endswith("runai_streamer_loader.RunaiModelStreamerLoader"), label
        assert s3["files"] == [f"{loads['s3'].report['config']['model_weights']}{case_set.WEIGHTS_FILE}"], label
        assert node["loader"] == "node_copy_loader.register.<locals>.NodeCopyStreamerLoader", label
        (path,) = node["files"]
        assert path.startswith(f"{WEIGHTS_MOUNT}/{loads['node'].model}/") and path.endswith(f"/{case_set.WEIGHTS_FILE}")
        assert node["tensors"] == s3["tensors"] and len(s3["tensors"]) == 2, label
        assert any(
            "the streamer reads the weight files as local files" in line
            for line in loads["node"].report["entry_output"]
        )


def test_no_load_path_variable_is_one_vllm_knows(starts):
    known = set(_fixed(starts)[0].report["known_env"])
    assert not LOAD_PATH_VARIABLES & known


def test_every_change_a_config_can_express_moves_vllms_hash_and_warmstarts_key(starts):
    per_model: dict[str, dict[str, Start]] = {}
    for start in _fixed(starts):
        per_model.setdefault(start.model, {})[start.fingerprint] = start
    compared = 0
    for variants in per_model.values():
        for a, b in combinations(variants.values(), 2):
            compared += 1
            assert a.fingerprint != b.fingerprint
            assert a.folder != b.folder, (a.label, b.label)
    assert compared >= 2


def test_the_stand_in_derives_what_vllm_derives(starts):
    """tests/standins/vllm.py (the fast tier's vLLM, reading the release's recorded facts) on the very arguments and
    environment vLLM saw: the same model path, the same variables in the environment hash, and the same folder
    wherever vLLM has one and a different one wherever vLLM's differs."""
    fixed = _fixed(starts)
    for start in fixed:
        args = standin.parse_args(start.report["argv"])
        environ = _standin_environ(start)
        model, weights = standin.model_paths(args, environ)
        assert (model, weights) == (start.report["config"]["model"], start.report["config"]["model_weights"])
        set_here = set(start.report["environ"])
        assert set(standin.env_factors(environ)) & set_here == set(start.report["hash"]["env_factors"]) & set_here, (
            start.label
        )
    for a, b in combinations(fixed, 2):
        if a.model != b.model:
            continue
        assert (_standin_folder(a) == _standin_folder(b)) == (a.folder == b.folder), (a.label, b.label)


def _standin_environ(start: Start) -> dict[str, str]:
    """The environment vLLM saw, in the stand-in image of the same release."""
    return {**start.report["environ"], "STANDIN_VLLM_VERSION": start.version}


def _standin_folder(start: Start) -> tuple:
    args, environ = standin.parse_args(start.report["argv"]), _standin_environ(start)
    model, weights = standin.model_paths(args, environ)
    hf_config = json.loads(case_set.model_files(start.model)["config.json"])
    parts = standin.hashes(args, environ, model, weights, hf_config)
    return parts["env"], parts["config"]


def test_the_recorded_facts_are_the_installed_vllms(starts, vllm_environment, tmp_path):
    """warmstart/vllm_releases/<release>.json (what synth checks configs against and the stand-in hashes by) says
    what the installed release says: read again from it here (tests/real_vllm/read_release.py), and the variables
    the probe saw vLLM know and hash."""
    from tests.real_vllm.record_facts import read_vllm

    version = vllm_environment.version
    recorded = releases()[version]
    read = read_vllm(vllm_environment, tmp_path)
    assert read["vllm"] == version
    assert read["env"] == recorded.env, version
    assert read["compile"] == recorded.compile and read["cli"] == recorded.cli, version
    report = _fixed(starts)[0].report
    assert report["vllm_version"] == version
    assert sorted(recorded.env["known"]) == report["known_env"]
    assert sorted(recorded.env["hashed"]) == sorted(report["hash"]["env_factors"])
    torch_pin = f"torch=={recorded.torch}"
    assert torch_pin in [r.split(";")[0].replace(" ", "") for r in read["requires"]], version


def test_every_fix_offered_for_a_vllm_env_value_is_one_vllm_reads_as_meant(vllm_environment, tmp_path):
    """For a variable of each way the release parses values (a whole number, an on/off number, on/off words, a
    number, a choice), values a person writes that the release refuses or reads against their meaning: warmstart
    refuses each at synth, and every value its fixes offer is one the release's own getter takes, reading an on/off
    value as meant. The refused values are checked in the same getter: each fails there or reads the other way."""
    from tests.real_vllm.record_facts import evaluate_values

    version = vllm_environment.version
    known = releases()[version]
    offered, refused = [], []
    for name, written, meant in _unmeant_values(known):
        document = _with_vllm_env(version, {name: written})
        problems = [p for p in _refusals(document) if p.field.endswith(name)]
        assert problems, (version, name, written)
        values = [e.value for p in problems for f in p.fixes for e in f.edits if e.value is not UNSET]
        assert all(isinstance(v, str) for v in values), (name, written, values)
        offered += [(name, v, meant) for v in values]
        if isinstance(written, str):
            refused.append((name, written, meant))
        # Each fix's value is accepted by warmstart in turn.
        for value in values:
            _parse(_with_vllm_env(version, {name: value}))
    assert offered
    results = evaluate_values(vllm_environment, tmp_path, [(n, v) for n, v, _ in offered + refused])
    for (name, value, meant), result in zip(offered, results[: len(offered)], strict=True):
        assert result["ok"], f"vLLM {version} refuses the offered {name}={value!r}: {result['error']}"
        if meant is not None:
            assert result["value"] is meant or result["value"] == meant, (version, name, value, result)
    for (name, value, meant), result in zip(refused, results[len(offered) :], strict=True):
        against = result["ok"] and meant is not None and bool(result["value"]) is not meant
        assert not result["ok"] or against, f"vLLM {version} takes the refused {name}={value!r} as {result}"


def _unmeant_values(known) -> list[tuple[str, object, bool | None]]:
    """(variable, value as written in YAML, the on/off it means or None) for the first variable of each kind."""
    values = known.env["values"]

    def first(kind: str, test=lambda rule: True) -> str:
        return next(
            n for n in sorted(values) if values[n]["kind"] == kind and test(values[n]) and n not in RESERVED_VLLM_ENV
        )

    int_flag, whole, number = first("int_flag"), first("int"), first("float")
    words = first("words_flag", lambda rule: "1" in rule["on"] and "yes" in rule["off"])
    choice = first("choices", lambda rule: not rule["list"] and rule["case_sensitive"])
    wrong_choice = values[choice]["choices"][0] + "x"
    return [
        (int_flag, True, True),  # YAML's true: refused as text, fixed to a spelling int() takes
        (int_flag, False, False),
        (int_flag, "true", True),  # int("true") stops the engine
        (int_flag, "yes", True),
        (whole, "1.5", None),
        (whole, 4.0, None),  # YAML's 4.0: "4.0" is no int
        (number, "fast", None),
        (words, "yes", True),  # read as off by a getter that takes 1/true only
        (words, True, True),
        (choice, wrong_choice, None),
        (choice, None, None),  # empty: removed
    ]


def _with_vllm_env(version: str, env: dict) -> dict:
    from tests.builders import raw

    document = raw("dev")
    document["models"][0]["image"] = releases()[version].image["reference"]
    document["models"][0].pop("torch_version", None)
    document["models"][0]["vllm_env"] = env
    return document


def _refusals(document: dict) -> list:
    from warmstart.config_file import ConfigError
    from warmstart.loader import parse_config

    try:
        parse_config(document)
    except ConfigError as error:
        return error.problems
    return []


def _parse(document: dict) -> None:
    from warmstart.loader import parse_config

    parse_config(document)


def test_the_gpu_scripts_pipeline_runs_every_case_without_a_gpu(vllm_environment, tmp_path):
    """bench/gpu_vllm_cold_start.py with vLLM's probe in place of its server: the same pods, agents, node copy and
    restores as on the GPU machine, so the script a GPU run depends on works before the GPU is lent."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "bench" / "gpu_vllm_cold_start.py"
    done = subprocess.run(
        [sys.executable, str(script), "--engine", "probe", "--vllm", vllm_environment.version, "--work", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_vllm_cold_start-probe.json").read_text())
    cases = results["cases"]
    base = [case for case in cases if not case.startswith("without:")]
    assert sorted(base) == sorted(["cold", "warm_node", "restored", "node_copy"])
    # Each portable cache the restored node held, left out on a node of its own: its share of the start.
    assert sorted(results["shares"]) == sorted(c.removeprefix("without:") for c in cases if c not in base)
    assert all(isinstance(case["engine_caches"], dict) for case in cases.values())
    assert not [c for c in cases.values() if c["errors"]], cases
    assert results["weights_sync"] == "downloaded"
    assert any("node-local copy" in line for line in cases["node_copy"]["entry"])
    assert all("streaming from" in line for c in ("cold", "warm_node", "restored") for line in cases[c]["entry"])
