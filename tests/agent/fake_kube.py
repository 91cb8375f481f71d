"""A fake Kubernetes API transport: answers from a small in-memory cluster and records every request.

Events are listed by `fieldSelector=involvedObject.uid=...`; ConfigMaps are written by server-side apply as the
Kubernetes 1.35 API server takes it (PATCH with application/apply-patch+yaml, a fieldManager, the object's
apiVersion, kind and name in the body, which must match the path), creating the object when it is absent."""

from __future__ import annotations

import copy
import urllib.parse
import uuid
from dataclasses import dataclass, field


@dataclass
class Recorded:
    method: str
    path: str
    query: dict
    body: dict | None
    content_type: str | None


@dataclass
class FakeCluster:
    nodes: dict[str, dict] = field(default_factory=dict)
    pods: list[dict] = field(default_factory=list)
    daemon_sets: dict[tuple[str, str], dict] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    config_maps: dict[tuple[str, str], dict] = field(default_factory=dict)
    requests: list[Recorded] = field(default_factory=list)
    fail_with: int | None = None

    def add_node(self, name: str, instance_type: str) -> None:
        # Every node the API server answers has a UID (the agent's starts ConfigMap is owned by it); the control-plane
        # tier found this fake's nodes without one.
        self.nodes[name] = {
            "metadata": {
                "name": name,
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"node/{name}")),
                "labels": {"node.kubernetes.io/instance-type": instance_type},
            }
        }

    def request(self, method, path, *, body=None, content_type=None):
        parsed = urllib.parse.urlparse(path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parsed.query).items()}
        self.requests.append(Recorded(method, parsed.path, query, copy.deepcopy(body), content_type))
        if self.fail_with:
            return self.fail_with, {"message": "injected failure"}
        parts = parsed.path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) == 4:
            node = self.nodes.get(parts[3])
            if node is None:
                return 404, {"message": "not found"}
            if method == "PATCH":
                assert content_type == "application/merge-patch+json"
                labels = node["metadata"].setdefault("labels", {})
                for key, value in body["metadata"]["labels"].items():
                    if value is None:
                        labels.pop(key, None)
                    else:
                        labels[key] = value
            return 200, copy.deepcopy(node)
        if parts == ["api", "v1", "pods"] and method == "GET":
            node = query["fieldSelector"].removeprefix("spec.nodeName=")
            selector = query.get("labelSelector", "")
            wanted = dict(pair.split("=") for pair in selector.split(",")) if selector else {}
            items = [
                p
                for p in self.pods
                if p["spec"]["nodeName"] == node and all(p["metadata"]["labels"].get(k) == v for k, v in wanted.items())
            ]
            return 200, {"items": copy.deepcopy(items)}
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 5 and parts[4] == "events" and method == "GET":
            uid = query["fieldSelector"].removeprefix("involvedObject.uid=")
            items = [
                e for e in self.events if e["involvedObject"]["uid"] == uid and e["metadata"]["namespace"] == parts[3]
            ]
            return 200, {"items": copy.deepcopy(items)}
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) == 6 and parts[4] == "configmaps":
            key = (parts[3], parts[5])
            if method == "GET":
                found = self.config_maps.get(key)
                return (
                    (200, copy.deepcopy(found)) if found else (404, {"message": f'configmaps "{parts[5]}" not found'})
                )
            if method == "PATCH":
                if content_type != "application/apply-patch+yaml" or not query.get("fieldManager"):
                    return 400, {"message": "apply needs application/apply-patch+yaml and a fieldManager"}
                if body.get("apiVersion") != "v1" or body.get("kind") != "ConfigMap":
                    return 400, {"message": "apply body must name apiVersion and kind"}
                if body["metadata"].get("name") != parts[5] or body["metadata"].get("namespace", parts[3]) != parts[3]:
                    return 400, {"message": "the name of the object does not match the name on the URL"}
                self.config_maps[key] = copy.deepcopy(body)
                return 200, copy.deepcopy(body)
        if (
            parts[:3] == ["apis", "apps", "v1"]
            and parts[3] == "namespaces"
            and parts[5] == "daemonsets"
            and method == "GET"
        ):
            daemon_set = self.daemon_sets.get((parts[4], parts[6]))
            if daemon_set is None:
                return 404, {"message": f'daemonsets.apps "{parts[6]}" not found'}
            return 200, copy.deepcopy(daemon_set)
        return 404, {"message": f"unhandled {method} {path}"}


def pod_uid(name: str) -> str:
    """The UID the API server would give the pod named `name` here (a UUID, as kubelet names pod folders)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{name}"))


def vllm_pod(*, name: str, node: str, model: str, host_path: str, ready: bool, uid: str | None = None) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": model,
            "uid": uid or pod_uid(name),
            "labels": {
                "app.kubernetes.io/name": "vllm",
                "app.kubernetes.io/part-of": "warmstart",
                "app.kubernetes.io/instance": model,
            },
        },
        "spec": {"nodeName": node, "volumes": [{"name": "compile-cache", "hostPath": {"path": host_path}}]},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }
