"""`warmstart status` on recorded API responses."""

import json
import sys

from tests.synth import ROOT
from warmstart.__main__ import main
from warmstart.catalog import default_catalog
from warmstart.loader import load_config
from warmstart.status import CacheCount, CompileUse, model_status

FIXTURES = ROOT / "tests" / "fixtures"


def _recorded(name: str) -> dict:
    return json.loads((FIXTURES / "status" / name).read_text())


def test_counts_target_and_ready_gpu_nodes_per_cache():
    config = load_config(ROOT / "config" / "prod.yaml")
    statuses = model_status(config, default_catalog(), _recorded("prod-nodes.json"), _recorded("prod-daemonsets.json"))
    assert statuses["qwen3-6-35b-a3b"] == {
        "weights": CacheCount("warming", 3, 2, refused=1),  # one node has no instance store
        "compile": CacheCount("warming", 3, 2),  # published + restored; "failed" is not ready
        "use": CompileUse(hits=2, misses=0),
        "image": CacheCount("warming", 3, 2),
    }
    assert statuses["llama-3-3-70b"]["weights"] == CacheCount("warming", 3, 1)
    assert statuses["llama-3-3-70b"]["compile"] == CacheCount("warming", 3, 1)  # "miss" is not ready
    assert statuses["llama-3-3-70b"]["use"] == CompileUse(hits=1, misses=1)


def test_switched_off_caches_and_empty_clusters():
    config = load_config(ROOT / "config" / "dev.yaml")  # weights cache off in dev
    statuses = model_status(config, default_catalog(), {"items": []}, {"items": []})
    assert statuses["qwen3-4b"] == {
        "weights": CacheCount("off"),
        "compile": CacheCount("no-nodes"),
        "use": CompileUse(),
        "image": CacheCount("no-nodes"),
    }


def test_status_command_reads_the_cluster_through_kubectl(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    kubectl = f"{sys.executable} {FIXTURES / 'fake_kubectl.py'}"
    assert main(["status", "--env", "prod", "--kubectl", kubectl]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["MODEL", "WEIGHTS", "COMPILE", "CACHE", "LAST", "POD", "PER", "NODE", "IMAGE"]
    assert out[2].split() == [
        "qwen3-6-35b-a3b",
        "warming",
        "2/3",
        "(1",
        "no-nvme)",
        "warming",
        "2/3",
        "2",
        "hit,",
        "0",
        "miss",
        "warming",
        "2/3",
    ]
    assert out[3].split() == [
        "llama-3-3-70b",
        "warming",
        "1/3",
        "warming",
        "1/3",
        "1",
        "hit,",
        "1",
        "miss",
        "warming",
        "2/3",
    ]


def test_status_command_reports_an_unreachable_cluster(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["status", "--env", "prod", "--kubectl", "false"]) == 3
    assert "cannot read the cluster" in capsys.readouterr().err
