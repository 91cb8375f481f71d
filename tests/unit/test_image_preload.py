"""image_preload: what each compute mode and node OS allows, the refusals, and the snapshot's pure values."""

import copy

import pytest

from tests.builders import only_problem, raw
from tests.fixes import refused
from warmstart.catalog import Catalog, InstanceSpec
from warmstart.image_preload import (
    builder_commands,
    data_volume_need_gb,
    fully_qualified,
    image_route,
    image_set_key,
    snapshot_images,
    volume_initialization_seconds,
)
from warmstart.loader import parse_config
from warmstart.node_os.bottlerocket import builder_ami_parameter
from warmstart.workload import nvme_need_gb


def bottlerocket_snapshot(**preload) -> dict:
    """prod on Bottlerocket with the snapshot path (no shipped environment uses it yet)."""
    document = copy.deepcopy(raw("prod"))
    document["compute"]["ami_alias"] = "bottlerocket@v1.57.0"
    document["image_preload"] = {"mode": "snapshot", **preload}
    return document


def test_a_bottlerocket_karpenter_environment_may_use_the_snapshot():
    config = parse_config(bottlerocket_snapshot())
    assert config.image_preload.mode == "snapshot"
    assert snapshot_images(config) == ["registry.k8s.io/pause:3.10", "vllm/vllm-openai:v0.34.0"]


@pytest.mark.parametrize(
    "reference, stored",
    [
        # distribution/reference ParseNormalizedNamed, as containerd's CRI plugin applies it to the kubelet's ask
        ("vllm/vllm-openai:v0.21.0", "docker.io/vllm/vllm-openai:v0.21.0"),
        ("ubuntu:24.04", "docker.io/library/ubuntu:24.04"),
        ("registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10"),
        ("public.ecr.aws/x/vllm@sha256:" + "a" * 64, "public.ecr.aws/x/vllm@sha256:" + "a" * 64),
        ("localhost/vllm:1", "localhost/vllm:1"),
        ("registry:5000/vllm:1", "registry:5000/vllm:1"),
    ],
)
def test_references_are_made_fully_qualified_as_containerd_stores_them(reference, stored):
    assert fully_qualified(reference) == stored


def test_builder_commands_pass_the_images_as_arguments_then_the_script():
    commands = builder_commands(["vllm/vllm-openai:v0.21.0", "registry.k8s.io/pause:3.10"], "set -eu\necho done")
    assert commands == ["set -- docker.io/vllm/vllm-openai:v0.21.0 registry.k8s.io/pause:3.10", "set -eu", "echo done"]


def test_the_builder_runs_the_nodes_bottlerocket_release_standard_variant():
    config = parse_config(bottlerocket_snapshot())
    assert (
        builder_ami_parameter(config.compute.ami_alias, config.cluster.kubernetes_version)
        == "/aws/service/bottlerocket/aws-k8s-1.35/x86_64/1.57.0/image_id"
    )


def test_image_set_key_changes_with_what_is_on_the_volume_and_nothing_else():
    base = parse_config(bottlerocket_snapshot())
    key = image_set_key(base)
    changed_image = bottlerocket_snapshot()
    changed_image["models"][0]["image"] = "vllm/vllm-openai:v0.21.0"
    changed_release = bottlerocket_snapshot()
    changed_release["compute"]["ami_alias"] = "bottlerocket@v1.57.1"
    bigger = bottlerocket_snapshot(snapshot={"data_volume_gib": 300})
    for document in (changed_image, changed_release, bigger):
        assert image_set_key(parse_config(document)) != key
    unrelated = bottlerocket_snapshot(rollout_wait_minutes=5)
    unrelated["models"][0]["replicas"] = 3
    assert image_set_key(parse_config(unrelated)) == key


def test_data_volume_keeps_images_below_the_kubelets_image_gc_low_threshold():
    config = parse_config(bottlerocket_snapshot())
    # one serving image of 25 GB + 10 GB reserve, at most 80% of the volume (the pause image is a few hundred KB)
    assert data_volume_need_gb(config) == 43.8


def test_images_count_against_the_nvme_except_on_the_snapshot_data_volume():
    prepull = parse_config(raw("prod"))
    snapshot = parse_config(bottlerocket_snapshot())
    weights = [m for m in prepull.models]
    assert nvme_need_gb(prepull, weights) - nvme_need_gb(snapshot, weights) == 25  # one serving image


def test_images_count_against_the_nvme_also_when_preload_is_off():
    document = raw("dev")
    document["image_preload"] = {"mode": "off"}
    off, on = parse_config(document), parse_config(raw("dev"))
    assert nvme_need_gb(off, []) == nvme_need_gb(on, [])


def test_volume_initialization_time_from_size_and_rate():
    assert volume_initialization_seconds(parse_config(bottlerocket_snapshot())) == round(150 * 1024 / 300)
    assert volume_initialization_seconds(parse_config(raw("prod"))) is None


@pytest.mark.parametrize(
    "document, phrase",
    [
        (raw("dev"), "no way to boot new nodes with it on disk in Auto Mode"),
        (raw("prod"), "with SOCI parallel pull and unpack"),
        (bottlerocket_snapshot(), "on disk when a new node boots"),
    ],
)
def test_plan_says_how_the_image_reaches_a_new_node(document, phrase):
    assert phrase in image_route(parse_config(document))


def test_caches_image_moved_with_its_replacement_named():
    document = raw("dev")
    document["caches"]["image"] = True
    problem = only_problem(document)
    assert problem.field == "caches"
    assert "image_preload.mode" in problem.message and "mode: prepull" in problem.fix


def test_lazy_is_refused_with_the_reason_and_the_alternative():
    document = raw("prod")
    document["image_preload"] = {"mode": "lazy"}
    problem = only_problem(document)
    assert problem.field == "image_preload"
    assert "lazy loading is not available" in problem.message and "parallel_pull" in problem.fix


def test_snapshot_is_refused_in_auto_mode():
    document = raw("dev")
    document["image_preload"] = {"mode": "snapshot"}
    problem = only_problem(document)
    assert problem.field == "image_preload.mode"
    assert "NodeClass" in problem.message and "karpenter" in problem.fix


def test_snapshot_is_refused_on_al2023():
    document = raw("prod")
    document["image_preload"] = {"mode": "snapshot"}
    problem = only_problem(document)
    assert problem.field == "image_preload.mode"
    assert "bottlerocket@" in problem.fix


@pytest.mark.parametrize(
    "alias, kubernetes, said, fix",
    [
        ("bottlerocket@v1.21.1", "1.35", "predates Bottlerocket's first aws-k8s-1.35 variant", "bottlerocket@v1.53.0"),
        ("bottlerocket@v1.50.0", "1.35", "predates Bottlerocket's first aws-k8s-1.35 variant", "bottlerocket@v1.53.0"),
        ("bottlerocket@v1.47.0", "1.34", None, None),  # the first aws-k8s-1.34 release
        ("bottlerocket@v1.57", "1.35", "names no release", "bottlerocket@v1.57.0"),
        # bottlerocket PR #4827: the aws-k8s-1.36 variants came in v1.61.0.
        ("bottlerocket@v1.57.0", "1.36", "predates Bottlerocket's first aws-k8s-1.36 variant", "bottlerocket@v1.61.0"),
        ("bottlerocket@v1.61.0", "1.36", None, None),
        ("bottlerocket@1.61.0", "1.36", None, None),  # Karpenter trims the v for Bottlerocket: both forms resolve
    ],
)
def test_a_bottlerocket_alias_needs_a_release_with_the_clusters_kubernetes(alias, kubernetes, said, fix):
    """Karpenter resolves /aws/service/bottlerocket/aws-k8s-<version>-nvidia/x86_64/<release>/image_id: a release
    before the variant's first has no AMI, and no GPU node would ever launch."""
    document = bottlerocket_snapshot()
    document["compute"]["ami_alias"] = alias
    document["cluster"]["kubernetes_version"] = kubernetes
    if said is None:
        parse_config(document)
        return
    problem = only_problem(document)
    assert problem.field == "compute.ami_alias" and said in problem.message and fix in problem.fix


def test_every_release_with_an_image_has_the_bootstrap_commands_and_binds_socis_store():
    """Why the older floors need no refusal of their own: every first release of a supported Kubernetes is later."""
    from warmstart.node_os.bottlerocket import (
        BOOTSTRAP_COMMANDS_SINCE,
        FIRST_RELEASE_FOR_KUBERNETES,
        SOCI_ON_ARRAY_SINCE,
    )

    assert min(FIRST_RELEASE_FOR_KUBERNETES.values()) >= max(BOOTSTRAP_COMMANDS_SINCE, SOCI_ON_ARRAY_SINCE)


def test_snapshot_refuses_parallel_pull_beside_it():
    problem = only_problem(bottlerocket_snapshot(parallel_pull=True))
    assert problem.field == "image_preload.parallel_pull"


def test_snapshot_refuses_private_ecr_images():
    document = bottlerocket_snapshot()
    document["models"][1]["image"] = "210987654321.dkr.ecr.us-east-1.amazonaws.com/vllm:v0.21.0"
    problem = only_problem(document)
    assert problem.field == "models[1].image" and "prepull" in problem.fix


def test_snapshot_refuses_a_data_volume_the_image_gc_would_empty():
    problem = only_problem(bottlerocket_snapshot(snapshot={"data_volume_gib": 30}))
    assert problem.field == "image_preload.snapshot.data_volume_gib"
    assert "need 43.8 GB" in problem.message and "32.2 GB given" in problem.message
    assert "at least 41" in problem.fix


def test_parallel_pull_is_what_auto_mode_does_and_bottlerocket_needs_the_release_that_binds_its_store():
    document = raw("dev")
    document["image_preload"] = {"mode": "prepull", "parallel_pull": True}
    parse_config(document)  # Auto Mode pulls in parallel on GPU instances by itself
    document = bottlerocket_snapshot()
    document["image_preload"] = {"mode": "prepull", "parallel_pull": True}
    config = parse_config(document)
    storage = config.compute.node_os.karpenter_storage(config.compute, config.image_preload, None)
    assert 'snapshotter = "soci"' in storage["userData"] and storage["instanceStorePolicy"] == "RAID0"
    document["compute"]["ami_alias"] = "bottlerocket@v1.45.0"  # no aws-k8s-1.35 image, and SOCI's store on EBS
    problem = only_problem(document)
    assert problem.field == "compute.ami_alias" and "bottlerocket@v1.53.0" in problem.fix


def test_parallel_pull_needs_an_al2023_release_that_unpacks_onto_the_nvme_array():
    document = raw("prod")
    document["cluster"]["kubernetes_version"] = "1.34"  # v20251209 has no 1.35 AMI (the first is v20260114)
    document["compute"]["ami_alias"] = "al2023@v20251209"  # FastImagePull exists, SOCI's store not on the array
    problem = only_problem(document)
    assert problem.field == "image_preload.parallel_pull" and "v20251217" in problem.fix


def test_parallel_pull_is_refused_where_nodeadm_would_skip_it(catalog):
    small = Catalog(
        gpus=catalog.gpus,
        instances={
            **catalog.instances,
            "g4.small": InstanceSpec(
                gpu="L4", gpu_count=1, nvme_gb=250, vcpus=2, memory_gib=8, network_gbit_per_s=2.5, max_pods=29
            ),
        },
    )
    document = raw("prod")
    document["compute"]["gpu_pool"]["instance_types"] = ["p5.48xlarge", "g4.small"]
    for model in document["models"]:
        model["instance_types"] = ["p5.48xlarge"]
    (problem,) = [p for p in refused(document, small) if p.field == "image_preload.parallel_pull"]
    assert "g4.small" in problem.message and "4 vCPUs" in problem.message


def test_rollout_wait_fits_the_deploys_kubectl_step():
    document = raw("prod")
    document["image_preload"]["rollout_wait_minutes"] = 11
    assert only_problem(document).field == "image_preload.rollout_wait_minutes"
