"""Every refusal warmstart can give, once each, with its fix as data applied (tests/fixes.py): the fix removes
that refusal and brings no new one unless its words say "then also".

Coverage is read from the source: each place a refusal is written (a Problem in a rule or the loader, a Problem of a
node OS, a Refused of the config model's validators) must be met by a case below, so a refusal added without a
case (and so without a fix checked) fails here.
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest

from tests.fixes import assert_fixes_work, refusals
from tests.scale_config import many_models_settings
from tests.synth import ROOT, settings_of
from warmstart.catalog import Catalog, InstanceSpec, default_catalog
from warmstart.checks.fix import UNSET, Edit, Fix, apply_fix

EXISTING_VPC = settings_of("existing")["network"]["existing"]
PRIVATE_ECR_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/vllm:v0.21.0"
BOTTLEROCKET = {"compute.ami_alias": "bottlerocket@v1.57.0", "image_preload.mode": "snapshot"}


def _small_node_catalog() -> Catalog:
    """The catalog with a GPU node too small for nodeadm's FastImagePull (2 vCPUs)."""
    catalog = default_catalog()
    small = InstanceSpec(gpu="L4", gpu_count=1, nvme_gb=250, vcpus=2, memory_gib=8, network_gbit_per_s=2.5, max_pods=29)
    return Catalog(gpus=catalog.gpus, instances={**catalog.instances, "g4.small": small})


# (case, environment, settings changed by path (UNSET: removed), catalog or None)
CASES: list[tuple[str, str, dict, Catalog | None]] = [
    # network rules and the VPC model
    ("one zone", "dev", {"network.availability_zones": ["us-west-2a"]}, None),
    ("zone of another region", "dev", {"network.availability_zones": ["us-west-2a", "eu-west-1b"]}, None),
    ("zone twice", "dev", {"network.availability_zones": ["us-west-2a", "us-west-2a"]}, None),
    ("private endpoint with public CIDRs", "dev", {"cluster.endpoint_access": "private"}, None),
    ("VPC not a CIDR", "dev", {"network.vpc_cidr": "ten-twenty"}, None),
    ("VPC IPv6", "dev", {"network.vpc_cidr": "fd00::/16"}, None),
    ("VPC host bits", "dev", {"network.vpc_cidr": "10.20.1.0/16"}, None),
    ("VPC too large", "dev", {"network.vpc_cidr": "10.0.0.0/8"}, None),
    ("existing VPC not a CIDR", "existing", {"network.existing.vpc_cidr": "vpc"}, None),
    ("public CIDR not a CIDR", "dev", {"cluster.public_access_cidrs": ["203.0.113.0/24", "home"]}, None),
    ("admin role not an ARN", "prod", {"cluster.admin_role_arns": ["platform-admins"]}, None),
    (
        "warmstart's own namespace as a trusted node reader",
        "prod",
        {"cluster.trusted_node_readers": ["warmstart-system", "datadog"]},
        None,
    ),
    # an existing cluster and VPC
    ("existing cluster, created VPC", "existing", {"network.existing": UNSET}, None),
    ("existing VPC, created cluster", "dev", {"network": {"existing": EXISTING_VPC}}, None),
    ("owned VPC settings beside existing", "existing", {"network.nat_gateways": 2}, None),
    ("subnet twice", "existing", {"network.existing.private_subnets[1]": EXISTING_VPC["private_subnets"][0]}, None),
    (
        "subnet zone of another region",
        "existing",
        {"network.existing.private_subnets[0].availability_zone": "us-east-1a"},
        None,
    ),
    ("no S3 gateway endpoint", "existing", {"network.existing.s3_gateway_endpoint": "none"}, None),
    (
        "owned cluster settings beside existing",
        "existing",
        {"cluster.admin_role_arns": ["arn:aws:iam::345678901234:role/a"]},
        None,
    ),
    ("Auto Mode role in a created cluster", "dev", {"compute.node_role_name": "AmazonEKSAutoNodeRole"}, None),
    ("existing Auto Mode without its node role", "existing-auto-mode", {"compute.node_role_name": UNSET}, None),
    (
        "existing Auto Mode with tags, no cluster role",
        "existing-auto-mode",
        {"compute.cluster_role_name": UNSET, "tags": {"team": "ml"}},
        None,
    ),
    ("Auto Mode add-on said", "existing-auto-mode", {"cluster.existing.pod_identity_agent": "present"}, None),
    ("add-on not said", "existing", {"cluster.existing.pod_identity_agent": UNSET}, None),
    ("add-on missing", "existing", {"cluster.existing.nvidia_device_plugin": "none"}, None),
    ("GitOps device plugin not said", "existing-gitops", {"cluster.existing.nvidia_device_plugin": UNSET}, None),
    (
        "existing controller in a created cluster",
        "prod",
        {
            "compute.karpenter_version": UNSET,
            "compute.system_node_group": UNSET,
            "compute.existing_controller": {"version": "1.14.1", "node_role_name": "KarpenterNodeRole"},
        },
        None,
    ),
    ("own Karpenter settings beside existing controller", "existing", {"compute.karpenter_version": "1.14.1"}, None),
    ("existing Karpenter too old", "existing", {"compute.existing_controller.version": "1.10.2"}, None),
    ("GitOps and Karpenter to install", "existing-gitops", {"compute.existing_controller": UNSET}, None),
    ("GitOps and the device plugin to add", "existing-gitops", {"cluster.existing.nvidia_device_plugin": "add"}, None),
    (
        "GitOps and autoscaling",
        "existing-gitops",
        {"models[0].autoscaling": {"min_replicas": 2, "max_replicas": 3}},
        None,
    ),
    (
        "GitOps and an image snapshot",
        "existing-gitops",
        {"compute.ami_alias": "bottlerocket@v1.57.0", "image_preload.mode": "snapshot"},
        None,
    ),
    ("GitOps without an agent image", "existing-gitops", {"deploy.agent_image": UNSET}, None),
    # the GPU pool
    ("the only instance type unknown", "dev", {"compute.gpu_pool.instance_types": ["g6e.xlarg"]}, None),
    ("one instance type unknown", "prod", {"compute.gpu_pool.instance_types": ["p5.48xlarge", "x9.huge"]}, None),
    ("instance type twice", "dev", {"compute.gpu_pool.instance_types": ["g6e.xlarge", "g6e.xlarge"]}, None),
    (
        "system node group min above max",
        "prod",
        {"compute.system_node_group.min_size": 3, "compute.system_node_group.max_size": 1},
        None,
    ),
    ("reserved capacity in Auto Mode", "dev", {"compute.gpu_pool.capacity_types": ["reserved"]}, None),
    ("reserved without reservations", "prod", {"compute.gpu_pool.capacity_reservations": UNSET}, None),
    ("reservations without reserved", "prod", {"compute.gpu_pool.capacity_types": ["on-demand"]}, None),
    (
        "reservation term with id and tags",
        "prod",
        {"compute.gpu_pool.capacity_reservations[0].id": "cr-0123456789abcdef0"},
        None,
    ),
    ("reservation term empty", "prod", {"compute.gpu_pool.capacity_reservations[0]": {}}, None),
    (
        "reservation owner beside id",
        "prod",
        {"compute.gpu_pool.capacity_reservations[0]": {"id": "cr-0123456789abcdef0", "owner_id": "123456789012"}},
        None,
    ),
    ("reservation tag empty", "prod", {"compute.gpu_pool.capacity_reservations[0].tags": {"pool": ""}}, None),
    (
        "reservation tags all empty",
        "prod",
        {"compute.gpu_pool.capacity_reservations": [{"tags": {"pool": ""}}, {"tags": {"a": "b"}}]},
        None,
    ),
    ("reservation id malformed", "prod", {"compute.gpu_pool.capacity_reservations[0]": {"id": "reservation-1"}}, None),
    ("Auto Mode node lifetime Never", "dev", {"compute.gpu_pool.expire_after": "Never"}, None),
    ("Auto Mode node lifetime too long", "dev", {"compute.gpu_pool.expire_after": "500h"}, None),
    ("Auto Mode grace period too long", "dev", {"compute.gpu_pool.termination_grace_period": "600h"}, None),
    ("ephemeral storage above NVMe", "dev", {"compute.ephemeral_storage_gib": 500}, None),
    (
        "ephemeral storage above one type's NVMe",
        "dev",
        {"compute.gpu_pool.instance_types": ["g6e.xlarge", "g6e.4xlarge"], "compute.ephemeral_storage_gib": 300},
        None,
    ),
    (
        "cached models sharing too little NVMe",
        "dev",
        {
            "caches.weights": True,
            "models[0].size_gb": 60,
            "models[0].instance_types": ["g6e.2xlarge"],
            "models[1]": {
                **settings_of("dev")["models"][0],
                "name": "qwen-b",
                "s3_uri": "s3://warmstart-dev-models-123456789012/qwen-b/",
                "size_gb": 60,
                "instance_types": ["g6e.2xlarge"],
            },
        },
        None,
    ),
    ("GPU limit below every node", "prod", {"compute.gpu_pool.gpu_limit": 4}, None),
    (
        "GPU limit below a model's nodes",
        "dev",
        {
            "compute.gpu_pool.instance_types": ["g6e.xlarge", "g6e.12xlarge"],
            "models[0].instance_types": ["g6e.12xlarge"],
            "compute.gpu_pool.gpu_limit": 2,
        },
        None,
    ),
    ("GPU limit below the placement", "prod", {"compute.gpu_pool.gpu_limit": 39}, None),
    ("GPU limit below the replicas", "prod", {"compute.gpu_pool.gpu_limit": 31}, None),
    # the models
    ("model name twice", "prod", {"models[1].name": "qwen3-6-35b-a3b"}, None),
    ("model in a system namespace", "dev", {"models[0].name": "kube-models"}, None),
    ("single replica", "prod", {"models[0].replicas": 1}, None),
    ("model URI outside the model bucket", "dev", {"models[0].s3_uri": "s3://other-bucket/qwen/"}, None),
    ("image malformed", "dev", {"models[0].image": "VLLM/vllm-openai:v0.21.0"}, None),
    ("image moving", "dev", {"models[0].image": "vllm/vllm-openai:latest"}, None),
    ("vLLM variable not VLLM_", "dev", {"models[0].vllm_env": {"HF_TOKEN": "x"}}, None),
    ("vLLM variable reserved", "dev", {"models[0].vllm_env": {"VLLM_PORT": "9000"}}, None),
    ("vLLM variable expanded", "dev", {"models[0].vllm_env": {"VLLM_LOGGING_LEVEL": "$(LEVEL)"}}, None),
    (
        "vLLM plugin list without warmstart's",
        "prod",
        {"models[0].vllm_env": {"VLLM_PLUGINS": "lora_filesystem_resolver"}},
        None,
    ),
    # the model's vLLM release (warmstart/vllm_releases/) and its values as that release parses them
    ("image names no vLLM release", "dev", {"models[0].image": "vllm/vllm-openai@sha256:" + "d" * 64}, None),
    ("vllm_version not the image's", "dev", {"models[0].vllm_version": "0.21.0"}, None),
    ("vLLM older than supported", "dev", {"models[0].image": "vllm/vllm-openai:v0.20.2"}, None),
    ("vLLM without facts and no torch", "dev", {"models[0].image": "vllm/vllm-openai:v0.35.0"}, None),
    ("torch not the release's pin", "dev", {"models[0].torch_version": "2.11.0"}, None),
    ("vLLM value int() refuses", "dev", {"models[0].vllm_env": {"VLLM_USE_DEEP_GEMM": "true"}}, None),
    ("vLLM value YAML read as true", "dev", {"models[0].vllm_env": {"VLLM_USE_DEEP_GEMM": True}}, None),
    ("vLLM value outside its choices", "dev", {"models[0].vllm_env": {"VLLM_WORKER_MULTIPROC_METHOD": "forkk"}}, None),
    ("vLLM value read as off", "dev", {"models[0].vllm_env": {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "yes"}}, None),
    ("vLLM value float() refuses", "dev", {"models[0].vllm_env": {"VLLM_LOG_STATS_INTERVAL": "often"}}, None),
    ("vLLM variable the release removed", "dev", {"models[0].vllm_env": {"VLLM_MARLIN_INPUT_DTYPE": "int8"}}, None),
    ("model types outside the pool", "dev", {"models[0].instance_types": ["g6e.xlarge", "p5.48xlarge"]}, None),
    (
        "model too big for NVMe with the cache",
        "dev",
        {
            "caches.weights": True,
            "models[0].size_gb": 200,
            "models[0].tensor_parallel_size": "auto",
            "models[0].instance_types": ["g6e.xlarge"],
        },
        None,
    ),
    ("enforce_eager with TP", "prod", {"models[0].enforce_eager": True, "caches.compile": False}, None),
    ("enforce_eager with the compile cache", "dev", {"models[0].enforce_eager": True}, None),
    ("pod memory below the streamer's buffers", "dev", {"models[0].memory_gib": 12}, None),
    ("pod memory, larger nodes allocate it", "dev", {"models[0].size_gb": 30, "caches.weights": True}, None),
    ("CPU request above a node", "dev", {"models[0].cpu": 16}, None),
    ("memory request above a node", "dev", {"models[0].memory_gib": 200}, None),
    ("TP auto, a higher fraction fits", "prod", {"models[1].size_gb": 550, "caches.weights": False}, None),
    ("TP auto, other instance types hold it", "prod", {"models[1].size_gb": 700, "caches.weights": False}, None),
    ("TP auto, nothing holds it", "prod", {"models[1].size_gb": 5000, "caches.weights": False}, None),
    ("TP above the GPUs", "prod", {"models[0].tensor_parallel_size": 16}, None),
    ("TP not dividing the GPUs", "prod", {"models[0].tensor_parallel_size": 3}, None),
    ("TP too small for the weights", "prod", {"models[1].tensor_parallel_size": 2}, None),
    # autoscaling
    ("min replicas above max", "prod", {"models[1].autoscaling.min_replicas": 5}, None),
    ("min replicas one without downtime", "prod", {"models[1].autoscaling.min_replicas": 1}, None),
    (
        "min and max one without downtime",
        "prod",
        {"models[1].autoscaling": {"min_replicas": 1, "max_replicas": 1}},
        None,
    ),
    ("replicas beside autoscaling", "prod", {"models[1].replicas": 3}, None),
    (
        "KV-cache target not a share",
        "prod",
        {"models[1].autoscaling.metric": "kv_cache_usage", "models[1].autoscaling.target_value": 80},
        None,
    ),
    # caches and the pruner
    (
        "KMS key on a bucket warmstart creates",
        "dev",
        {"buckets.models.kms_key_arn": "arn:aws:kms:us-west-2:123456789012:key/0123abcd-0123-4567-89ab-0123456789ab"},
        None,
    ),
    ("compile cache folder off NVMe", "dev", {"caches.compile_host_path": "/var/cache/compile"}, None),
    ("active-set parameter malformed", "dev", {"pruning.extra_active_set_parameters": ["/other/env"]}, None),
    ("caches.image moved", "dev", {"caches.image": True}, None),
    # image preload
    (
        "Bottlerocket without an image of the cluster's Kubernetes",
        "prod",
        {"compute.ami_alias": "bottlerocket@v1.45.0"},
        None,
    ),
    ("Bottlerocket alias of two parts", "prod", {"compute.ami_alias": "bottlerocket@v1.57"}, None),
    (
        "Bottlerocket before its first 1.36 variant",
        "prod",
        {"compute.ami_alias": "bottlerocket@v1.57.0", "cluster.kubernetes_version": "1.36"},
        None,
    ),
    ("AL2023 alias without its v", "prod", {"compute.ami_alias": "al2023@20260714"}, None),
    ("AL2023 release that is no tag", "prod", {"compute.ami_alias": "al2023@v20260601"}, None),
    (
        "AL2023 release without the cluster's Kubernetes",
        "prod",
        {"compute.ami_alias": "al2023@v20260505", "cluster.kubernetes_version": "1.36"},
        None,
    ),
    ("parallel pull on an old AL2023", "prod", {"compute.ami_alias": "al2023@v20250101"}, None),
    ("snapshot on Auto Mode", "dev", {"image_preload.mode": "snapshot"}, None),
    ("snapshot on AL2023", "prod", {"image_preload.mode": "snapshot"}, None),
    ("snapshot with parallel pull", "prod", {**BOTTLEROCKET, "image_preload.parallel_pull": True}, None),
    (
        "snapshot of a private ECR image",
        "prod",
        {**BOTTLEROCKET, "image_preload.parallel_pull": False, "models[0].image": PRIVATE_ECR_IMAGE},
        None,
    ),
    (
        "snapshot data volume too small",
        "prod",
        {**BOTTLEROCKET, "image_preload.parallel_pull": False, "image_preload.snapshot.data_volume_gib": 20},
        None,
    ),
    ("lazy loading", "prod", {"image_preload.mode": "lazy"}, None),
    ("pause image moving", "dev", {"caches.pause_image": "registry.k8s.io/pause:latest"}, None),
    (
        "parallel pull on a node too small",
        "prod",
        {
            "compute.gpu_pool.instance_types": ["p5.48xlarge", "g4.small"],
            "models[0].instance_types": ["p5.48xlarge"],
            "models[1].instance_types": ["p5.48xlarge"],
        },
        _small_node_catalog(),
    ),
    # deploy
    ("environment name too long", "dev", {"name": "development-environment-of-the-ml-team"}, None),
    (
        "emails beside a topic",
        "dev",
        {"alerts": {"emails": ["oncall@example.com"], "topic_arn": "arn:aws:sns:us-west-2:123456789012:alarms"}},
        None,
    ),
    ("topic of another region", "dev", {"alerts.topic_arn": "arn:aws:sns:eu-west-1:123456789012:alarms"}, None),
    ("compile bucket name", "dev", {"buckets.compile_cache": "warmstart..dev-cache"}, None),
    (
        "model bucket name and its URIs",
        "dev",
        {"buckets.models.name": "models.-dev", "models[0].s3_uri": "s3://models.-dev/qwen3-4b/"},
        None,
    ),
    ("model URI bucket name", "dev", {"models[0].s3_uri": "s3://xn--models/qwen3-4b/"}, None),
    ("agent image malformed", "dev", {"deploy.agent_image": "Agent Image"}, None),
    (
        "agent image without a digest",
        "dev",
        {"deploy.agent_image": "123456789012.dkr.ecr.us-west-2.amazonaws.com/agent:v1"},
        None,
    ),
    ("GitHub environment empty", "dev", {"deploy.github.environment": ""}, None),
    ("GitHub environment too long", "dev", {"deploy.github.environment": "e" * 300}, None),
    ("GitHub environment with spaces around", "dev", {"deploy.github.environment": " dev "}, None),
    ("GitHub environment with a control character", "dev", {"deploy.github.environment": "dev\tEU"}, None),
    # tags
    ("tag key reserved by AWS", "dev", {"tags": {"aws:owner": "me"}}, None),
    ("tag key with a character AWS refuses", "dev", {"tags": {"cost center!": "x"}}, None),
    ("tag value too long", "dev", {"tags": {"project": "v" * 300}}, None),
    ("tag value a number", "dev", {"tags": {"cost-center": 1234}}, None),
    ("too many tags", "dev", {"tags": {f"team-{i}": "x" for i in range(51)}}, None),
    # the model's own rules (pydantic), as the loader words them
    ("misspelt setting", "dev", {"modles": settings_of("dev")["models"], "models": UNSET}, None),
    ("estimate measured names an unknown setting", "dev", {"estimate.measured": ["node_ready_seconds", "speed"]}, None),
    ("a path written as one key", "dev", {'["image_preload.mode"]': "prepull", "image_preload": UNSET}, None),
    ("a key outside ASCII", "dev", {'tags["\u043a\u043b\u044e\u0447"]': "x!"}, None),
    ("unknown setting", "dev", {"compute.gpu_pool.colour": "red"}, None),
    ("setting of the other compute mode", "dev", {"compute.karpenter_version": "1.14.1"}, None),
    ("missing setting", "dev", {"models[0].size_gb": UNSET}, None),
    ("unknown compute mode", "dev", {"compute.mode": "fargate"}, None),
    ("compute mode missing", "prod", {"compute.mode": UNSET}, None),
    ("name not a DNS label", "dev", {"models[0].name": "Qwen_3"}, None),
    ("look-alike letter", "dev", {"name": "d\u0435v"}, None),
    ("account not 12 digits", "dev", {"account": "12345"}, None),
    ("literal misspelt", "dev", {"compute.gpu_pool.capacity_types": ["ondemand"]}, None),
    ("literal read as false", "dev", {"image_preload.mode": False}, None),
    ("literal number", "dev", {"network.flow_log_retention_days": 10}, None),
    ("out of range, with a default", "dev", {"models[0].replicas": 0}, None),
    ("out of range, required", "dev", {"models[0].autoscaling.min_replicas": 0}, None),
    ("above the range", "prod", {"image_preload.rollout_wait_minutes": 11}, None),
    ("union: not a number or auto", "dev", {"models[0].tensor_parallel_size": "two"}, None),
    ("not true or false", "dev", {"caches.compile": "maybe"}, None),
    ("a string for a list", "dev", {"network.availability_zones": "us-west-2a"}, None),
    ("nothing for a mapping", "dev", {"compute.gpu_pool": None}, None),
    ("a number for text", "dev", {"cluster.kubernetes_version": 1.35}, None),
    ("a date for text", "dev", {"models[0].weights_revision": __import__("datetime").date(2025, 4, 29)}, None),
    ("empty image", "dev", {"models[0].image": ""}, None),
    ("empty list", "dev", {"compute.gpu_pool.instance_types": []}, None),
]

# Cases that need an environment of hundreds of models (the limits that grow with them): slow.
SCALE_CASES: list[tuple[str, dict]] = [
    ("weights-cached models over the agent role's policies", many_models_settings(1000)),
    ("active set over the pruner's parameters", {**many_models_settings(2100), "caches": {"weights": False}}),
]


def _changed(environment: str, changes: dict) -> dict:
    return apply_fix(settings_of(environment), Fix(tuple(Edit(path, value) for path, value in changes.items())))


@pytest.mark.parametrize("case, environment, changes, catalog", CASES, ids=[c[0] for c in CASES])
def test_each_refusals_fix_works_when_applied(case, environment, changes, catalog):
    document = _changed(environment, changes)
    problems = refusals(document, catalog)
    assert problems, f"{case}: accepted"
    assert_fixes_work(document, problems, catalog)


@pytest.mark.slow
@pytest.mark.parametrize("case, document", SCALE_CASES, ids=[c[0] for c in SCALE_CASES])
def test_the_fixes_of_the_limits_that_grow_with_the_models_work(case, document):
    problems = refusals(document)
    assert problems, f"{case}: accepted"
    assert_fixes_work(document, problems)


SOURCES = [*(ROOT / "warmstart" / "checks").glob("*_rules.py"), *(ROOT / "warmstart" / "node_os").glob("*.py")]
SOURCES += [*(ROOT / "warmstart" / "config").glob("*.py"), *(ROOT / "warmstart").glob("config_*.py")]
SOURCES += [ROOT / "warmstart" / "loader.py"]
# Where the loader words what is wrong with the file itself (not UTF-8, not YAML, a key twice, empty): a fix
# there is an edit of the text, which FILE_CASES in test_config_messages.py check.
FILE_LEVEL = {"read_yaml", "read_yaml_literals", "_loader", "duplicate", "refuse", "parse_config"}


def _written_refusals() -> set[str]:
    """file:line of each Problem, Problem and Refused written in the rules, node OSes, model and loader."""
    sites = set()
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or function.name in FILE_LEVEL:
                continue
            for node in ast.walk(function):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
                    continue
                # A call that passes its site on (a node OS's Problem raised to the cluster's release) is not where a
                # refusal is written.
                passes_site = any(keyword.arg == "site" for keyword in node.keywords)
                if node.func.id in ("Problem", "Refused") and not passes_site:
                    sites.add(f"{path}:{node.lineno}")
    return sites


@pytest.mark.slow
def test_every_refusal_written_in_the_source_has_a_case_here():
    met = set()
    for _, environment, changes, catalog in CASES:
        met |= {p.site for p in refusals(_changed(environment, changes), catalog)}
    for _, document in SCALE_CASES:
        met |= {p.site for p in refusals(copy.deepcopy(document))}
    written = _written_refusals()
    assert len(written) > 100
    missing = sorted(written - met, key=lambda site: (site.rsplit(":", 1)[0], int(site.rsplit(":", 1)[1])))
    assert not missing, "refusals without a case (add one to CASES): " + ", ".join(
        f"{Path(s).relative_to(ROOT)}" for s in missing
    )


def test_applying_a_fix_never_overwrites_what_the_user_wrote_on_the_way_and_asks_are_answered_by_path():
    from warmstart.checks.fix import Ask, FixError

    document = {"image_preload": "prepull", "models": {"a": 1}}
    with pytest.raises(FixError):
        apply_fix(document, Fix((Edit("image_preload.mode", "snapshot"),)))
    with pytest.raises(FixError):
        apply_fix(document, Fix((Edit("models[0].name", "x"),)))
    asked = Fix((Edit("network.existing", {"vpc_id": Ask("the VPC's ID", "vpc-0123456789abcdef0")}),))
    with pytest.raises(FixError, match="the VPC's ID is needed"):
        apply_fix({}, asked)
    answered = apply_fix({}, asked, {"network.existing.vpc_id": "vpc-0a1b2c3d4e5f60718"})
    assert answered == {"network": {"existing": {"vpc_id": "vpc-0a1b2c3d4e5f60718"}}}
    assert apply_fix({}, asked, use_examples=True)["network"]["existing"]["vpc_id"] == "vpc-0123456789abcdef0"
