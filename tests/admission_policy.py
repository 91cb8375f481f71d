"""The host-path admission policy's harness, shared by the construct tests and the hostile ones: the policy
rendered from a config, pods of each shape, and whether a pod is admitted."""

from __future__ import annotations

import cel
import pytest
import yaml

from contracts.pod_labels import model_labels
from node_agent.host_path_policy import POLICY_NAME
from render import render_workloads
from tests.manifests import of_kind
from warmstart.workload import compile_cache_root, pod_records_root, weights_root

MODEL = "llama-3-3-70b"
OTHER = "team-a"  # a namespace warmstart did not create


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


def admitted(policy: dict, pod: dict, namespace: str = MODEL, labels: dict | None = None) -> bool:
    """Whether the API server would admit the pod; the namespace's labels are the chart's for a model's namespace
    unless given."""
    if labels is None:
        labels = model_labels(namespace) if namespace == MODEL else {}
    namespace_object = {"metadata": {"name": namespace, **({"labels": labels} if labels else {})}}
    context = cel.Context(
        variables={
            "object": pod,
            "request": {"namespace": namespace, "operation": "CREATE"},
            "namespaceObject": namespace_object,
        },
        functions={"replace": lambda text, old, new: text.replace(old, new)},
    )
    if not all(cel.evaluate(c["expression"], context) for c in policy.get("matchConditions", [])):
        return True
    variables: dict = {}
    for variable in policy["variables"]:
        context.add_variable("variables", variables)
        variables[variable["name"]] = cel.evaluate(variable["expression"], context)
    context.add_variable("variables", variables)
    return all(cel.evaluate(v["expression"], context) for v in policy["validations"])


def _host(name: str, path: str) -> dict:
    return {"name": name, "hostPath": {"path": path, "type": "DirectoryOrCreate"}}


def _plain_pod(*, volume: dict | None = None, mount: dict | None = None, env: list | None = None) -> dict:
    """A pod of another team's namespace."""
    container = {"name": "app", "image": "busybox", **({"volumeMounts": [mount]} if mount else {})}
    if env:
        container["env"] = env
    return {"metadata": {"name": "app"}, "spec": {"containers": [container], "volumes": [volume] if volume else []}}
