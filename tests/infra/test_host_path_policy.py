"""The host-path admission policy (node_agent/host_path_policy.py), as synthesized, evaluated by a real CEL
evaluator (common-expression-language) the way the API server evaluates a ValidatingAdmissionPolicy: match
conditions, variables in order, every validation. Kubernetes' CEL strings extension provides `replace` (every
occurrence); the evaluator here has none, so the test registers one with that meaning."""

from __future__ import annotations

import copy

import cel
import pytest
import yaml

from k8s.render import render_workloads
from node_agent.host_path_policy import POLICY_NAME
from tests.manifests import of_kind
from warmstart.workload import compile_cache_root, pod_records_root, weights_root

MODEL = "llama-3-3-70b"


@pytest.fixture(scope="module")
def policy(prod) -> dict:
    (found,) = [
        p for p in of_kind(prod.manifests(), "ValidatingAdmissionPolicy") if p["metadata"]["name"] == POLICY_NAME
    ]
    return found["spec"]


@pytest.fixture(scope="module")
def pod(prod, tmp_path_factory) -> dict:
    """The llama pod as the Deployment creates it (its template)."""
    out = tmp_path_factory.mktemp("dist")
    (path,) = [p for p in render_workloads(prod.config, out) if p.stem == MODEL]
    (deployment,) = [o for o in yaml.safe_load_all(path.read_text()) if o["kind"] == "Deployment"]
    template = deployment["spec"]["template"]
    return {"metadata": {**template["metadata"], "namespace": MODEL}, "spec": template["spec"]}


@pytest.fixture(scope="module")
def roots(prod) -> dict:
    return {
        "compile": compile_cache_root(prod.config),
        "weights": weights_root(prod.config),
        "records": pod_records_root(prod.config),
    }


def admitted(policy: dict, pod: dict, namespace: str = MODEL) -> bool:
    context = cel.Context(
        variables={"object": pod, "request": {"namespace": namespace, "operation": "CREATE"}},
        functions={"replace": lambda text, old, new: text.replace(old, new)},
    )
    if not all(cel.evaluate(c["expression"], context) for c in policy["matchConditions"]):
        return True
    variables: dict = {}
    for variable in policy["variables"]:
        context.add_variable("variables", variables)
        variables[variable["name"]] = cel.evaluate(variable["expression"], context)
    context.add_variable("variables", variables)
    return all(cel.evaluate(v["expression"], context) for v in policy["validations"])


def _with(pod: dict, *, volume: dict, mount: dict, container: str = "containers", env: list | None = None) -> dict:
    """The pod with one more volume and one more container (a sidecar someone added) that mounts it."""
    changed = copy.deepcopy(pod)
    changed["spec"]["volumes"].append(volume)
    intruder = {"name": "sidecar", "image": "busybox", "volumeMounts": [mount], **({"env": env} if env else {})}
    changed["spec"].setdefault(container, []).append(intruder)
    return changed


def _host(name: str, path: str) -> dict:
    return {"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}


def test_every_pod_warmstart_renders_is_admitted(policy, pod, prod, tmp_path):
    assert admitted(policy, pod)
    for path in render_workloads(prod.config, tmp_path):
        for deployment in (o for o in yaml.safe_load_all(path.read_text()) if o["kind"] == "Deployment"):
            template = deployment["spec"]["template"]
            namespace = deployment["metadata"]["namespace"]
            assert admitted(policy, {"metadata": template["metadata"], "spec": template["spec"]}, namespace)


def test_the_rendered_pod_mounts_only_its_own_record_folder(pod):
    (container,) = pod["spec"]["containers"]
    (records,) = [m for m in container["volumeMounts"] if m["name"] == "pod-records"]
    assert records["subPathExpr"] == "$(POD_UID)"
    assert [e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if e["name"] == "POD_UID"] == [
        "metadata.uid"
    ]


def _denied_cases(roots: dict) -> dict:
    mount = {"name": "h", "mountPath": "/h"}
    fp = "0123456789abcdef"
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
        "another model's compile folder": (_host("h", f"{roots['compile']}/qwen3-6-35b-a3b/{fp}"), mount, None),
        "the compile root": (_host("h", roots["compile"]), mount, None),
        "the agent's markers": (_host("h", roots["compile"] + "/.warmstart"), mount, None),
        "the weights root": (_host("h", roots["weights"]), mount, None),
        "a weights copy": (_host("h", roots["weights"] + "/llama-3-3-70b/" + fp), mount, None),
        "the node's root": (_host("h", "/"), mount, None),
        "the NVMe mount": (_host("h", roots["records"].rsplit("/warmstart", 1)[0]), mount, None),
        "the records root, doubled slashes": (_host("h", roots["records"].replace("/", "//")), mount, None),
        "the records root, /./ and a trailing slash": (
            _host("h", roots["records"].replace("/pods", "/./pods/")),
            mount,
            None,
        ),
    }


@pytest.mark.parametrize("case", list(_denied_cases({"records": "/r", "compile": "/c", "weights": "/w"})))
def test_a_writable_mount_of_a_warmstart_folder_in_another_form_is_refused(policy, pod, roots, case):
    volume, mount, env = _denied_cases(roots)[case]
    assert not admitted(policy, _with(pod, volume=volume, mount=mount, env=env))
    assert not admitted(policy, _with(pod, volume=volume, mount=mount, env=env, container="initContainers"))
    assert admitted(policy, _with(pod, volume=volume, mount={**mount, "readOnly": True}, env=env))  # reads: PSA's


def test_an_ephemeral_container_may_not_write_them_either(policy, pod, roots):
    changed = copy.deepcopy(pod)
    changed["spec"]["ephemeralContainers"] = [
        {"name": "debug", "image": "busybox", "volumeMounts": [{"name": "weights", "mountPath": "/w"}]}
    ]
    assert not admitted(policy, changed)


def test_its_own_compile_folder_and_unrelated_host_paths_are_the_pods_business(policy, pod, roots):
    own = _host("h", f"{roots['compile']}/{MODEL}/fedcba9876543210")
    assert admitted(policy, _with(pod, volume=own, mount={"name": "h", "mountPath": "/h"}))
    assert admitted(policy, _with(pod, volume=_host("h", "/var/log/app"), mount={"name": "h", "mountPath": "/h"}))


def test_the_agents_namespace_is_not_this_policys_business(policy, pod, roots):
    whole = _with(pod, volume=_host("h", roots["records"]), mount={"name": "h", "mountPath": "/h"})
    assert admitted(policy, whole, namespace="warmstart-system")
