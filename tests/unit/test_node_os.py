"""The node OS objects (warmstart/node_os/) and the preload-mode objects (warmstart/preload_modes/): each answers
every question the code asks of it, and a new one registers by existing as a module."""

from __future__ import annotations

import sys

import pytest

from tests.unit.test_config import raw
from warmstart.config import AutoModeCompute, GpuPool, ImagePreload, KarpenterCompute
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
    assert "pre-pull DaemonSet pulls it" in PRELOAD_MODES["prepull"].route(prod)


def test_a_new_module_registers_by_existing(tmp_path, monkeypatch):
    """What adding a third OS or a fourth preload mode takes: one module in the package."""
    package = tmp_path / "kinds"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "base.py").write_text("class Kind:\n    name = ''\n")
    (package / "first.py").write_text("from kinds.base import Kind\n\nclass First(Kind):\n    name = 'first'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from kinds.base import Kind  # type: ignore[import-not-found]

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
