"""`warmstart status` on recorded API responses."""

import json
import sys

import pytest

from contracts.start_record import StartTimeline
from tests.synth import ROOT
from warmstart.catalog import default_catalog
from warmstart.loader import load_config
from warmstart_cli.__main__ import main
from warmstart_cli.status import CacheCount, CompileUse, Replicas, autoscaler_status, model_status

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
        "replicas": Replicas(autoscaled=False, fixed=2),
    }
    assert statuses["llama-3-3-70b"]["replicas"] == Replicas(autoscaled=True)  # no autoscaler listed yet
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
        "replicas": Replicas(autoscaled=True),  # no autoscaler listed: not deployed yet
    }


def test_status_command_reads_the_cluster_through_kubectl(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    kubectl = f"{sys.executable} {FIXTURES / 'fake_kubectl.py'}"
    assert main(["status", "--env", "prod", "--kubectl", kubectl]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["MODEL", "WEIGHTS", "COMPILE", "CACHE", "LAST", "POD", "PER", "NODE", "IMAGE", "REPLICAS"]
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
        "2",
        "fixed",
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
        "3/4",  # the autoscaler: 3 pods, 4 wanted
        "(num_requests_waiting",
        "6.5/5",
        "per",
        "pod)",
    ]


# What kubectl v1.35 (with the AWS CLI v2's `aws eks get-token` exec plugin that update-kubeconfig writes) prints
# for each way it cannot read a cluster, and what status makes of it.
KUBECTL_FAILURES = {
    "no kubeconfig": (
        "The connection to the server localhost:8080 was refused - did you specify the right host or port?",
        "kubectl has no cluster to talk to",
    ),
    "unknown context": (
        "Error in configuration: context was not found for specified context: prod",
        "kubectl has no cluster to talk to",
    ),
    "no AWS CLI": (
        "Unable to connect to the server: getting credentials: exec: executable aws not found\n\nIt looks like you "
        "are trying to use a client-go credential plugin that is not installed.",
        "which is not installed here",
    ),
    "expired SSO": (
        "Error when retrieving token from sso: Token has expired and refresh failed\nUnable to connect to the "
        "server: getting credentials: exec: executable aws failed with exit code 255",
        "AWS credentials are missing or expired",
    ),
    "may not assume the role": (
        "An error occurred (AccessDenied) when calling the AssumeRole operation: User: arn:aws:sts::210987654321:"
        "assumed-role/dev/me is not authorized to perform: sts:AssumeRole on resource: arn:aws:iam::210987654321:"
        "role/platform-admins\nUnable to connect to the server: getting credentials: exec: executable aws failed "
        "with exit code 254",
        "may not assume the role",
    ),
    "refused credentials": (
        "error: You must be logged in to the server (Unauthorized)",
        "they have expired, or this IAM principal has no access entry",
    ),
    "forbidden": (
        'Error from server (Forbidden): nodes is forbidden: User "arn:aws:sts::210987654321:assumed-role/dev/me" '
        'cannot list resource "nodes" in API group "" at the cluster scope',
        "may not read what status needs",
    ),
    "certificate": (
        "Unable to connect to the server: tls: failed to verify certificate: x509: certificate has expired or is "
        "not yet valid",
        "could not verify the API endpoint's TLS certificate",
    ),
    "unreachable": (
        "Unable to connect to the server: dial tcp: lookup 0A1B2C3D.gr7.us-east-1.eks.amazonaws.com: no such host",
        "cannot reach the cluster's API endpoint",
    ),
    "other": (
        "error: unknown request /api/v1/namespaces/warmstart-system/configmaps?labelSelector=a%3Db",
        "kubectl failed: error: unknown request /api/v1/namespaces/warmstart-system/configmaps?labelSelector=a=b",
    ),
}


@pytest.mark.parametrize("case", sorted(KUBECTL_FAILURES))
@pytest.mark.parametrize("starts", [False, True], ids=["status", "starts"])
def test_a_cluster_status_cannot_read_is_explained_with_the_fix(case, starts, capsys, monkeypatch):
    stderr, said = KUBECTL_FAILURES[case]
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("FAKE_KUBECTL_STDERR", stderr)
    kubectl = f"{sys.executable} {FIXTURES / 'failing_kubectl.py'}"
    assert main(["status", "--env", "prod", "--kubectl", kubectl, *(["--starts"] if starts else [])]) == 3
    err = capsys.readouterr().err
    assert err.startswith("warmstart status: cannot read cluster warmstart-prod: ") and said in err
    # The command that points kubectl at the environment's cluster, with its names.
    assert "aws eks update-kubeconfig --name warmstart-prod --region us-east-1" in err
    assert "%3D" not in err and "Traceback" not in err


def test_in_a_cluster_warmstart_did_not_create_access_is_asked_of_its_owners(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("FAKE_KUBECTL_STDERR", KUBECTL_FAILURES["refused credentials"][0])
    kubectl = f"{sys.executable} {FIXTURES / 'failing_kubectl.py'}"
    assert main(["status", "--env", "existing", "--kubectl", kubectl]) == 3
    err = capsys.readouterr().err
    assert "aws eks update-kubeconfig --name ml-platform --region eu-west-1" in err and "--role-arn" not in err
    assert "aws eks create-access-entry" in err and "admin_role_arns" not in err


def test_without_kubectl_status_says_to_install_it(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["status", "--env", "dev", "--kubectl", "kubectl-that-is-not-installed"]) == 3
    err = capsys.readouterr().err
    assert "kubectl-that-is-not-installed is not installed" in err and "install kubectl 1.35" in err


def test_status_starts_shows_the_last_starts_per_model_with_a_bar(capsys, monkeypatch):
    """The node agents' published starts (recorded ConfigMaps built from tests/fixtures/starts/), newest first."""
    monkeypatch.chdir(ROOT)
    kubectl = f"{sys.executable} {FIXTURES / 'fake_kubectl.py'}"
    assert main(["status", "--env", "prod", "--starts", "--last", "3", "--kubectl", kubectl]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "environment prod: the last 3 pod starts per model, seconds per phase"
    assert out[1] == "model qwen3-6-35b-a3b"
    header = out[2].split()
    assert header[:5] == ["STARTED", "(UTC)", "POD", "NODE", "OUTCOME"]
    assert header[5:] == [
        "NODE",
        "SCHEDULING",
        "IMAGE",
        "RESTORE",
        "WEIGHTS",
        "COMPILE",
        "ENGINE",
        "OTHER",
        "TOTAL",
        "SOURCES",
    ]
    rows = [line.split() for line in out[3:6]]
    assert [row[2] for row in rows] == ["vllm-7d9f-sparse", "vllm-7d9f-warm", "vllm-7d9f-cold"]  # newest first, 3
    assert rows[2][3:15] == ["new", "ready", "410", "2", "303", "2", "44", "65", "30", "45", "900", "image"]
    assert rows[0][7] == "-"  # no image event kept: unknown, not zero
    bars = out[6:9]
    assert bars[2].startswith("  vllm-7d9f-cold") and "|" in bars[2]
    cold_bar = bars[2].split("|", 1)[1]
    # One character per 22.5 s (the longest start, 900 s, over 40): the node wait is the longest run.
    assert cold_bar.count("N") == 18 and cold_bar.count("I") == 13 and cold_bar.startswith("N" * 18)
    assert out[-1].startswith("bars: one character per 22 s; N node, S scheduling, I image")
    assert "llama-3-3-70b" not in "\n".join(out)  # no start of it recorded: no section


def test_status_starts_skips_records_it_cannot_read():
    from warmstart_cli.status import read_starts

    starts = read_starts(_recorded("prod-starts.json"))
    assert sorted(t.pod for t in starts) == [
        "vllm-7d9f-cold",
        "vllm-7d9f-restored",
        "vllm-7d9f-sparse",
        "vllm-7d9f-stuck",
        "vllm-7d9f-warm",
    ]  # the version-2 record in the first ConfigMap is left out
    assert read_starts({"items": [{"data": {"starts.json": "not json"}}]}) == []


def test_status_starts_on_a_cluster_without_starts(capsys):
    from warmstart_cli.status import render_starts

    config = load_config(ROOT / "config" / "prod.yaml")
    assert "no pod start recorded yet" in render_starts(config, [])


def _readme_block(marker: str) -> str:
    text = (ROOT / "docs" / "deploy.md").read_text()
    block = text.split(f"<!-- {marker} -->\n```\n", 1)[1].split("```\n<!-- /", 1)[0]
    return block


def test_the_deploy_guides_status_samples_are_what_the_commands_print(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    kubectl = f"{sys.executable} {FIXTURES / 'fake_kubectl.py'}"
    printed = []
    for args in (["status", "--env", "prod"], ["status", "--env", "prod", "--starts", "--last", "3"]):
        assert main([*args, "--kubectl", kubectl]) == 0
        printed.append(f"$ python -m warmstart_cli {' '.join(args)}\n{capsys.readouterr().out}")
    assert _readme_block("status-sample") == "".join(printed)
    monkeypatch.setenv("FAKE_KUBECTL_STDERR", "error: You must be logged in to the server (Unauthorized)")
    assert main(["status", "--env", "prod", "--kubectl", f"{sys.executable} {FIXTURES / 'failing_kubectl.py'}"]) == 3
    assert _readme_block("status-error-sample") == capsys.readouterr().err


def test_status_starts_says_when_vllm_could_not_load_its_compiled_graph():
    """A start whose compiled artifact failed to load compiled again: shown as a compile miss with vLLM's reason."""
    from warmstart_cli.status import read_starts, render_starts

    config = load_config(ROOT / "config" / "prod.yaml")
    (cold, *_) = sorted(read_starts(_recorded("prod-starts.json")), key=lambda t: t.pod)
    failed = StartTimeline.from_dict(
        {**cold.to_dict(), "compile_cache": "miss", "compile_load_failure": "'function' object has no attribute 'x'"}
    )
    assert failed is not None
    shown = render_starts(config, [failed])
    assert "compile miss, load failure: 'function' object has no attribute 'x'" in shown
    assert StartTimeline.from_dict({**cold.to_dict(), "compile_load_failure": "x" * 254}) is None  # bounded


@pytest.mark.parametrize("recorded", ["prod-hpas-keda.json", "prod-hpas-adapter.json"])
def test_the_autoscalers_metric_reads_the_same_from_kedas_hpa_and_the_one_before_it(recorded):
    """KEDA's HPA reads an External metric; one deployed before KEDA took it over, the Pods metric of
    prometheus-adapter: `status` shows the value per pod against the target from either."""
    config = load_config(ROOT / "config" / "prod.yaml")
    llama = next(m for m in config.models if m.name == "llama-3-3-70b")
    hpas = json.loads((FIXTURES / "status" / recorded).read_text())
    assert str(autoscaler_status(llama, hpas)) == "3/4 (num_requests_waiting 6.5/5 per pod)"
