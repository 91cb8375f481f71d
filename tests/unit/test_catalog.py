import pytest

from warmstart.catalog import Catalog, default_catalog

FAMILIES = ("g5", "g6", "g6e", "p4d", "p4de", "p5", "p5e", "p5en")


def test_every_required_family_is_covered(catalog):
    families = {name.split(".")[0] for name in catalog.instances}
    assert set(FAMILIES) <= families


@pytest.mark.parametrize(
    "instance_type, gpu, arch, count, memory_gb, nvme_gb",
    [
        ("g5.xlarge", "A10G", "sm_86", 1, 24, 250),
        ("g5.12xlarge", "A10G", "sm_86", 4, 24, 3800),
        ("g5.48xlarge", "A10G", "sm_86", 8, 24, 7600),
        ("g6.xlarge", "L4", "sm_89", 1, 24, 250),
        ("g6e.xlarge", "L40S", "sm_89", 1, 48, 250),
        ("p4d.24xlarge", "A100-40GB", "sm_80", 8, 40, 8000),
        ("p4de.24xlarge", "A100-80GB", "sm_80", 8, 80, 8000),
        ("p5.48xlarge", "H100", "sm_90", 8, 80, 30720),
        ("p5e.48xlarge", "H200", "sm_90", 8, 141, 30720),
        ("p5en.48xlarge", "H200", "sm_90", 8, 141, 30720),
    ],
)
def test_facts_match_the_published_specifications(catalog, instance_type, gpu, arch, count, memory_gb, nvme_gb):
    instance = catalog.instance(instance_type)
    assert (instance.gpu_name, instance.architecture, instance.gpu_count) == (gpu, arch, count)
    assert (instance.gpu_memory_gb, instance.nvme_gb) == (memory_gb, nvme_gb)


def test_hyperpod_nvme_figures_agree_within_rounding(catalog):
    # The brief's HyperPod table: ml.p5.48xlarge 30,000 GB (8 x 3,840 GB = 30,720 GB, rounded).
    assert 30_000 <= catalog.instance("p5.48xlarge").nvme_gb < 31_000
    assert catalog.instance("p4d.24xlarge").nvme_gb == 8000


def test_unknown_instance_type_names_the_known_ones(catalog):
    with pytest.raises(KeyError, match="p5.48xlarge"):
        catalog.instance("p9.mega")


def test_catalog_rejects_an_instance_of_an_unknown_gpu():
    with pytest.raises(ValueError, match="B200"):
        Catalog.model_validate(
            {
                "gpus": {"H100": {"architecture": "sm_90", "memory_gb": 80}},
                "instances": {
                    "p6.48xlarge": {"gpu": "B200", "gpu_count": 8, "nvme_gb": 30720, "vcpus": 192, "memory_gib": 2048}
                },
            }
        )


def test_default_catalog_is_loaded_once():
    assert default_catalog() is default_catalog()
