import pytest

from warmstart.config.compute import AutoModeCompute, GpuPool, KarpenterCompute
from warmstart.sizing import (
    SizingError,
    ephemeral_storage_below_nvme,
    nvme_mount,
    smallest_tensor_parallel_size,
    valid_tensor_parallel_sizes,
    weights_fit,
)


@pytest.mark.parametrize(
    "size_gb, instance_type, expected",
    [
        (10, "g6e.xlarge", 1),  # the seed's 10 GB model: one GPU
        (67, "p5.48xlarge", 2),  # the brief: 67 GB on p5.48xlarge needs at least 2 -> TP=2
        (140, "p5.48xlarge", 4),  # 140 GB: 2 x 80 x 0.8 = 128 < 140 -> 4
        (140, "p5e.48xlarge", 2),  # H200 141 GB
        (67, "p4d.24xlarge", 4),  # A100 40 GB
        (10, "g6e.12xlarge", 1),
        (60, "g6e.12xlarge", 2),
    ],
)
def test_smallest_tensor_parallel_size(catalog, size_gb, instance_type, expected):
    assert smallest_tensor_parallel_size(size_gb, [catalog.instance(instance_type)], 0.8) == expected


def test_tensor_parallel_size_must_suit_every_candidate_instance(catalog):
    # 4 GPUs fit on both; a size valid on only one type is never chosen.
    instances = [catalog.instance("g6e.12xlarge"), catalog.instance("g6e.48xlarge")]
    assert smallest_tensor_parallel_size(100, instances, 0.8) == 4


def test_weights_that_fit_nowhere_raise_with_the_numbers(catalog):
    with pytest.raises(SizingError, match=r"600 GB .*p5.48xlarge: 8 x 80 GB x 0.8 = 512 GB"):
        smallest_tensor_parallel_size(600, [catalog.instance("p5.48xlarge")], 0.8)


def test_valid_tensor_parallel_sizes_divide_the_gpu_count(catalog):
    assert valid_tensor_parallel_sizes(catalog.instance("p5.48xlarge")) == [1, 2, 4, 8]
    assert valid_tensor_parallel_sizes(catalog.instance("g6e.12xlarge")) == [1, 2, 4]
    assert valid_tensor_parallel_sizes(catalog.instance("g5.xlarge")) == [1]


def test_weights_fit_is_inclusive_at_the_limit(catalog):
    h100 = catalog.instance("p5.48xlarge")
    assert weights_fit(64, 1, h100, 0.8)
    assert not weights_fit(64.1, 1, h100, 0.8)


def test_nvme_mount_per_node_os():
    """Auto Mode and Bottlerocket: apiclient ephemeral-storage mounts /mnt/.ephemeral; AL2023: nodeadm's
    setup-local-disks mounts /mnt/k8s-disks/0 (sources in warmstart/node_os/)."""
    pool = GpuPool(instance_types=["p5.48xlarge"])
    assert nvme_mount(_auto(80)) == "/mnt/.ephemeral"
    assert (
        nvme_mount(KarpenterCompute(mode="karpenter", gpu_pool=pool, ami_alias="al2023@v20260930"))
        == "/mnt/k8s-disks/0"
    )
    assert (
        nvme_mount(KarpenterCompute(mode="karpenter", gpu_pool=pool, ami_alias="bottlerocket@v1.57.0"))
        == "/mnt/.ephemeral"
    )


def _auto(gib: int) -> AutoModeCompute:
    return AutoModeCompute(mode="auto", gpu_pool=GpuPool(instance_types=["g5.xlarge"]), ephemeral_storage_gib=gib)


def test_ephemeral_storage_must_be_strictly_below_nvme(catalog):
    g5 = catalog.instance("g5.xlarge")  # 250 GB = 232.8 GiB
    assert ephemeral_storage_below_nvme(_auto(232), g5)
    assert not ephemeral_storage_below_nvme(_auto(233), g5)
    assert not ephemeral_storage_below_nvme(_auto(250), g5)
