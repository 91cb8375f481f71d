"""The node OS objects (warmstart/node_os/) and the preload-mode objects (warmstart/preload_modes/): each answers
every question the code asks of it, and a new one registers by existing as a module."""

from __future__ import annotations

import sys

import pytest

from tests.builders import raw
from warmstart.config.caches import ImagePreload
from warmstart.config.compute import AutoModeCompute, GpuPool, KarpenterCompute
from warmstart.discovery import subclasses_in
from warmstart.loader import parse_config
from warmstart.node_os import AMI_ALIAS_PATTERN, AUTO_MODE_OS, KARPENTER_NODE_OSES, karpenter_node_os
from warmstart.preload_modes import PRELOAD_MODES

POOL = GpuPool(instance_types=["p5.48xlarge"])


def test_each_os_answers_where_the_array_is_and_what_it_allows():
    al2023, bottlerocket = karpenter_node_os("al2023@v20260930"), karpenter_node_os("bottlerocket@v1.57.0")
    assert (al2023.nvme_mount, bottlerocket.nvme_mount, AUTO_MODE_OS.nvme_mount) == (
        "/mnt/k8s-disks/0",
        "/mnt/.ephemeral",
        "/mnt/.ephemeral",
    )
    prepull, snapshot = ImagePreload(mode="prepull"), ImagePreload(mode="snapshot")
    assert al2023.parallel_pull_refusal(prepull) is None
    assert karpenter_node_os("al2023@v20251001").parallel_pull_refusal(prepull) is not None  # before SOCI on NVMe
    # Bottlerocket from v1.46.0, whose RAID0 setup binds SOCI's store onto the array; Auto Mode does it itself.
    assert bottlerocket.parallel_pull_refusal(prepull) is None and AUTO_MODE_OS.parallel_pull_refusal(prepull) is None
    assert AUTO_MODE_OS.pulls_in_parallel(prepull, "g6e.xlarge") and AUTO_MODE_OS.pulls_in_parallel(
        prepull, "p5.48xlarge"
    )
    assert not AUTO_MODE_OS.pulls_in_parallel(prepull, "m7i.xlarge")
    assert not al2023.pulls_in_parallel(prepull, "p5.48xlarge")
    assert bottlerocket.parallel_pull_refusal(snapshot) is None  # the snapshot's own rule speaks there
    assert bottlerocket.snapshot_obstacle() is None
    assert al2023.snapshot_obstacle() is not None and AUTO_MODE_OS.snapshot_obstacle() is not None
    assert karpenter_node_os("bottlerocket@v1.21.0").image_refusal("1.35", prepull) is not None
    assert bottlerocket.image_refusal("1.35", prepull) is None and al2023.image_refusal("1.35", prepull) is None
    assert al2023.parallel_pull_min_node == (4, 7) and bottlerocket.parallel_pull_min_node is None


def test_each_compute_modes_settings_know_their_os():
    assert AutoModeCompute(mode="auto", gpu_pool=POOL).node_os is AUTO_MODE_OS
    pinned = KarpenterCompute(mode="karpenter", gpu_pool=POOL, ami_alias="bottlerocket@v1.57.0").node_os
    assert pinned.name == "bottlerocket" and pinned.alias == "bottlerocket@v1.57.0"


def test_the_ami_alias_pattern_and_the_storage_come_from_the_oses():
    assert set(KARPENTER_NODE_OSES) == {"al2023", "bottlerocket"}
    assert AMI_ALIAS_PATTERN == r"^(al2023|bottlerocket)@v?\d+(\.\d+)*$"
    karpenter = KarpenterCompute(mode="karpenter", gpu_pool=POOL)
    storage = karpenter.node_os.karpenter_storage(karpenter, ImagePreload(mode="prepull", parallel_pull=True), None)
    assert storage["instanceStorePolicy"] == "RAID0" and "FastImagePull" in storage["userData"]
    with pytest.raises(TypeError, match="no EC2NodeClass"):
        AUTO_MODE_OS.karpenter_storage(karpenter, ImagePreload(), None)


def test_each_preload_mode_says_what_it_runs_and_how_an_image_arrives():
    assert {name: (m.prepulls, m.boots_with_images) for name, m in PRELOAD_MODES.items()} == {
        "off": (False, False),
        "prepull": (True, False),
        "snapshot": (True, True),
    }
    prod = parse_config(raw("prod"))
    assert "pulled by each pod" in PRELOAD_MODES["off"].route(prod)
    assert "prepull DaemonSet pulls it" in PRELOAD_MODES["prepull"].route(prod)


def test_a_new_module_registers_by_existing(tmp_path, monkeypatch):
    """What adding a third OS or a fourth preload mode takes: one module in the package."""
    package = tmp_path / "kinds"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text("class Kind:\n    name = ''\n")
    (package / "first.py").write_text("from kinds.base import Kind\n\nclass First(Kind):\n    name = 'first'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from kinds.base import Kind

    assert [k.name for k in subclasses_in("kinds", [str(package)], Kind)] == ["first"]
    (package / "second.py").write_text("from kinds.base import Kind\n\nclass Second(Kind):\n    name = 'second'\n")
    assert [k.name for k in subclasses_in("kinds", [str(package)], Kind)] == ["first", "second"]
    (package / "again.py").write_text("from kinds.base import Kind\n\nclass Again(Kind):\n    name = 'first'\n")
    with pytest.raises(TypeError, match="two Kind classes are named first"):
        subclasses_in("kinds", [str(package)], Kind)
    for module in [m for m in sys.modules if m == "kinds" or m.startswith("kinds.")]:
        monkeypatch.delitem(sys.modules, module)


def test_only_bottlerocket_names_a_snapshot_builder():
    bottlerocket = karpenter_node_os("bottlerocket@v1.57.0")
    assert bottlerocket.snapshot_builder_ami_parameter("1.35") == (
        "/aws/service/bottlerocket/aws-k8s-1.35/x86_64/1.57.0/image_id"
    )
    with pytest.raises(TypeError, match="do not boot from an image snapshot"):
        karpenter_node_os("al2023@v20260930").snapshot_builder_ami_parameter("1.35")


# Karpenter resolves an AMI alias through public SSM parameters (aws/karpenter-provider-aws v1.14.1,
# pkg/providers/amifamily/al2023.go and bottlerocket.go): the AL2023 version as written, the Bottlerocket one with
# its leading v trimmed; a GPU instance type takes the nvidia variant (amifamily/types.go).
@pytest.mark.parametrize(
    "alias, parameter",
    [
        (
            "al2023@v20260714",
            "/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/"
            "amazon-eks-node-al2023-x86_64-nvidia-1.35-v20260714/image_id",
        ),
        ("bottlerocket@v1.61.0", "/aws/service/bottlerocket/aws-k8s-1.35-nvidia/x86_64/1.61.0/image_id"),
        ("bottlerocket@1.61.0", "/aws/service/bottlerocket/aws-k8s-1.35-nvidia/x86_64/1.61.0/image_id"),
    ],
)
def test_each_os_names_the_ssm_parameter_karpenter_reads_for_its_gpu_ami(alias, parameter):
    assert karpenter_node_os(alias).gpu_ami_parameter("1.35", "x86_64") == parameter


def _prod(alias: str, kubernetes: str = "1.35") -> dict:
    document = raw("prod")
    document["compute"]["ami_alias"] = alias
    document["cluster"]["kubernetes_version"] = kubernetes
    return document


def test_an_al2023_alias_without_its_v_is_refused_with_the_form_karpenter_resolves():
    """EKS names AL2023 releases v<YYYYMMDD> and Karpenter looks the AMI up by the version as written: al2023@20260714
    finds no AMI, no GPU node ever launches (Karpenter trims the v for Bottlerocket only)."""
    from tests.builders import only_problem

    problem = only_problem(_prod("al2023@20260714"))
    assert problem.field == "compute.ami_alias" and "-1.35-20260714/image_id" in problem.message
    assert [str(f) for f in problem.fixes] == ['compute.ami_alias: "al2023@v20260714"']


@pytest.mark.parametrize(
    "alias, kubernetes, said",
    [
        # The first AL2023 GPU AMI of 1.35 is v20260114 (amazon-eks-ami CHANGELOG.md; al2023_releases.json).
        ("al2023@v20240807", "1.35", "has no GPU AMI for Kubernetes 1.35 (the first release with one is v20260114)"),
        ("al2023@v20260505", "1.36", "has no GPU AMI for Kubernetes 1.36 (the first release with one is v20260610)"),
        # Inside the recorded tags, a date that is no tag is no release.
        ("al2023@v20260601", "1.35", "there is no AL2023 release v20260601"),
    ],
)
def test_an_al2023_release_known_not_to_have_the_clusters_kubernetes_is_refused(alias, kubernetes, said):
    from tests.builders import problems

    (problem,) = [p for p in problems(_prod(alias, kubernetes)) if p.field == "compute.ami_alias"]
    assert said in problem.message, problem


@pytest.mark.parametrize(
    "alias, kubernetes, note",
    [
        ("al2023@v20260714", "1.36", None),  # its changelog lists the 1.36 GPU AMIs
        # The newest tag, its changelog section not written yet: taken as its neighbour has it, and said so.
        ("al2023@v20260724", "1.36", "(no changelog section; taken as shipping it, as its neighbours do"),
        ("al2023@v20260930", "1.35", "newer than the AL2023 releases warmstart knows (through v20260724"),
        ("al2023@v20260520", "1.36", "v20260520 has a GPU AMI for Kubernetes 1.36 is not recorded (no changelog"),
        ("bottlerocket@v1.61.0", "1.36", None),  # bottlerocket PR #4827: the 1.36 variants
        ("bottlerocket@v1.69.0", "1.36", "newer than the Bottlerocket releases warmstart knows"),
    ],
)
def test_a_release_the_tables_cannot_vouch_for_is_accepted_with_a_note(alias, kubernetes, note):
    from warmstart.notes import config_notes

    notes = [n for n in config_notes(parse_config(_prod(alias, kubernetes))) if n.startswith("compute.ami_alias")]
    if note is None:
        assert notes == []
    else:
        (said,) = notes
        assert note in said and "make deploy's preflight checks" in said


def test_the_al2023_table_is_recorded_from_the_eks_ami_repository():
    from warmstart.node_os.al2023 import DEFAULT_AMI_ALIAS, release_table, ships

    table = release_table()
    assert table["source"].startswith("awslabs/amazon-eks-ami at ") and table["recorded"]
    assert all(ships(DEFAULT_AMI_ALIAS.split("@")[1], minor) for minor in ("1.34", "1.35", "1.36"))
    assert ships("v20250915", "1.34") and not ships("v20250904", "1.34")  # 1.34's first GPU AMI
