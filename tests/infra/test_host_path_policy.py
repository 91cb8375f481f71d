"""The host-path admission policy (node_agent/host_path_policy.py), as synthesized, evaluated by a real CEL
evaluator (common-expression-language) the way the API server evaluates a ValidatingAdmissionPolicy: match
conditions, variables in order, every validation. Kubernetes' CEL strings extension provides `replace` (every
occurrence); the evaluator here has none, so the test registers one with that meaning. The control-plane tier
(tests/cluster) runs the same policy in a real kube-apiserver."""

from __future__ import annotations

import copy

import pytest
import yaml

from contracts.pod_labels import model_labels
from render import render_workloads
from tests.admission_policy import MODEL, OTHER, _host, _plain_pod, admitted
from tests.manifests import of_kind

FINGERPRINT = "0123456789abcdef"


def _with(pod: dict, *, volume: dict, mount: dict, container: str = "containers", env: list | None = None) -> dict:
    """The pod with one more volume and one more container (a sidecar someone added) that mounts it."""
    changed = copy.deepcopy(pod)
    changed["spec"]["volumes"].append(volume)
    intruder = {"name": "sidecar", "image": "busybox", "volumeMounts": [mount], **({"env": env} if env else {})}
    changed["spec"].setdefault(container, []).append(intruder)
    return changed


def test_every_pod_warmstart_renders_is_admitted(policy, pod, prod, tmp_path):
    assert admitted(policy, pod)
    for path in render_workloads(prod.config, tmp_path):
        for deployment in (o for o in yaml.safe_load_all(path.read_text()) if o["kind"] == "Deployment"):
            template = deployment["spec"]["template"]
            namespace = deployment["metadata"]["namespace"]
            labels = model_labels(namespace)
            assert admitted(policy, {"metadata": template["metadata"], "spec": template["spec"]}, namespace, labels)


def test_the_rendered_pod_mounts_only_its_own_record_folder(pod):
    (container,) = pod["spec"]["containers"]
    (records,) = [m for m in container["volumeMounts"] if m["name"] == "pod-records"]
    assert records["subPathExpr"] == "$(POD_UID)"
    assert [e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if e["name"] == "POD_UID"] == [
        "metadata.uid"
    ]


def _writable_cases(roots: dict) -> dict:
    """Writable mounts of a warmstart folder in a form warmstart does not render."""
    mount = {"name": "h", "mountPath": "/h"}
    return {
        "the records root, whole": (_host("h", roots["records"]), mount, None),
        "the records root by another variable": (
            _host("h", roots["records"]),
            {**mount, "subPathExpr": "$(OTHER)"},
            [{"name": "OTHER", "value": "5c1e8a52-3f0d-4b7e-9a61-0d2c4e6f8a10"}],
        ),
        "the records root, POD_UID overridden by a later literal": (
            _host("h", roots["records"]),
            {**mount, "subPathExpr": "$(POD_UID)"},
            [
                {"name": "POD_UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": "POD_UID", "value": "another-pods-uid"},
            ],
        ),
        "a record folder of another pod": (
            _host("h", roots["records"] + "/5c1e8a52-3f0d-4b7e-9a61-0d2c4e6f8a10"),
            mount,
            None,
        ),
        "another model's compile folder": (
            _host("h", f"{roots['compile']}/qwen3-6-35b-a3b/{FINGERPRINT}"),
            mount,
            None,
        ),
        "the compile root": (_host("h", roots["compile"]), mount, None),
        "the agent's markers": (_host("h", roots["compile"] + "/.warmstart"), mount, None),
        "the weights root": (_host("h", roots["weights"]), mount, None),
        "a node copy": (_host("h", roots["weights"] + "/llama-3-3-70b/" + FINGERPRINT), mount, None),
        "the records root, doubled slashes": (_host("h", roots["records"].replace("/", "//")), mount, None),
        "the records root, sixteen slashes in front": (_host("h", "/" * 16 + roots["records"]), mount, None),
        "the records root, /./ and a trailing slash": (
            _host("h", roots["records"].replace("/pods", "/./pods/")),
            mount,
            None,
        ),
        "the records root, /./ repeated": (_host("h", roots["records"].replace("/", "/./")), mount, None),
        "the records root, a trailing /.": (_host("h", roots["records"] + "/."), mount, None),
        "the records root, relative": (_host("h", roots["records"].lstrip("/")), mount, None),
    }


@pytest.mark.parametrize("case", list(_writable_cases({"records": "/r", "compile": "/c", "weights": "/w"})))
def test_another_namespace_may_not_write_a_warmstart_folder_in_another_form(policy, roots, case):
    volume, mount, env = _writable_cases(roots)[case]
    assert not admitted(policy, _plain_pod(volume=volume, mount=mount, env=env), OTHER)
    init = _plain_pod(volume=volume, mount=mount, env=env)
    init["spec"]["initContainers"] = init["spec"].pop("containers")
    assert not admitted(policy, init, OTHER)
    # Reading a warmstart folder forges nothing; a path the prefix check cannot read might hold a root, so reading it
    # asks what reading a parent of the roots asks (tests/hostile/test_hostile_admission.py).
    read_only = _plain_pod(volume=volume, mount={**mount, "readOnly": True}, env=env)
    canonical = volume["hostPath"]["path"].startswith("/") and "//" not in volume["hostPath"]["path"]
    canonical = canonical and "/./" not in volume["hostPath"]["path"] and not volume["hostPath"]["path"].endswith("/.")
    assert admitted(policy, read_only, OTHER) == canonical


def _containing_cases(roots: dict) -> dict:
    """Writable mounts of a folder that holds a warmstart root, or of /proc: admitted outside warmstart's namespaces
    to a container that is the node's root anyway (privileged: `kubectl debug node --profile=sysadmin`), refused to
    one that merely runs as root (tests/hostile/test_hostile_admission.py). A /proc link (`/proc/1/root`) is refused
    writable to anyone: another spelling of a folder."""
    return {
        "the node's root": _host("h", "/"),
        "the NVMe mount": _host("h", roots["records"].rsplit("/warmstart", 1)[0]),
        "/proc itself": _host("h", "/proc"),
        "a process's folder in /proc": _host("h", "/proc/1"),
    }


@pytest.mark.parametrize("case", list(_containing_cases({"records": "/r/warmstart/pods"})))
def test_a_folder_holding_the_roots_is_for_the_nodes_root_only_outside_warmstarts_namespaces(policy, pod, roots, case):
    volume = _containing_cases(roots)[case]
    mount = {"name": "h", "mountPath": "/h"}
    assert not admitted(policy, _plain_pod(volume=volume, mount=mount), OTHER)
    privileged = _plain_pod(volume=volume, mount=mount)
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert admitted(policy, privileged, OTHER)
    assert not admitted(policy, _with(pod, volume=volume, mount=mount))
    assert not admitted(policy, _with(pod, volume=volume, mount={**mount, "readOnly": True}))


def test_kubectl_debug_node_is_admitted_with_the_sysadmin_profile(policy):
    """The deploy guide's check of the NVMe array (docs/deploy.md): `kubectl debug node/<node>
    --profile=sysadmin` makes this pod
    (kubectl v1.35) in the default namespace, privileged: the node's root, which the policy leaves be. The legacy
    profile's pod (root, not privileged, `/` mounted) is refused: what it can do, any root pod could."""
    debug = {
        "metadata": {"name": "node-debugger-gpu-1-abcde"},
        "spec": {
            "hostIPC": True,
            "hostNetwork": True,
            "hostPID": True,
            "nodeName": "gpu-1",
            "containers": [
                {"name": "debugger", "image": "busybox", "volumeMounts": [{"name": "host-root", "mountPath": "/host"}]}
            ],
            "volumes": [{"name": "host-root", "hostPath": {"path": "/", "type": ""}}],
        },
    }
    assert not admitted(policy, debug, "default")
    debug["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    assert admitted(policy, debug, "default")


@pytest.mark.parametrize("case", list(_writable_cases({"records": "/r", "compile": "/c", "weights": "/w"})))
def test_a_models_namespace_may_not_mount_a_warmstart_folder_in_another_form_even_read_only(policy, pod, roots, case):
    volume, mount, env = _writable_cases(roots)[case]
    assert not admitted(policy, _with(pod, volume=volume, mount=mount, env=env))
    assert not admitted(policy, _with(pod, volume=volume, mount=mount, env=env, container="initContainers"))
    # The markers and the weights root are the pod's to read; the others are not its to mount at all.
    if case not in ("the agent's markers", "the weights root"):
        assert not admitted(policy, _with(pod, volume=volume, mount={**mount, "readOnly": True}, env=env))


def test_an_impostor_namespace_is_held_to_the_rules_for_other_namespaces(policy, roots):
    """Half the labels (or a copy of them on a namespace the chart did not create, which only tightens the rules)."""
    records = _plain_pod(volume=_host("h", roots["records"]), mount={"name": "h", "mountPath": "/h"})
    partial = {"app.kubernetes.io/name": "vllm"}
    assert not admitted(policy, records, OTHER, partial)
    assert not admitted(policy, records, OTHER, model_labels(OTHER))


def test_an_ephemeral_container_may_not_write_them_either(policy, pod):
    changed = copy.deepcopy(pod)
    changed["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": "busybox", "volumeMounts": [{"name": "weights", "mountPath": "/w"}]}
    ]
    assert not admitted(policy, changed)


@pytest.mark.parametrize(
    "change",
    [
        "privileged",
        "a capability added",
        "hostPID",
        "hostIPC",
        "hostNetwork",
        "a host port",
        "a persistent volume claim",
        "an unrelated hostPath, read-only",
        "the markers written",
        "the weights written",
    ],
)
def test_a_models_pod_stays_as_warmstart_renders_it(policy, pod, roots, change):
    changed = copy.deepcopy(pod)
    spec = changed["spec"]
    (container,) = spec["containers"]
    if change == "privileged":
        container.setdefault("securityContext", {})["privileged"] = True
    elif change == "a capability added":
        container.setdefault("securityContext", {})["capabilities"] = {"add": ["SYS_ADMIN"]}
    elif change in ("hostPID", "hostIPC", "hostNetwork"):
        spec[change] = True
    elif change == "a host port":
        container["ports"] = [*container.get("ports", []), {"containerPort": 9999, "hostPort": 9999}]
    elif change == "a persistent volume claim":
        spec["volumes"].append({"name": "claim", "persistentVolumeClaim": {"claimName": "c"}})
    elif change == "an unrelated hostPath, read-only":
        changed = _with(pod, volume=_host("h", "/var/log"), mount={"name": "h", "mountPath": "/h", "readOnly": True})
    else:
        volume = "weights" if change == "the weights written" else "warmstart-state"
        every = [c for name in ("initContainers", "containers") for c in spec.get(name, [])]
        mounts = [m for c in every for m in c.get("volumeMounts", []) if m["name"] == volume]
        assert mounts, f"the rendered pod mounts {volume}"
        for mount in mounts:
            mount.pop("readOnly", None)
    assert not admitted(policy, changed)


def test_its_own_compile_folder_is_the_pods_and_unrelated_host_paths_are_other_namespaces(policy, pod, roots):
    own = _host("h", f"{roots['compile']}/{MODEL}/fedcba9876543210")
    assert admitted(policy, _with(pod, volume=own, mount={"name": "h", "mountPath": "/h"}))
    unrelated = _plain_pod(volume=_host("h", "/var/log/app"), mount={"name": "h", "mountPath": "/h"})
    assert admitted(policy, unrelated, OTHER)


def test_the_agents_namespace_mounts_exactly_the_agents_host_folders(policy, prod, roots):
    (daemon_set,) = [o for o in of_kind(prod.manifests(), "DaemonSet") if o["metadata"]["name"] == "warmstart-agent"]
    agent = {"metadata": daemon_set["spec"]["template"]["metadata"], "spec": daemon_set["spec"]["template"]["spec"]}
    assert admitted(policy, agent, namespace="warmstart-system", labels={})
    for path in ("/", "/var/lib/kubelet", roots["records"] + "/x", "/var/log"):
        changed = _with(agent, volume=_host("h", path), mount={"name": "h", "mountPath": "/h", "readOnly": True})
        assert not admitted(policy, changed, namespace="warmstart-system", labels={}), path
    other_account = copy.deepcopy(agent)
    other_account["spec"]["serviceAccountName"] = "warmstart-image-gate"
    assert not admitted(policy, other_account, namespace="warmstart-system", labels={})
    for change in ("privileged", "hostPID"):
        escalated = copy.deepcopy(agent)
        if change == "privileged":
            escalated["spec"]["containers"][0].setdefault("securityContext", {})["privileged"] = True
        else:
            escalated["spec"]["hostPID"] = True
        assert not admitted(policy, escalated, namespace="warmstart-system", labels={}), change
