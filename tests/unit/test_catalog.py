import pytest

from warmstart.catalog import Catalog, default_catalog

FAMILIES = ("g5", "g6", "g6e", "g7e", "gr6", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300")

# The EC2 DescribeInstanceTypes figures as Karpenter's generated reference lists them (aws/karpenter-provider-aws
# website/content/en/docs/reference/instance-types.md, commit 692ccdd0, v1.14.0): GPU name and count,
# instance-local-nvme (GB), instance-cpu, instance-memory (MiB), and instance-network-bandwidth (Mbps, read at
# commit 1d927085, v1.14.1 docs).
EC2_REFERENCE = """
p5.4xlarge h100 1 3800 16 262144 100000
p5.48xlarge h100 8 30400 192 2097152 3200000
p5e.48xlarge h200 8 30400 192 2097152 3200000
p5en.48xlarge h200 8 30400 192 2097152 3200000
p6-b200.48xlarge b200 8 30400 192 2097152 3200000
p6-b300.48xlarge b300 8 30400 192 4194304 6400000
g7e.2xlarge rtx-pro-server-6000 1 1900 8 65536 50000
g7e.4xlarge rtx-pro-server-6000 1 1900 16 131072 50000
g7e.8xlarge rtx-pro-server-6000 1 1900 32 262144 100000
g7e.12xlarge rtx-pro-server-6000 2 3800 48 524288 400000
g7e.24xlarge rtx-pro-server-6000 4 7600 96 1048576 800000
g7e.48xlarge rtx-pro-server-6000 8 15200 192 2097152 1600000
gr6.4xlarge l4 1 600 16 131072 10000
gr6.8xlarge l4 1 900 32 262144 25000
g5.xlarge a10g 1 250 4 16384 2500
g5.2xlarge a10g 1 450 8 32768 5000
g5.4xlarge a10g 1 600 16 65536 10000
g5.8xlarge a10g 1 900 32 131072 25000
g5.12xlarge a10g 4 3800 48 196608 40000
g5.16xlarge a10g 1 1900 64 262144 25000
g5.24xlarge a10g 4 3800 96 393216 50000
g5.48xlarge a10g 8 7600 192 786432 100000
g6.xlarge l4 1 250 4 16384 2500
g6.2xlarge l4 1 450 8 32768 5000
g6.4xlarge l4 1 600 16 65536 10000
g6.8xlarge l4 1 900 32 131072 25000
g6.12xlarge l4 4 3760 48 196608 40000
g6.16xlarge l4 1 1880 64 262144 25000
g6.24xlarge l4 4 3760 96 393216 50000
g6.48xlarge l4 8 7520 192 786432 100000
g6e.xlarge l40s 1 250 4 32768 2500
g6e.2xlarge l40s 1 450 8 65536 5000
g6e.4xlarge l40s 1 600 16 131072 20000
g6e.8xlarge l40s 1 900 32 262144 25000
g6e.12xlarge l40s 4 3800 48 393216 100000
g6e.16xlarge l40s 1 1900 64 524288 35000
g6e.24xlarge l40s 4 3800 96 786432 200000
g6e.48xlarge l40s 8 7600 192 1572864 400000
p4d.24xlarge a100 8 8000 96 1179648 400000
p4de.24xlarge a100 8 8000 96 1179648 400000"""
EC2_GPU_NAMES = {
    "h100": "H100",
    "h200": "H200",
    "b200": "B200",
    "b300": "B300",
    "rtx-pro-server-6000": "RTX-PRO-6000",
    "l4": "L4",
    "a10g": "A10G",
    "l40s": "L40S",
    "a100": ("A100-40GB", "A100-80GB"),
}


def test_every_required_family_is_covered(catalog):
    families = {name.split(".")[0] for name in catalog.instances}
    assert set(FAMILIES) <= families


def test_every_instance_matches_the_ec2_api_figures(catalog):
    rows = [line.split() for line in EC2_REFERENCE.strip().splitlines()]
    assert {row[0] for row in rows} == set(catalog.instances)  # nothing in the catalog without its EC2 figures
    for name, gpu, count, nvme_gb, vcpus, memory_mib, network_mbps in rows:
        instance = catalog.instance(name)
        assert instance.network_gbit_per_s * 1000 == int(network_mbps), name
        names = EC2_GPU_NAMES[gpu]
        assert instance.gpu_name in (names if isinstance(names, tuple) else (names,)), name
        assert (instance.gpu_count, instance.nvme_gb, instance.vcpus, instance.memory_gib) == (
            int(count),
            int(nvme_gb),
            int(vcpus),
            int(memory_mib) // 1024,
        ), name


@pytest.mark.parametrize(
    "gpu, arch, memory_gb",
    [
        ("A10G", "sm_86", 24),
        ("L4", "sm_89", 24),
        ("L40S", "sm_89", 48),
        ("A100-40GB", "sm_80", 40),
        ("A100-80GB", "sm_80", 80),
        ("H100", "sm_90", 80),
        ("H200", "sm_90", 141),
        ("B200", "sm_100", 180),
        ("B300", "sm_103", 288),
        ("RTX-PRO-6000", "sm_120", 96),
    ],
)
def test_gpu_facts_match_nvidias_published_figures(catalog, gpu, arch, memory_gb):
    assert (catalog.gpus[gpu].architecture, catalog.gpus[gpu].memory_gb) == (arch, memory_gb)


@pytest.mark.parametrize(
    "instance_type, capability, device_name",
    [
        ("g6e.xlarge", (8, 9), "NVIDIA L40S"),
        ("p5.48xlarge", (9, 0), "NVIDIA H100 80GB HBM3"),
        ("p5e.48xlarge", (9, 0), "NVIDIA H200"),
        ("p6-b300.48xlarge", (10, 3), "NVIDIA B300 SXM6 AC"),
    ],
)
def test_each_instance_reports_its_gpu_as_the_driver_does(catalog, instance_type, capability, device_name):
    """What vLLM's platform and PyTorch Inductor's cache key read from the driver: the compute capability and the
    device name (H100 and H200 share sm_90 but not a name, so not a compile cache)."""
    instance = catalog.instance(instance_type)
    assert (instance.compute_capability, instance.device_name) == (capability, device_name)


def test_hyperpod_nvme_figures_agree_within_rounding(catalog):
    # The brief's HyperPod table: ml.p5.48xlarge 30,000 GB (EC2: 8 x 3,800 GB = 30,400 GB, rounded).
    assert 30_000 <= catalog.instance("p5.48xlarge").nvme_gb < 31_000
    assert catalog.instance("p4d.24xlarge").nvme_gb == 8000


def test_unknown_instance_type_names_the_known_ones(catalog):
    with pytest.raises(KeyError, match="p5.48xlarge"):
        catalog.instance("p9.mega")


def test_catalog_rejects_an_instance_of_an_unknown_gpu():
    with pytest.raises(ValueError, match="B200"):
        Catalog.model_validate(
            {
                "gpus": {"H100": {"architecture": "sm_90", "memory_gb": 80, "device_name": "NVIDIA H100 80GB HBM3"}},
                "instances": {
                    "p6.48xlarge": {
                        "gpu": "B200",
                        "gpu_count": 8,
                        "nvme_gb": 30720,
                        "vcpus": 192,
                        "memory_gib": 2048,
                        "network_gbit_per_s": 3200,
                        "max_pods": 100,
                    }
                },
            }
        )


def test_default_catalog_is_loaded_once():
    assert default_catalog() is default_catalog()
