"""Every refusal is one readable message, the same through `warmstart plan` and the CDK app (`cdk synth`):
exit status 2, the field, the bad value, the rule in words, a fix that works (or none), and no traceback."""

import copy
import json
import os
import subprocess
import sys

import pytest
import yaml

from tests.builders import only_problem, raw
from tests.fixes import refused
from tests.synth import ROOT, cdk_context
from warmstart.config.environment import EnvironmentConfig
from warmstart.config_messages import PATTERN_WORDS
from warmstart.loader import parse_config
from warmstart.naming import bucket_name_problems, moving_reference
from warmstart_cli.__main__ import main


def _dump(document) -> str:
    return yaml.safe_dump(document, sort_keys=False)


def _with(change) -> str:
    document = raw()
    change(document)
    return _dump(document)


def _set(path: str, value):
    def change(document):
        *parents, last = path.split(".")
        node = document
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value

    return change


DEV = (ROOT / "config" / "dev.yaml").read_text()

# (case, how the file is written: text, bytes or "dir"/"absent", expected text in the error output)
FILE_CASES = [
    ("missing file", "absent", ["<file>: no such file", "fix: pass an existing environment file"]),
    ("directory", "dir", ["<file>: is a directory, not a file"]),
    ("not UTF-8", DEV.encode().replace(b"name: dev", b"name: d\xe9v"), ["is not UTF-8 text (byte", "line 2)"]),
    ("empty file", "", ["<root>: the file is empty"]),
    ("list at the top", "- name: dev\n", ["<root>: expected a mapping of settings, found a list"]),
    ("YAML syntax", DEV.replace("region: us-west-2", "region: [us-west-2"), ["not valid YAML at", ".yaml:"]),
    (
        "duplicate key",
        DEV.replace("  gpu_limit: 8", "  gpu_limit: 8\n    gpu_limit: 16"),
        ["gpu_limit: given twice in one mapping", "fix: keep one of them"],
    ),
    (
        "bucket name with two dots",
        _with(_set("buckets.compile_cache", "warmstart..dev-cache")),
        ["buckets.compile_cache: bucket name 'warmstart..dev-cache' must not have two '.' in a row"],
    ),
    (
        "bucket name with a dash next to a dot",
        _with(_set("buckets.compile_cache", "warmstart-.dev")),
        ["must not have '-' next to '.'"],
    ),
    (
        "misspelt key",
        _with(lambda d: d.update(modles=d["models"])),
        ["modles: unknown setting 'modles'", "did you mean 'models'?"],
    ),
]


def _write(tmp_path, content):
    path = tmp_path / "env.yaml"
    if content == "absent":
        return path
    if content == "dir":
        path.mkdir()
        return path
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


@pytest.mark.parametrize("case, content, expected", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_plan_refuses_with_the_message_and_no_traceback(tmp_path, capsys, case, content, expected):
    assert main(["plan", "--config", str(_write(tmp_path, content))]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    for text in expected:
        assert text in err, (case, err)


# Through the CDK app as `cdk synth` runs it (context from CDK_CONTEXT_JSON): slow (a jsii process per case), so
# the cases that used to crash it.
APP_CASES = [
    c
    for c in FILE_CASES
    if c[0]
    in ("missing file", "directory", "not UTF-8", "list at the top", "duplicate key", "bucket name with two dots")
]


@pytest.mark.slow
@pytest.mark.parametrize("case, content, expected", APP_CASES, ids=[c[0] for c in APP_CASES])
def test_the_cdk_app_refuses_the_same_way(tmp_path, case, content, expected):
    path = _write(tmp_path, content)
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps({**cdk_context(), "warmstart:config": str(path)}),
        "CDK_OUTDIR": str(tmp_path / "out"),
    }
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    for text in expected:
        assert text in done.stderr, (case, done.stderr)


# (how the config is changed, the field named, text of the message, text of the fix)
MODEL_ERROR_CASES = [
    (
        _set("models.0.name", "Qwen_3"),
        "models[0].name",
        "'Qwen_3' is not lowercase letters, digits and '-'",
        "write lowercase letters",
    ),
    (
        _set("models.0.replicas", 0),
        "models[0].replicas",
        "0 is out of range: the value must be above 0",
        "use a value above 0",
    ),
    (
        _set("models.0.tensor_parallel_size", "two"),
        "models[0].tensor_parallel_size",
        "'two' is not a whole number or 'auto'",
        "write a whole number or 'auto'",
    ),
    (
        _set("compute.gpu_pool.capacity_types", ["ondemand"]),
        "compute.gpu_pool.capacity_types[0]",
        "'ondemand' is not one of 'on-demand', 'spot' or 'reserved'",
        "use one of",
    ),
    (
        _set("compute.karpenter_version", "1.14.1"),
        "compute.karpenter_version",
        "a setting of compute.mode karpenter only (this environment is auto)",
        "remove it (or move the environment to compute.mode: karpenter, whose settings differ)",
    ),
    (_set("caches.compile", "maybe"), "caches.compile", "'maybe': true or false expected", "write true or false"),
    (
        _set("network.availability_zones", "us-west-2a"),
        "network.availability_zones",
        "expected a list, found a string ('us-west-2a')",
        "write it as a list",
    ),
    (_set("region", "Oregon"), "region", "'Oregon' is not an AWS Region such as us-east-1", "write an AWS Region"),
    (
        _set("network.vpc_cidr", "10.0.0.0/8"),
        "network.vpc_cidr",
        "a /8 block is outside /16 to /20",
        "use a /16 to /20 block",
    ),
]


def test_every_pattern_of_the_config_model_is_said_in_words():
    patterns = set()

    def collect(model):
        for field in model.model_fields.values():
            for meta in field.metadata:
                if getattr(meta, "pattern", None):
                    patterns.add(meta.pattern)
            for arg in _types(field.annotation):
                if isinstance(arg, type) and hasattr(arg, "model_fields"):
                    collect(arg)
                for meta in getattr(arg, "__metadata__", ()):
                    if getattr(meta, "metadata", None):
                        patterns.update(m.pattern for m in meta.metadata if getattr(m, "pattern", None))

    collect(EnvironmentConfig)
    assert len(patterns) > 15
    assert patterns <= set(PATTERN_WORDS), sorted(patterns - set(PATTERN_WORDS))


def _types(annotation):
    yield annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        yield from _types(arg)


@pytest.mark.parametrize(
    "name, broken",
    [
        ("warmstart-dev-compile-cache-123456789012", []),
        ("a.b", []),
        ("ab", ["is 2 characters long"]),
        ("Warmstart", ["only lowercase letters"]),
        ("-warmstart", ["must start and end"]),
        ("warm..start", ["two '.' in a row"]),
        ("warm-.start", ["'-' next to '.'"]),
        ("warm.-start", ["'-' next to '.'"]),
        ("192.168.5.4", ["formatted as an IP address"]),
        ("xn--warmstart", ["must not start with 'xn--'"]),
        ("sthree-warmstart", ["must not start with 'sthree-'"]),
        ("amzn-s3-demo-bucket", ["must not start with 'amzn-s3-demo-'"]),
        ("warmstart-s3alias", ["must not end with '-s3alias'"]),
        ("warmstart--ol-s3", ["must not end with '--ol-s3'"]),
        ("warmstart.mrap", ["must not end with '.mrap'"]),
        ("warmstart--x-s3", ["must not end with '--x-s3'"]),
        ("warmstart--table-s3", ["must not end with '--table-s3'"]),
        ("a" * 64, ["is 64 characters long"]),
    ],
)
def test_s3_bucket_naming_rules_in_full(name, broken):
    found = bucket_name_problems(name)
    assert len(found) == len(broken), found
    for expected, problem in zip(broken, found, strict=False):
        assert expected in problem


def test_model_uri_buckets_follow_the_same_rules():
    document = raw()
    document["buckets"]["models"]["name"] = "models.-dev"
    document["models"][0]["s3_uri"] = "s3://models.-dev/qwen3-4b/"
    fields = {p.field for p in _problems(document)}
    assert {"buckets.models.name", "models[0].s3_uri"} <= fields


def _problems(document):
    from tests.builders import problems

    return problems(document)


@pytest.mark.parametrize(
    "image, moving",
    [
        ("vllm/vllm-openai:v0.21.0", False),
        ("vllm/vllm-openai:0.21.0", False),
        ("vllm/vllm-openai@sha256:" + "a" * 64, False),
        ("registry:5000/vllm:v1", False),
        ("vllm/vllm-openai:nightly-2025-11-01", False),  # a dated nightly names one build
        ("vllm/vllm-openai:main-3f2a9bc", False),  # a commit
        ("vllm/vllm-openai", True),
        ("registry:5000/vllm", True),
        ("vllm/vllm-openai:latest", True),
        ("vllm/vllm-openai:nightly", True),
        ("vllm/vllm-openai:main", True),
        ("vllm/vllm-openai:stable", True),
        ("vllm/vllm-openai:latest-cu128", True),
        ("vllm/vllm-openai:cuda", True),  # names no version
    ],
)
def test_image_references_must_name_a_fixed_release(image, moving):
    assert (moving_reference(image) is not None) == moving
    document = raw()
    document["models"][0]["image"] = image
    if moving:
        problem = only_problem(document)
        assert problem.field == "models[0].image" and "pin a release tag" in problem.fix
    else:
        from warmstart.loader import parse_config
        from warmstart.vllm_release import image_version

        if image_version(image) is None:  # the tag names no vLLM release: the config says which one
            document["models"][0]["vllm_version"] = "0.34.0"
        parse_config(document)


def test_the_pause_image_must_be_pinned_too():
    document = raw()
    document["caches"]["pause_image"] = "registry.k8s.io/pause:latest"
    assert only_problem(document).field == "caches.pause_image"


def _fixed_limit(fix: str) -> int:
    return int(fix.split("at least ", 1)[1].split(",")[0])


def test_a_gpu_limit_below_every_instance_type_launches_nothing_and_its_fix_is_accepted():
    document = raw("prod")
    document["compute"]["gpu_pool"]["gpu_limit"] = 4  # p5.48xlarge has 8
    problem = only_problem(document)
    assert problem.field == "compute.gpu_pool.gpu_limit"
    assert "could never launch a node" in problem.message
    # Not the smallest node's 8: the replicas and the rollouts' pods need 40, which the fix names.
    assert problem.fix == "set gpu_limit to at least 40"
    document["compute"]["gpu_pool"]["gpu_limit"] = _fixed_limit(problem.fix)
    parse_config(document)


def test_a_gpu_limit_below_the_replicas_and_the_surge_is_refused_with_fixes_that_work_on_their_own():
    document = raw("prod")
    # On 8-GPU p5 nodes: llama up to 4 TP-4 replicas (autoscaled), each on its own node; qwen's 2 TP-2 replicas
    # share two of them: 32 GPUs. With each model's rollout pod: a fifth node for llama's, qwen's beside a third: 40.
    document["compute"]["gpu_pool"]["gpu_limit"] = 39
    problem = only_problem(document)
    assert problem.message == (
        "39 is below what the models need: 40 GPUs of nodes, placed as the scheduler could: 3 x p5.48xlarge "
        "(llama-3-3-70b x1 + qwen3-6-35b-a3b x1), 2 x p5.48xlarge (llama-3-3-70b x1) (autoscaled at max_replicas: "
        "llama-3-3-70b), with the pod each model's rollout starts first; per node, p5.48xlarge: 191.199 CPU, 1891.9 "
        "GiB for models (allocatable 191.45 CPU, 1892.9 GiB, less 6 DaemonSet pods' 0.251 CPU, 1 GiB)"
    )
    assert problem.fix == "set gpu_limit to at least 40, or set surge: false (rollouts then replace one pod at a time)"
    for alternative in ({"gpu_limit": 40}, {"surge": False}):  # each alternative, applied alone, is accepted
        fixed = copy.deepcopy(document)
        fixed["compute"]["gpu_pool"].update(alternative)
        parse_config(fixed)
    # Below the replicas alone, turning surge off would not do: it is not offered.
    document["compute"]["gpu_pool"]["gpu_limit"] = 31
    problem = only_problem(document)
    assert problem.fix == "set gpu_limit to at least 40"
    document["compute"]["gpu_pool"]["surge"] = False
    problem = only_problem(document)
    assert problem.fix == "set gpu_limit to at least 32"
    document["compute"]["gpu_pool"]["gpu_limit"] = _fixed_limit(problem.fix)
    assert parse_config(document).compute.gpu_pool.gpu_limit == 32


@pytest.mark.parametrize(
    "size_gb, fix",
    [
        (550, "raise weights_memory_fraction to at least 0.86"),  # 0.95 would fit: the hint can work
        (700, "use instance types whose GPUs hold 700 GB at weights_memory_fraction 0.8, e.g. p5e.48xlarge"),
        (5000, ""),  # no single node of the catalog holds it: no fix offered
    ],
)
def test_fit_hints_are_offered_only_where_they_work(size_gb, fix):
    document = raw("prod")
    document["models"][1]["size_gb"] = size_gb
    document["caches"]["weights"] = False
    problem = only_problem(document)
    assert problem.field == "models[1].tensor_parallel_size"
    assert (fix in problem.fix) if fix else (problem.fix == "" and "no instance type of the catalog" in problem.message)
    assert "(at most 0.95)" not in problem.fix


def test_an_explicit_tensor_parallel_size_too_small_suggests_the_size_that_fits():
    document = raw("prod")
    document["models"][1]["tensor_parallel_size"] = 2  # 140 GB on 2 x 80 GB
    assert only_problem(document).fix == "raise tensor_parallel_size to 4 (or use 'auto')"


@pytest.mark.slow
def test_a_good_config_synthesizes_through_the_app_with_no_warning(tmp_path):
    """`cdk synth` runs app.py so; jsii prints a deprecated API's use (e.g. Stack#addDependency) on stderr."""
    # The CDK CLI hands the app cdk.json's context (feature flags) and --context values this way.
    env = {
        **os.environ,
        "CDK_CONTEXT_JSON": json.dumps({**cdk_context(), "warmstart:config": "config/prod.yaml"}),
        "CDK_OUTDIR": str(tmp_path / "out"),
        "JSII_DEPRECATED": "warn",
    }
    done = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "deprecated" not in done.stderr.lower() and "Traceback" not in done.stderr
    assert (tmp_path / "out" / "warmstart-prod-model-llama-3-3-70b.template.json").exists()


# From the acceptance run (about 160 configurations written as a new user would): each case once crashed the
# CDK app while plan accepted it, was accepted though it cannot deploy, or got a misleading message or fix.
ACCEPTANCE_CASES = [
    (_set("network.vpc_cidr", "fd00::/16"), "network.vpc_cidr", "'fd00::/16' is an IPv6 block", "IPv4 block"),
    (
        _set("network.vpc_cidr", "10.20.1.0/16"),
        "network.vpc_cidr",
        "'10.20.1.0/16' has host bits set",
        "10.20.0.0/16",
    ),
    (
        _set("cluster.public_access_cidrs", ["203.0.113.0/24", "myhome"]),
        "cluster.public_access_cidrs[1]",
        "'myhome' is not a CIDR block",
        "IPv4 block",
    ),
    (
        _set("tags", {"project": "warmstart", "aws:owner": "me"}),
        'tags["aws:owner"] (key)',
        "starts with 'aws:', which AWS reserves",
        "choose another key",
    ),
    (
        _set("tags", {"project": "warmstart", "cost center!": "x"}),
        'tags["cost center!"] (key)',
        "is not an AWS tag: letters, digits, spaces and",
        "write an AWS tag",
    ),
    (
        _set("tags", {"project": "v" * 300}),
        "tags.project",
        "has 300 characters; at most 256 allowed",
        "shorten it to 256",
    ),
    (
        _set("tags", {"cost-center": 1234}),
        'tags["cost-center"]',
        "1234 is not text (YAML read it as number)",
        'write it in quotes: "1234"',
    ),
    (
        _set("cluster.kubernetes_version", 1.35),
        "cluster.kubernetes_version",
        "(YAML read it as number)",
        "in quotes",
    ),
    (
        _set("image_preload", {"mode": False}),
        "image_preload.mode",
        "YAML read off/on/no/yes as false/true",
        "in quotes",
    ),
    (_set("models.0.image", ""), "models[0].image", "is empty", "give a value"),
    (
        _set("compute.gpu_pool", None),
        "compute.gpu_pool",
        "expected a mapping of settings, found nothing",
        "'key: value' lines",
    ),
    (
        _set("tags", {f"team-{i}": "x" for i in range(51)}),
        "tags",
        "51 item(s); at most 40 allowed (EC2 allows 50 tags per resource; Karpenter adds 6 of its own",
        "give at most 40",
    ),
    (
        _set("name", "d\u0435v"),  # a Cyrillic e
        "name",
        "(character 2, 'е', is U+0435 CYRILLIC SMALL LETTER IE, not ASCII)",
        "write lowercase letters",
    ),
    (
        _set("deploy.github.environment", " dev"),
        "deploy.github.environment",
        "starts or ends with a space",
        "",
    ),
]

# Valid by their owners' rules: a GitHub environment with spaces (GitHub, "Managing environments for deployment").
OWNERS_RULES_ACCEPTED = [
    _set("deploy.github.environment", "Production EU"),
]


@pytest.mark.parametrize("change", OWNERS_RULES_ACCEPTED)
def test_names_valid_by_their_owners_rules_are_accepted(change):
    document = raw()
    change(document)
    parse_config(document)


def test_a_capacity_reservation_id_with_capitals_is_refused_saying_so():
    document = raw("prod")
    document["compute"]["gpu_pool"]["capacity_reservations"] = [{"id": "cr-0ABC123"}]
    problem = only_problem(document)
    assert "capital letters: write it in lowercase" in problem.message


@pytest.mark.parametrize("change, field, message, fix", MODEL_ERROR_CASES + ACCEPTANCE_CASES)
def test_model_errors_echo_the_value_and_say_the_rule_in_words(change, field, message, fix):
    document = raw()
    change(document)
    problem = only_problem(document)
    assert problem.field == field, str(problem)
    assert message in problem.message, str(problem)
    assert fix in problem.fix, str(problem)
    assert "correct the value as the message says" not in problem.fix


def test_a_revision_yaml_reads_as_a_date_is_echoed_as_written():
    import datetime

    document = raw()
    document["models"][0]["weights_revision"] = datetime.date(2025, 4, 29)  # what unquoted 2025-04-29 loads as
    problem = only_problem(document)
    assert problem.message == "2025-04-29 is not text (YAML read it as date)"
    assert problem.fix == 'write it in quotes: "2025-04-29"'


@pytest.mark.parametrize(
    "image, message",
    [
        ("VLLM/vllm-openai:v0.21.0", "is not a valid image reference"),
        ("vllm/vllm-openai: v0.21.0", "is not a valid image reference"),
        ("vllm/vllm-openai@sha256:abc", "has a malformed digest"),
        ("vllm/vllm-openai:cuda12", "names no version"),
    ],
)
def test_image_references_kubernetes_would_refuse_are_refused(image, message):
    document = raw()
    document["models"][0]["image"] = image
    problem = only_problem(document)
    assert problem.field == "models[0].image" and message in problem.message


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-anything", "warmstart-system"])
def test_a_model_cannot_take_a_system_namespace(name):
    document = raw()
    document["models"][0]["name"] = name
    document["models"][0]["s3_uri"] = f"s3://warmstart-dev-models-123456789012/{name}/"
    assert only_problem(document).field == "models[0].name"


def test_an_alarm_topic_of_another_region_is_refused():
    document = raw()
    document["alerts"] = {"topic_arn": "arn:aws:sns:eu-west-1:123456789012:oncall"}
    problem = only_problem(document)
    assert problem.field == "alerts.topic_arn" and "us-west-2" in problem.fix


def test_the_memory_fix_names_instance_types_that_allocate_it_and_works_when_applied():
    from warmstart.loader import parse_config

    document = raw()
    document["models"][0]["size_gb"] = 30
    document["models"][0]["weights_cache"] = True
    problem = only_problem(document)
    assert problem.field == "models[0].memory_gib"
    assert "with instance_types: ['g6e.2xlarge']" in problem.fix  # g6e.xlarge allocates 28 GiB at most
    needed = int(problem.fix.split("raise memory_gib to ")[1].split(" ")[0])
    document["models"][0]["memory_gib"] = needed
    document["models"][0]["instance_types"] = ["g6e.2xlarge"]
    parse_config(document)  # the fix, applied, is accepted


def test_a_tab_in_yaml_says_to_indent_with_spaces(tmp_path, capsys):
    path = tmp_path / "tabs.yaml"
    path.write_text(DEV.replace("  gpu_pool:", "\tgpu_pool:"))
    assert main(["plan", "--config", str(path)]) == 2
    assert "indent with spaces" in capsys.readouterr().err


MERGED_MODELS = """
x-qwen: &qwen
  s3_uri: s3://warmstart-dev-models-123456789012/qwen3-4b/
  size_gb: 10
  weights_revision: "2025-04-29"
  tensor_parallel_size: 1
  image: vllm/vllm-openai:v0.21.0
  torch_version: 2.11.0
  replicas: 2
"""


def _with_merged_models(tmp_path, models: str):
    text = (ROOT / "config" / "dev.yaml").read_text()
    head, _, tail = text.partition("\nmodels:\n")
    rest = tail[tail.index("\ncaches:") :]
    path = tmp_path / "merged.yaml"
    path.write_text(MERGED_MODELS + head + "\nmodels:\n" + models + rest)
    return path


def test_yaml_merge_keys_and_anchors_load_as_pyyaml_reads_them(tmp_path):
    from warmstart.loader import load_config

    path = _with_merged_models(tmp_path, "  - {<<: *qwen, name: qwen-a}\n  - <<: *qwen\n    name: qwen-b\n")
    config = load_config(path)
    assert [m.name for m in config.models] == ["qwen-a", "qwen-b"]
    assert {m.replicas for m in config.models} == {2}


@pytest.mark.parametrize(
    "models, said",
    [
        # written beside a merge that brings it too
        ("  - <<: *qwen\n    name: qwen-a\n    size_gb: 12\n", "size_gb: given twice in one mapping"),
        # brought by two merges
        ("  - <<: [*qwen, *qwen]\n    name: qwen-a\n", "s3_uri: given twice in one mapping"),
        # written twice, deep in a merged model
        ("  - <<: *qwen\n    name: qwen-a\n    vllm_env: {VLLM_A: '1', VLLM_A: '2'}\n", "VLLM_A: given twice"),
    ],
)
def test_a_key_given_twice_is_refused_through_merges_too(tmp_path, models, said):
    from warmstart.config_file import ConfigError
    from warmstart.loader import load_config

    with pytest.raises(ConfigError) as caught:
        load_config(_with_merged_models(tmp_path, models))
    assert said in str(caught.value) and "keep one of them" in str(caught.value)


def problems_of(document: dict) -> list:
    return refused(document)


def _each_alternative_is_accepted(document: dict, alternatives: list[dict]) -> None:
    """Applies each alternative a fix offers (settings by path) to the refused config: each is accepted alone."""
    for alternative in alternatives:
        fixed = copy.deepcopy(document)
        for path, value in alternative.items():
            node = fixed
            *parents, last = path.split(".")
            for key in parents:
                node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
            if value is None:
                node.pop(last, None)
            else:
                node[last] = value
        parse_config(fixed)


def test_min_replicas_above_max_offers_fixes_that_work_on_their_own():
    document = raw()
    document["compute"]["gpu_pool"]["gpu_limit"] = 64
    document["models"][0]["autoscaling"] = {"min_replicas": 3, "max_replicas": 1}
    (problem,) = [p for p in problems_of(document) if p.message.startswith("3 is above max_replicas")]
    assert problem.fix == "set max_replicas to 3 or more, or min_replicas to 1"  # dev allows one replica's downtime
    _each_alternative_is_accepted(
        document, [{"models.0.autoscaling.max_replicas": 3}, {"models.0.autoscaling.min_replicas": 1}]
    )
    document["models"][0]["allow_single_replica_downtime"] = False
    (problem,) = [p for p in problems_of(document) if p.message.startswith("3 is above max_replicas")]
    assert problem.fix == "set max_replicas to 3 or more"  # min_replicas 1 would be refused for its downtime


def test_a_system_node_group_min_above_max_offers_both_ways():
    document = raw("prod")
    document["compute"]["system_node_group"].update(min_size=3, max_size=1)
    problem = only_problem(document)
    assert problem.fix == "set max_size to 3 or more, or min_size to 1"
    _each_alternative_is_accepted(
        document, [{"compute.system_node_group.max_size": 3}, {"compute.system_node_group.min_size": 1}]
    )


def test_the_snapshot_on_al2023_offers_bottlerocket_without_what_it_would_refuse_next():
    document = raw("prod")  # AL2023 with parallel_pull
    document["image_preload"]["mode"] = "snapshot"
    problem = only_problem(document)
    assert "without parallel_pull" in problem.fix
    _each_alternative_is_accepted(
        document,
        [
            {"image_preload.mode": "prepull"},
            {"compute.ami_alias": "bottlerocket@v1.57.0", "image_preload.parallel_pull": None},
        ],
    )


@pytest.mark.parametrize(
    "line, written, field, read_as, valid",
    [
        # YAML 1.1 (PyYAML's resolver): a leading 0 and digits 0-7 make an octal number.
        ('account: "123456789012"', "account: 012345670123", "account", "the number 1402433619", True),
        # A trailing 0 goes: 1.30 is the float 1.3; the fix quotes what was written, not 1.3.
        (
            "image: vllm/vllm-openai:v0.34.0",
            "image: vllm/vllm-openai:v0.34.0\n    torch_version: 2.10",
            "models[0].torch_version",
            "the number 2.1",
            False,  # vLLM 0.34.0 pins 2.14.0: the quoted "2.10" is a PyTorch version, refused next for its value
        ),
        ('weights_revision: "2025-04-29"', "weights_revision: 20250429", "models[0].weights_revision", None, True),
        ("dry_run: true", "dry_run: true\n  orphan_age_hours: 0x18", None, None, True),  # a number field takes it
    ],
)
def test_values_yaml_turns_into_numbers_are_refused_with_the_literal_as_written(
    tmp_path, line, written, field, read_as, valid
):
    """The message echoes the text as written (not the number YAML 1.1 made of it) and the fix quotes that text,
    which the rule then accepts."""
    from warmstart.config_file import ConfigError
    from warmstart.loader import load_config

    text = (ROOT / "config" / "dev.yaml").read_text()
    assert line in text
    path = tmp_path / "dev.yaml"
    path.write_text(text.replace(line, written, 1))
    if field is None:
        load_config(path)
        return
    with pytest.raises(ConfigError) as refused_config:
        load_config(path)
    (problem,) = refused_config.value.problems
    literal = written.split(": ")[-1]
    assert problem.field == field and problem.message.startswith(f"{literal} is not text"), problem
    if read_as:
        assert f"(YAML 1.1 read the unquoted {literal} as {read_as})" in problem.message
    assert problem.fix == f'write it in quotes: "{literal}"'
    (fix,) = problem.fixes
    path.write_text(text.replace(line, written.replace(literal, f'"{literal}"'), 1))
    assert [str(e.value) for e in fix.edits] == [literal]
    if valid:
        load_config(path)
