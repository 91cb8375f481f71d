"""What a Kubernetes security review checks on every pod warmstart deploys (the vLLM Deployments, the agent and
the image caches), and the NetworkPolicy of each model. A departure from a default must be stated where
scanners read it (KubeLinter `ignore-check.kube-linter.io/<check>`, Checkov `checkov.io/skip<n>`)."""

from __future__ import annotations

import pytest
import yaml

from tests.manifests import of_kind

CALLS_THE_KUBERNETES_API = {"warmstart-agent"}  # the only pods that get a service-account token


def _workloads(synthesized) -> list[dict]:
    manifests = synthesized.manifests()
    ours = [m for m in manifests if m["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "warmstart"]
    return of_kind(ours, "Deployment") + of_kind(ours, "DaemonSet")


def _departures(workload: dict) -> set[str]:
    """The KubeLinter checks and Checkov ids the workload states it departs from, each with a reason."""
    annotations = workload["metadata"].get("annotations", {})
    linter = {
        k.removeprefix("ignore-check.kube-linter.io/"): v
        for k, v in annotations.items()
        if k.startswith("ignore-check.kube-linter.io/")
    }
    checkov = dict(v.split("=", 1) for k, v in annotations.items() if k.startswith("checkov.io/skip"))
    assert all(len(reason) > 20 for reason in [*linter.values(), *checkov.values()])
    # Stated for both scanners where both have the check (Checkov 3 and KubeLinter 0.8 check ids).
    for check, ids in (
        ("run-as-non-root", {"CKV_K8S_23", "CKV_K8S_40"}),
        ("no-read-only-root-fs", {"CKV_K8S_22"}),
        ("no-liveness-probe", {"CKV_K8S_8"}),
        ("no-readiness-probe", {"CKV_K8S_9"}),
        ("unset-cpu-requirements", {"CKV_K8S_11"}),
    ):
        assert (check in linter) == (ids <= set(checkov)), (workload["metadata"]["name"], check)
    return set(linter) | set(checkov)


def test_every_workload_is_covered(shipped):
    names = {w["metadata"]["name"] for w in _workloads(shipped)}
    assert "warmstart-agent" in names and "vllm" in names
    assert any(n.startswith("image-cache-") for n in names)


def test_no_escalation_no_capabilities_runtime_default_seccomp(shipped):
    for workload in _workloads(shipped):
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, container["name"]
            assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
            assert "privileged" not in context


def test_memory_limit_equals_the_request(shipped):
    for workload in _workloads(shipped):
        pod = workload["spec"]["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            resources = container["resources"]
            assert resources["limits"]["memory"] == resources["requests"]["memory"], container["name"]


def test_root_and_a_writable_root_filesystem_only_where_stated(shipped):
    for workload in _workloads(shipped):
        departures = _departures(workload)
        pod = workload["spec"]["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            context = container["securityContext"]
            if not context.get("readOnlyRootFilesystem"):
                assert "no-read-only-root-fs" in departures, container["name"]
            if not context.get("runAsNonRoot"):
                assert "run-as-non-root" in departures, container["name"]
            else:
                assert context["runAsUser"] > 0


def test_init_containers_and_the_prepull_daemonsets_run_unprivileged_on_a_read_only_root(shipped):
    for workload in _workloads(shipped):
        pod = workload["spec"]["template"]["spec"]
        prepulled = workload["metadata"]["name"].startswith("image-cache-")
        for container in pod.get("initContainers", []) + (pod["containers"] if prepulled else []):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True and context["runAsNonRoot"] is True, container["name"]


def test_liveness_probe_or_a_stated_reason(shipped):
    for workload in _workloads(shipped):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert "livenessProbe" in container or "no-liveness-probe" in _departures(workload), container["name"]
            assert "readinessProbe" in container or "no-readiness-probe" in _departures(workload), container["name"]


def test_cpu_limits_and_pull_policy_are_stated_departures_on_every_workload(shipped):
    for workload in _workloads(shipped):
        departures = _departures(workload)
        assert {"unset-cpu-requirements", "CKV_K8S_11", "CKV_K8S_15"} <= departures
        for container in workload["spec"]["template"]["spec"]["containers"]:
            assert "cpu" in container["resources"]["requests"] and "cpu" not in container["resources"]["limits"]


def test_service_account_token_only_for_pods_that_call_the_api(shipped):
    for workload in _workloads(shipped):
        pod = workload["spec"]["template"]["spec"]
        if workload["metadata"]["name"] in CALLS_THE_KUBERNETES_API:
            assert pod.get("automountServiceAccountToken") is not False
            assert "CKV_K8S_38" in _departures(workload)
        else:
            assert pod["automountServiceAccountToken"] is False, workload["metadata"]["name"]


def test_host_paths_carry_their_reason_and_weights_are_mounted_read_only(shipped):
    for workload in _workloads(shipped):
        pod = workload["spec"]["template"]["spec"]
        host_paths = {v["name"] for v in pod.get("volumes", []) if "hostPath" in v}
        if host_paths:
            assert workload["metadata"]["annotations"]["warmstart.io/host-paths"], workload["metadata"]["name"]
        if workload["kind"] == "Deployment":
            for container in pod["containers"]:
                mounts = {m["name"]: m for m in container["volumeMounts"]}
                if "weights" in mounts:
                    assert mounts["weights"]["readOnly"] is True  # the pod only reads the node copy
                assert mounts["entry"]["readOnly"] is True


@pytest.fixture
def network_policies(shipped) -> dict[str, dict]:
    manifests = shipped.manifests()
    return {
        p["metadata"]["namespace"]: p
        for p in of_kind(manifests, "NetworkPolicy")
        if p["metadata"]["namespace"] != "warmstart-system"
    }


def test_one_network_policy_per_model_admits_only_its_clients_on_the_serving_port(shipped, network_policies):
    from warmstart.catalog import default_catalog
    from warmstart.workload import plan_model

    manifests = shipped.manifests()
    deployments = {d["metadata"]["namespace"]: d for d in of_kind(manifests, "Deployment")}
    assert set(network_policies) == {m.name for m in shipped.config.models}
    for model in shipped.config.models:
        spec = network_policies[model.name]["spec"]
        assert spec["podSelector"] == deployments[model.name]["spec"]["selector"]
        assert spec["policyTypes"] == ["Ingress"]  # egress stays open: S3, the registry, the Kubernetes API
        (rule,) = spec["ingress"]
        assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]
        peer, *prometheus = rule["from"]
        (expression,) = peer["namespaceSelector"]["matchExpressions"]
        clients = plan_model(model, shipped.config, default_catalog()).client_namespaces
        assert expression == {
            "key": "kubernetes.io/metadata.name",
            "operator": "In",
            "values": sorted({model.name, *clients}),
        }
        # An autoscaled model's pods also admit its environment's Prometheus server (/metrics on that port), not
        # the rest of its namespace (the adapter).
        assert prometheus == (
            [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "warmstart-monitoring"}},
                    "podSelector": {
                        "matchLabels": {"app.kubernetes.io/component": "server", "app.kubernetes.io/name": "prometheus"}
                    },
                }
            ]
            if model.autoscaling
            else []
        )
        assert clients == sorted(shipped.config.serving.client_namespaces)  # no model overrides them here


def test_nothing_may_connect_to_warmstarts_own_pods_but_scrapers_to_the_metrics_port(shipped):
    manifests = shipped.manifests()
    policies = {
        p["metadata"]["name"]: p["spec"]
        for p in of_kind(manifests, "NetworkPolicy")
        if p["metadata"]["namespace"] == "warmstart-system"
    }
    assert policies["no-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}  # every pod, no ingress rule
    # The one opening: the agent's metrics port, from the VPC (the managed collector's interfaces) only.
    metrics = policies.pop("warmstart-agent-metrics")
    assert set(policies) == {"no-ingress"}
    assert metrics["podSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "warmstart-agent", "app.kubernetes.io/part-of": "warmstart"}
    }
    (rule,) = metrics["ingress"]
    assert rule["from"] == [{"ipBlock": {"cidr": shipped.config.network.cidr}}]
    assert rule["ports"] == [{"port": shipped.config.metrics.port, "protocol": "TCP"}]


POD_TEMPLATE_KINDS = ("Deployment", "DaemonSet", "Job", "StatefulSet", "ReplicaSet")


def _pod_specs(objects: list[dict]) -> list[tuple[str, dict]]:
    return [
        (f"{o['kind']}/{o['metadata'].get('namespace')}/{o['metadata']['name']}", o["spec"]["template"]["spec"])
        for o in objects
        if o["kind"] in POD_TEMPLATE_KINDS
    ]


def test_no_pod_gets_service_link_variables(shipped, tmp_path):
    """kubelet adds <SERVICE>_PORT=tcp://... for every Service of the namespace unless the pod turns service links
    off; the model's Service is named vllm, so every vLLM pod would get VLLM_PORT (and crash in vLLM 0.21.0). Every
    pod template warmstart applies, through CDK or as a plain manifest in dist/, turns them off."""
    from render import render_workloads

    rendered = [o for path in render_workloads(shipped.config, tmp_path) for o in yaml.safe_load_all(path.read_text())]
    specs = _pod_specs(shipped.manifests()) + _pod_specs(rendered)
    kinds = {name.split("/")[0] for name, _ in specs}
    assert {"Deployment", "DaemonSet", "Job"} <= kinds  # vLLM, the agent and image caches, the image gates
    for name, spec in specs:
        assert spec.get("enableServiceLinks") is False, name
