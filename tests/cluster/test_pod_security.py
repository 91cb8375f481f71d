"""Pod Security levels and the host-path policy in a real API server (its PodSecurity admission plugin and its
ValidatingAdmissionPolicy evaluator), for both shipped environments:

- every namespace warmstart creates declares `enforce`, `audit` and `warn` at one level (kube/pod_security.py);
- every pod warmstart renders is admitted in its namespace at that level, with no warning, and the next stricter
  level refuses it (so the declared level is the strictest its pods meet);
- where pods need hostPaths, the host-path policy admits exactly the rendered ones and refuses the other shapes.
"""

from __future__ import annotations

import copy

import pytest

from contracts.agent_settings import AGENT_NAMESPACE
from kube.pod_security import LEVELS, PREFIX
from tests.cluster.api import Api
from tests.cluster.crds import crds_for
from tests.cluster.environment import WORKLOAD_KINDS, apply_all, create_pod, pod_of, rendered_objects, wait_until
from warmstart.workload import pod_records_root

pytestmark = pytest.mark.control_plane


@pytest.fixture(scope="module")
def applied(shipped, start_module_plane, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("dist")
    api = Api(start_module_plane(controllers=True))  # the controller manager makes each namespace's default account
    objects = rendered_objects(shipped, tmp_path)
    assert not apply_all(api, objects, crds_for(shipped.config), dry_run_first=False)
    for namespace in _namespaces(objects):
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        wait_until(lambda path=path: api.request("GET", path).ok, what=f"{namespace}'s default service account")
    workloads = {}
    for obj in objects:
        if obj["kind"] in WORKLOAD_KINDS:
            workloads[(obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
    (agent,) = [w for k, w in workloads.items() if k[2] == "warmstart-agent"]
    hostile = pod_of(agent)
    hostile["spec"] = {**hostile["spec"], "volumes": [*hostile["spec"]["volumes"], _host("/")]}
    # The policy takes effect once the server has loaded it: until the agent's namespace refuses a pod with "/"
    # (by the policy's name: any other refusal would not say the policy is there).
    wait_until(lambda: "warmstart-host-paths" in create_pod(api, hostile).message, what="the host-path policy")
    return shipped, api, objects, list(workloads.values())


def _host(path: str, name: str = "intruder") -> dict:
    return {"name": name, "hostPath": {"path": path}}


def _namespaces(objects: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "Namespace"}


def test_every_namespace_declares_one_level_for_all_three_modes(applied):
    shipped, api, objects, _ = applied
    for name in _namespaces(objects):
        labels = api.get(f"/api/v1/namespaces/{name}")["metadata"]["labels"]
        levels = {labels.get(f"{PREFIX}/{mode}") for mode in ("enforce", "audit", "warn")}
        assert len(levels) == 1 and levels <= set(LEVELS), (name, labels)
        versions = {labels.get(f"{PREFIX}/{mode}-version") for mode in ("enforce", "audit", "warn")}
        assert versions == {f"v{shipped.config.cluster.kubernetes_version}"}, (name, labels)


def _admitted_at(api: Api, pod: dict, level: str) -> bool:
    """Whether Pod Security at `level` admits the pod (in a namespace of that level, with its service account)."""
    trial = f"psa-{level}"
    if not api.request("GET", f"/api/v1/namespaces/{trial}").ok:
        labels = {f"{PREFIX}/enforce": level}
        created = api.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": trial, "labels": labels}},
        )
        assert created.ok, created.message
    for name in {pod["spec"].get("serviceAccountName", "default"), "default"}:
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        api.request("POST", f"/api/v1/namespaces/{trial}/serviceaccounts", account)
    moved = copy.deepcopy(pod)
    moved["metadata"]["namespace"] = trial
    answer = create_pod(api, moved)
    # PodSecurity runs before the admission policies: a refusal of theirs (a host path outside a warmstart
    # namespace) means Pod Security admitted it.
    return answer.ok or "violates PodSecurity" not in answer.message


def test_each_namespace_admits_its_pods_at_its_level_and_that_level_is_the_strictest_they_meet(applied):
    """Each pod in its own namespace: admitted, no warning. A namespace's level is the one all its pods meet: at
    the next stricter level at least one of them is refused."""
    _, api, objects, workloads = applied
    namespaces = _namespaces(objects)
    strictest_by_pod = {}
    for workload in workloads:
        pod = pod_of(workload)
        answer = create_pod(api, pod)
        assert answer.ok and not answer.warnings, (workload["metadata"]["name"], answer.message, answer.warnings)
        strictest_by_pod[(pod["metadata"]["namespace"], workload["metadata"]["name"])] = max(
            (level for level in LEVELS if _admitted_at(api, pod, level)), key=LEVELS.index
        )
    for namespace, obj in namespaces.items():
        levels = [level for (ns, _), level in strictest_by_pod.items() if ns == namespace]
        if not levels:
            continue  # the monitoring namespace: its pods come from Helm charts, not rendered here
        declared = obj["metadata"]["labels"][f"{PREFIX}/enforce"]
        assert declared == min(levels, key=LEVELS.index), (namespace, declared, strictest_by_pod)


def test_the_host_path_policy_refuses_every_other_shape_in_a_real_server(applied):
    shipped, api, _, workloads = applied
    records = pod_records_root(shipped.config)
    vllm = next(w for w in workloads if w["kind"] == "Deployment" and w["metadata"]["name"] == "vllm")
    agent = next(w for w in workloads if w["metadata"]["name"] == "warmstart-agent")
    container = vllm["spec"]["template"]["spec"]["containers"][0]["name"]

    def with_volume(workload: dict, volume: dict, mount: dict | None = None) -> dict:
        pod = copy.deepcopy(pod_of(workload))
        pod["spec"]["volumes"].append(volume)
        if mount:
            (target,) = [c for c in pod["spec"]["containers"] if c["name"] == container]
            target["volumeMounts"].append(mount)
        return pod

    refused = {
        "the records root, whole, in a model's namespace": with_volume(
            vllm, _host(records), {"name": "intruder", "mountPath": "/x"}
        ),
        "the node's root, read-only, in a model's namespace": with_volume(
            vllm, _host("/"), {"name": "intruder", "mountPath": "/x", "readOnly": True}
        ),
        "a host folder the agent does not mount, in its namespace": with_volume(agent, _host("/var/lib/kubelet")),
    }
    for case, pod in refused.items():
        answer = create_pod(api, pod)
        assert not answer.ok and "warmstart-host-paths" in answer.message, (case, answer.message)
    elsewhere = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    api.request("POST", "/api/v1/namespaces", elsewhere)
    writer = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "writer", "namespace": "team-a"},
        "spec": {
            "containers": [
                {"name": "c", "image": "busybox", "volumeMounts": [{"name": "intruder", "mountPath": "/x"}]}
            ],
            "volumes": [_host("/" * 16 + records.lstrip("/"))],
        },
    }
    answer = create_pod(api, writer)
    assert not answer.ok and "warmstart-host-paths" in answer.message, answer.message
    assert AGENT_NAMESPACE in {w["metadata"]["namespace"] for w in workloads}


def test_issue_45s_shapes_in_a_real_server(applied):
    """The hostile shapes of tests/hostile/test_hostile_admission.py, in a real API server (which also validates
    recursiveReadOnly: readOnly and no propagation other than None)."""
    shipped, api, _, workloads = applied
    records = pod_records_root(shipped.config)
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}})
    account = "/api/v1/namespaces/team-a/serviceaccounts/default"
    wait_until(lambda: api.request("GET", account).ok, what="team-a's default service account")
    exporter_user = {"runAsUser": 65534, "runAsGroup": 65534, "runAsNonRoot": True, "fsGroup": 65534}

    def pod(name: str, path: str, mount: dict, *, pod_context=None, context=None, env=None) -> dict:
        container = {"name": "c", "image": "busybox", "volumeMounts": [{"name": "h", "mountPath": "/host", **mount}]}
        if context:
            container["securityContext"] = context
        if env:
            container["env"] = env
        spec = {"containers": [container], "volumes": [_host(path, "h")]}
        if pod_context:
            spec["securityContext"] = pod_context
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"}, "spec": spec}

    read_only = {"readOnly": True}
    exporter = {**read_only, "mountPropagation": "HostToContainer"}
    uid_env = [{"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}]
    refused = {
        "root reads /": pod("root-reader", "/", read_only),
        "node-exporter's chart as it is": pod("exporter", "/", exporter, pod_context=exporter_user),
        "root reads /proc, recursively read-only": pod("proc", "/proc", {**read_only, "recursiveReadOnly": "Enabled"}),
        "root reads /, recursively read-only": pod("rro", "/", {**read_only, "recursiveReadOnly": "Enabled"}),
        "root writes /": pod("root-writer", "/", {}),
        "a /proc link to the records, writable": pod("link", f"/proc/1/root{records}", {}),
        "its own record folder outside a model's namespace": pod(
            "records", records, {"subPathExpr": "$(POD_UID)"}, env=uid_env
        ),
    }
    for case, shape in refused.items():
        answer = create_pod(api, shape)
        assert not answer.ok and "warmstart-host-paths" in answer.message, (case, answer.message)
    admitted = {
        "node-exporter's chart without privilege escalation": pod(
            "exporter-fixed", "/", exporter, pod_context=exporter_user, context={"allowPrivilegeEscalation": False}
        ),
        "the GPU Operator's device plugin (privileged)": pod("operator", "/", exporter, context={"privileged": True}),
    }
    for case, shape in admitted.items():
        answer = create_pod(api, shape)
        assert answer.ok, (case, answer.message)
    vllm = next(w for w in workloads if w["kind"] == "Deployment" and w["metadata"]["name"] == "vllm")
    unconfined = copy.deepcopy(pod_of(vllm))
    unconfined["spec"]["securityContext"] = {"seccompProfile": {"type": "Unconfined"}}
    answer = create_pod(api, unconfined)
    assert not answer.ok and "warmstart-host-paths" in answer.message, answer.message
