"""An environment's objects applied to a test control plane, as `cdk deploy` and GitOps users apply them."""

from __future__ import annotations

import time

import yaml

from render import render_workloads
from tests.cluster.api import Api, in_order

WORKLOAD_KINDS = ("Deployment", "DaemonSet", "Job")


def rendered_objects(synthesized, tmp_path) -> list[dict]:
    """What `cdk deploy` applies (the manifests in the templates) and what GitOps users apply (dist/)."""
    dist = [o for path in render_workloads(synthesized.config, tmp_path) for o in yaml.safe_load_all(path.read_text())]
    return synthesized.manifests() + dist


def apply_all(api: Api, objects: list[dict], crds: list[dict], *, dry_run_first: bool = True) -> dict[str, list[str]]:
    """Applies the CRDs, then every object (a dry run first); returns the problems (refusals, warnings) by object."""
    problems: dict[str, list[str]] = {}
    for crd in crds:
        answer = api.apply(crd)
        assert answer.ok, f"CRD {crd['metadata']['name']}: {answer.message}"
        api.wait_established(crd["metadata"]["name"])
    for obj in in_order(objects):
        name = object_name(obj)
        for dry_run in (True, False) if dry_run_first else (False,):
            answer = api.apply(obj, dry_run=dry_run)
            found = problems.setdefault(name, [])
            if not answer.ok:
                found.append(f"{'dry run' if dry_run else 'apply'}: {answer.message}")
            found.extend(f"warning: {w}" for w in answer.warnings)
    return {k: v for k, v in problems.items() if v}


def object_name(obj: dict) -> str:
    return f"{obj['kind']}/{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def pod_of(workload: dict) -> dict:
    """A Pod as the workload's controller would create it (its template, in its namespace)."""
    template = workload["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload['metadata']['name']}-probe",
            "namespace": workload["metadata"]["namespace"],
            "labels": template["metadata"].get("labels", {}),
        },
        "spec": template["spec"],
    }


def create_pod(api: Api, pod: dict, *, dry_run: bool = True):
    namespace = pod["metadata"]["namespace"]
    query = "?dryRun=All&fieldValidation=Strict" if dry_run else "?fieldValidation=Strict"
    return api.request("POST", f"/api/v1/namespaces/{namespace}/pods{query}", pod)


def scale(api: Api, namespace: str, replicas: int, name: str = "vllm") -> None:
    """A Deployment's replicas, through its scale subresource (as `kubectl scale` and the HPA set them)."""
    api.merge_patch(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale", {"spec": {"replicas": replicas}})


def wait_until(condition, *, timeout: float = 60, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise TimeoutError(f"{what} did not hold within {timeout}s")
